//===- OnnxTensor.h - TensorProto <-> TensorData conversion -----*- C++ -*-===//
//
// Converts ONNX TensorProtos (raw_data, every typed data field, external
// data files) into gmopt's TensorData without copying bytes where the
// source allows it, and back into TensorProtos (always raw_data, or an
// external-data reference). External-data files are memory-mapped once per
// file and shared by every tensor that points into them. A lazy resolver
// (the model importer's) maps nothing at import: each external tensor
// becomes a lazy TensorData whose reference was checked (path inside the
// model directory; when the file is there, a regular file long enough),
// and whose file is mapped when its bytes are first wanted.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_SERIALIZATION_ONNXTENSOR_H
#define GMOPT_IR_SERIALIZATION_ONNXTENSOR_H

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
class ExternalDataResolver
    : public ExternalDataSource,
      public std::enable_shared_from_this<ExternalDataResolver> {
public:
  /// Resolves locations relative to \p baseDir ("" = current directory);
  /// importTensor maps external tensors at once.
  explicit ExternalDataResolver(std::string baseDir)
      : baseDir(std::move(baseDir)) {}

  /// A resolver with which importTensor maps nothing: external tensors
  /// become lazy TensorData that share this resolver.
  static std::shared_ptr<ExternalDataResolver> createLazy(std::string baseDir);

  /// What is known of one location without reading it.
  struct FileInfo {
    /// Whether a file is there (a missing one is not an error at import).
    bool present = false;
    /// Its size, when present.
    uint64_t size = 0;
    /// Its real path (links resolved), when present.
    std::string realPath;
  };

  /// Checks \p location without reading the file (once per location):
  /// rejects absolute locations, ones that leave the base directory (also
  /// through a symbolic link: the real path must lie inside the base
  /// directory's real path) and anything but a regular file. A file that
  /// does not exist is reported as not present, not as an error.
  llvm::Expected<FileInfo> inspect(llvm::StringRef location);

  /// The whole mapped file at \p location (relative to the base directory),
  /// checked as inspect() does; a missing file is an error here.
  llvm::Expected<std::shared_ptr<llvm::MemoryBuffer>>
  getFile(llvm::StringRef location) override;

  /// The directory locations are relative to.
  llvm::StringRef getBaseDir() const override { return baseDir; }

  /// Whether importTensor leaves external tensors unread.
  bool isLazy() const { return lazy; }

private:
  std::string baseDir;
  bool lazy = false;
  llvm::StringMap<FileInfo> inspected;
  llvm::StringMap<std::shared_ptr<llvm::MemoryBuffer>> files;
};

/// Converts \p tensor into a TensorData. Bytes are copied from raw_data and
/// typed fields; external data is viewed in place (through \p resolver,
/// which may be null when the caller knows there is none), or left unread
/// as a lazy TensorData when the resolver is lazy. Messages name the tensor
/// but not the model file.
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

#endif // GMOPT_IR_SERIALIZATION_ONNXTENSOR_H
