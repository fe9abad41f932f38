//===- Checkpoint.h - Parameter values from weight files --------*- C++ -*-===//
//
// gmopt-run's `--weights FILE` takes parameter values, matched by name, from
// one of three kinds of file:
//  - an ONNX model: its graph initializers;
//  - an ONNX Runtime on-device-training checkpoint (the FlatBuffers file
//    `checkpoint` that generate_artifacts and CheckpointState.save_checkpoint
//    write, identifier "ODTC", schema
//    onnxruntime/core/flatbuffers/schema/ort_training_checkpoint.fbs): the
//    trainable and frozen parameters of its module state, and its optimizer
//    groups (per group the step count, the initial learning rate and each
//    parameter's state tensors, AdamW's `momentum0` and `momentum1`) and
//    property bag, which OptimizerStateMap.h binds to the module's
//    optimizer state;
//  - a TensorProto sequence (`.pbseq`, ONNX Runtime's older checkpoint
//    format: a varint32 count, then per tensor a varint32 byte length and a
//    serialized onnx.TensorProto), or a directory holding `tensors.pbseq`.
//    gmopt-run's own `--save-weights X.pbseq` writes one: parameters, then
//    the optimizer state and step count under the graph's value names.
// A file that holds two tensors of one name is refused, naming it: which
// copy a lookup found would otherwise be an accident of file order.
// The FlatBuffers reader is written by hand against the published schema
// and checks every offset it follows, so a corrupt file is an error, never
// an out-of-bounds read; writeOrtCheckpoint (OrtCheckpointWriter.cpp) is
// its inverse, a file ONNX Runtime's CheckpointState.load_checkpoint loads.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_RUNTIME_CHECKPOINT_H
#define GMOPT_TOOLS_RUNTIME_CHECKPOINT_H

#include "tools/runtime/TestDataSet.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gmopt {

/// The kinds of file --weights accepts.
enum class WeightFileKind { OnnxModel, OrtCheckpoint, TensorSequence };

/// One parameter's optimizer state in an ONNX Runtime checkpoint.
struct ParameterOptimizerState {
  /// The parameter's name.
  std::string param;
  /// Its state tensors under ONNX Runtime's names (AdamW: `momentum0`, the
  /// first moment, and `momentum1`, the second), in file order.
  std::vector<NamedTensor> momentums;

  /// The state tensor named \p name, or null.
  const NamedTensor *lookup(llvm::StringRef name) const;
};

/// One optimizer group of an ONNX Runtime checkpoint (its training API
/// writes one, `group0`).
struct OptimizerGroup {
  /// The group's name.
  std::string name;
  /// The optimizer updates done so far. ONNX Runtime feeds step + 1 to the
  /// next update (AdamW's bias correction), as gmopt-run does.
  int64_t step = 0;
  /// The learning-rate scheduler's base rate (Optimizer.set_learning_rate
  /// leaves it alone; ONNX Runtime does not resume the rate from it).
  float initialLearningRate = 0.001f;
  /// Per parameter, its state.
  std::vector<ParameterOptimizerState> params;

  /// The state of parameter \p param, or null.
  const ParameterOptimizerState *lookup(llvm::StringRef param) const;
};

/// The user-defined properties of an ONNX Runtime checkpoint, each list in
/// file order.
struct PropertyBag {
  /// Integer properties (name, value).
  std::vector<std::pair<std::string, int64_t>> ints;
  /// Float properties (name, value).
  std::vector<std::pair<std::string, float>> floats;
  /// String properties (name, value).
  std::vector<std::pair<std::string, std::string>> strings;

  /// True when the bag holds no property.
  bool empty() const {
    return ints.empty() && floats.empty() && strings.empty();
  }
  /// The float property named \p name, if any.
  std::optional<float> lookupFloat(llvm::StringRef name) const;
};

/// The contents of an ONNX Runtime checkpoint.
struct OrtCheckpoint {
  /// The module state's requires_grad_params.
  std::vector<NamedTensor> trainable;
  /// The module state's frozen_params.
  std::vector<NamedTensor> frozen;
  /// The optimizer groups (none in generate_artifacts' initial checkpoint).
  std::vector<OptimizerGroup> optimizerGroups;
  /// The property bag.
  PropertyBag properties;
};

/// Named parameter values read from one file.
struct WeightSet {
  /// The file they came from.
  std::string path;
  /// What kind of file it was.
  WeightFileKind kind = WeightFileKind::OnnxModel;
  /// The tensors, in file order (an ONNX Runtime checkpoint: its trainable,
  /// then its frozen parameters), no two of one name.
  std::vector<NamedTensor> tensors;
  /// An ONNX Runtime checkpoint's optimizer groups; empty otherwise.
  std::vector<OptimizerGroup> optimizerGroups;
  /// An ONNX Runtime checkpoint's property bag; empty otherwise.
  PropertyBag properties;

  /// The tensor named \p name, or null.
  const NamedTensor *lookup(llvm::StringRef name) const;
};

/// Reads \p path, recognising its kind from its contents: the "ODTC"
/// FlatBuffers identifier, a `.pbseq` name (or a directory containing
/// `tensors.pbseq`), else an ONNX model. Messages start with the path. Two
/// tensors of one name are an error naming it.
llvm::Expected<WeightSet> readWeightFile(llvm::StringRef path);

/// Parses the bytes of an ONNX Runtime FlatBuffers checkpoint; \p name
/// starts every message. Fails for nominal checkpoints (no values), for
/// checkpoints whose tensors live in an external data file, and for names
/// given twice (two parameters, two groups, two states of one parameter in
/// a group, two state tensors of one name).
llvm::Expected<OrtCheckpoint> parseOrtCheckpoint(llvm::StringRef bytes,
                                                 llvm::StringRef name);

/// Serializes \p checkpoint as an ONNX Runtime FlatBuffers checkpoint
/// (version 2, identifier "ODTC"), which parseOrtCheckpoint and ONNX
/// Runtime's CheckpointState.load_checkpoint read back.
std::string writeOrtCheckpoint(const OrtCheckpoint &checkpoint);

/// Parses a TensorProto sequence; external data is resolved in
/// \p externalDataDir. \p name starts every message. Two entries of one
/// name are an error naming it.
llvm::Expected<std::vector<NamedTensor>>
parseTensorSequence(llvm::StringRef bytes, llvm::StringRef name,
                    llvm::StringRef externalDataDir);

/// Serializes \p tensors as a TensorProto sequence (the inverse of
/// parseTensorSequence for tensors without external data).
std::string writeTensorSequence(const std::vector<NamedTensor> &tensors);

} // namespace gmopt

#endif // GMOPT_TOOLS_RUNTIME_CHECKPOINT_H
