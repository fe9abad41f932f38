//===- ScalarConstant.h - A float32 scalar initializer's value ---*- C++ -*-===//
//
// The value of a one-element float32 initializer, as the rewrites that fold
// or match a scale by a constant read it (fold-scale, fuse-attention).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_TRANSFORMS_SCALARCONSTANT_H
#define GMOPT_PASSES_TRANSFORMS_SCALARCONSTANT_H

#include "ir/IR.h"

#include <cstring>
#include <optional>

namespace gmopt {

/// The value of \p value if it is a float32 initializer of one element
/// whose bytes are in memory (not external data).
inline std::optional<float> f32ScalarConstant(const Value *value) {
  if (!value || !value->isInitializer())
    return std::nullopt;
  const TensorData &data = value->getData();
  const TensorType &type = data.getType();
  if (type.getDType() != DType::F32 || !type.hasStaticShape() ||
      type.getNumElements() != 1 || data.isExternal())
    return std::nullopt;
  llvm::ArrayRef<uint8_t> bytes = data.getBytes();
  if (bytes.size() != sizeof(float))
    return std::nullopt;
  float result;
  std::memcpy(&result, bytes.data(), sizeof(result));
  return result;
}

} // namespace gmopt

#endif // GMOPT_PASSES_TRANSFORMS_SCALARCONSTANT_H
