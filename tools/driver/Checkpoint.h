//===- Checkpoint.h - Parameter values from weight files --------*- C++ -*-===//
//
// gmopt-run's `--weights FILE` takes parameter values, matched by name, from
// one of three kinds of file:
//  - an ONNX model: its graph initializers;
//  - an ONNX Runtime on-device-training checkpoint (the FlatBuffers file
//    `checkpoint` that generate_artifacts writes, identifier "ODTC", schema
//    onnxruntime/core/flatbuffers/schema/ort_training_checkpoint.fbs): the
//    trainable and frozen parameters of its module state;
//  - a TensorProto sequence (`.pbseq`, ONNX Runtime's older checkpoint
//    format: a varint32 count, then per tensor a varint32 byte length and a
//    serialized onnx.TensorProto), or a directory holding `tensors.pbseq`.
// The FlatBuffers reader is written by hand against the published schema
// and checks every offset it follows, so a corrupt file is an error, never
// an out-of-bounds read.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_CHECKPOINT_H
#define GMOPT_TOOLS_DRIVER_CHECKPOINT_H

#include "tools/driver/TestDataSet.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace gmopt {

/// The kinds of file --weights accepts.
enum class WeightFileKind { OnnxModel, OrtCheckpoint, TensorSequence };

/// `ONNX model`, `ONNX Runtime checkpoint`, `TensorProto sequence`.
llvm::StringRef weightFileKindName(WeightFileKind kind);

/// Named parameter values read from one file.
struct WeightSet {
  /// The file they came from.
  std::string path;
  /// What kind of file it was.
  WeightFileKind kind = WeightFileKind::OnnxModel;
  /// The tensors, in file order.
  std::vector<NamedTensor> tensors;

  /// The tensor named \p name, or null.
  const NamedTensor *lookup(llvm::StringRef name) const;
};

/// Reads \p path, recognising its kind from its contents: the "ODTC"
/// FlatBuffers identifier, a `.pbseq` name (or a directory containing
/// `tensors.pbseq`), else an ONNX model. Messages start with the path.
llvm::Expected<WeightSet> readWeightFile(llvm::StringRef path);

/// Parses the bytes of an ONNX Runtime FlatBuffers checkpoint; \p name
/// starts every message. Fails for nominal checkpoints (no values) and for
/// checkpoints whose tensors live in an external data file.
llvm::Expected<std::vector<NamedTensor>>
parseOrtCheckpoint(llvm::StringRef bytes, llvm::StringRef name);

/// Parses a TensorProto sequence; external data is resolved in
/// \p externalDataDir. \p name starts every message.
llvm::Expected<std::vector<NamedTensor>>
parseTensorSequence(llvm::StringRef bytes, llvm::StringRef name,
                    llvm::StringRef externalDataDir);

/// Serializes \p tensors as a TensorProto sequence (the inverse of
/// parseTensorSequence for tensors without external data).
std::string writeTensorSequence(const std::vector<NamedTensor> &tensors);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_CHECKPOINT_H
