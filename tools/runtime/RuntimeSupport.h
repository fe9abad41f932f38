//===- RuntimeSupport.h - Helpers shared by gmopt-run's library -*- C++ -*-===//
//
// Internal to tools/runtime/Runtime*.cpp: the error constructors and the
// small tensor factories the loading, input-binding, training and comparison
// files all use. Not part of Runtime.h's interface.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_RUNTIME_RUNTIMESUPPORT_H
#define GMOPT_TOOLS_RUNTIME_RUNTIMESUPPORT_H

#include "ir/Attribute.h"
#include "ir/IR.h"
#include "ir/Types.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace gmopt {
namespace runtime {

/// A string error carrying \p message.
llvm::Error makeError(const llvm::Twine &message);

/// Prefixes \p err with `PATH: ` unless it already starts so.
llvm::Error withFile(llvm::StringRef path, llvm::Error err);

/// The name of \p value in single quotes, for messages.
std::string quoted(const Value *value);

/// A new tensor of \p type with every byte \p byte (allocated without
/// throwing).
llvm::Expected<TensorData> filledTensor(const TensorType &type, uint8_t byte);

/// A tensor of \p type (f32 or i64, as the optimizer's learning rate and
/// step are) with every element \p value.
TensorData valueTensor(const TensorType &type, double value);

} // namespace runtime
} // namespace gmopt

#endif // GMOPT_TOOLS_RUNTIME_RUNTIMESUPPORT_H
