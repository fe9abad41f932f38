//===- OnnxTensor.h - TensorProto <-> TensorData conversion -----*- C++ -*-===//
//
// Converts ONNX TensorProtos (raw_data, every typed data field, external
// data files) into gmopt's TensorData without copying bytes where the
// source allows it, and back into TensorProtos (always raw_data, or an
// external-data reference). External-data files are memory-mapped once per
// file and shared by every tensor that points into them.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_ONNXTENSOR_H
#define GMOPT_IR_ONNXTENSOR_H

#include "ir/Attribute.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <memory>
#include <string>

namespace onnx {
class TensorProto;
class TypeProto;
} // namespace onnx

namespace gmopt {

class TensorType;

/// Resolves the external-data references of TensorProtos against one
/// directory, mapping every referenced file at most once.
class ExternalDataResolver {
public:
  /// Resolves locations relative to \p baseDir ("" = current directory).
  explicit ExternalDataResolver(std::string baseDir)
      : baseDir(std::move(baseDir)) {}

  /// The whole mapped file at \p location (relative to the base directory).
  /// Rejects absolute locations, ones that leave the base directory (also
  /// through a symbolic link: the real path must lie inside the base
  /// directory's real path) and anything but a regular file.
  llvm::Expected<std::shared_ptr<llvm::MemoryBuffer>>
  getFile(llvm::StringRef location);

  /// The directory locations are relative to.
  llvm::StringRef getBaseDir() const { return baseDir; }

private:
  std::string baseDir;
  llvm::StringMap<std::shared_ptr<llvm::MemoryBuffer>> files;
};

/// Converts \p tensor into a TensorData. Bytes are copied from raw_data and
/// typed fields; external data is viewed in place (through \p resolver,
/// which may be null when the caller knows there is none). Messages name
/// the tensor but not the model file.
llvm::Expected<TensorData> importTensor(const onnx::TensorProto &tensor,
                                        ExternalDataResolver *resolver);

/// Like importTensor, but moves raw_data out of \p tensor instead of copying
/// it: the returned TensorData owns the former protobuf string buffer.
llvm::Expected<TensorData> importTensorStealing(onnx::TensorProto &tensor,
                                                ExternalDataResolver *resolver);

/// Fills \p tensor (dims, data_type, raw_data) from \p data. The name is
/// left to the caller.
void exportTensor(const TensorData &data, onnx::TensorProto &tensor);

/// Fills dims and data_type of \p tensor and records an external-data
/// reference to \p location at \p offset (bytes are written by the caller).
void exportTensorAsExternal(const TensorData &data, llvm::StringRef location,
                            uint64_t offset, onnx::TensorProto &tensor);

/// Converts an ONNX TypeProto to a TensorType. \p what names the value in
/// messages. A TypeProto with no value set gives an unranked tensor of
/// undefined element type.
llvm::Expected<TensorType> importType(const onnx::TypeProto &type,
                                      llvm::StringRef what);

/// Writes \p type into \p proto as a tensor type; symbolic dimensions become
/// dim_param, unknown ones are left empty, unranked types have no shape.
void exportType(const TensorType &type, onnx::TypeProto &proto);

} // namespace gmopt

#endif // GMOPT_IR_ONNXTENSOR_H
