//===- InferenceExport.cpp - ONNX models in and out of a session ----------===//
//
// What a session reads from and writes to ONNX files directly: the input and
// output names of the training and eval models (ONNX Runtime's Module sorts
// them by name into user inputs, parameters and gradient buffers), and the
// inference model export: the eval model with its parameters as
// initializers, the requested outputs, and only the nodes those need.
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/SessionImpl.h"

#include "tools/driver/ToolSupport.h"
#include "tools/runtime/RuntimeSupport.h"

#include "ir/serialization/OnnxTensor.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"

#include <climits>

using namespace gmopt;
using runtime::makeError;

namespace {

llvm::Expected<onnx::ModelProto> readModelProto(llvm::StringRef path) {
  auto buffer = readInputFile(path);
  if (!buffer)
    return buffer.takeError();
  llvm::StringRef bytes = (*buffer)->getBuffer();
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return makeError(path + ": not a valid ONNX model");
  return model;
}

} // namespace

llvm::Expected<GraphNames> gmopt::readGraphNames(llvm::StringRef path) {
  auto model = readModelProto(path);
  if (!model)
    return model.takeError();
  GraphNames names;
  llvm::StringSet<> initializers;
  for (const onnx::TensorProto &tensor : model->graph().initializer())
    initializers.insert(tensor.name());
  // An input with an initializer of its name is a constant with a default.
  for (const onnx::ValueInfoProto &input : model->graph().input())
    if (!initializers.count(input.name()))
      names.inputs.push_back(input.name());
  for (const onnx::ValueInfoProto &output : model->graph().output())
    names.outputs.push_back(output.name());
  return names;
}

llvm::Error gmopt::writeInferenceModel(
    llvm::StringRef evalModel, llvm::StringRef path,
    llvm::ArrayRef<std::string> outputNames,
    const std::function<llvm::Expected<std::optional<TensorData>>(
        llvm::StringRef)> &parameterValue) {
  if (outputNames.empty())
    return makeError("an inference model needs at least one output");
  auto read = readModelProto(evalModel);
  if (!read)
    return read.takeError();
  onnx::ModelProto model = std::move(*read);
  onnx::GraphProto &graph = *model.mutable_graph();

  // The outputs: existing graph outputs, or values the graph describes.
  std::map<std::string, onnx::ValueInfoProto> described;
  for (const onnx::ValueInfoProto &info : graph.value_info())
    described[info.name()] = info;
  for (const onnx::ValueInfoProto &info : graph.output())
    described[info.name()] = info;
  llvm::StringSet<> produced;
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &output : node.output())
      produced.insert(output);
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> outputs;
  for (const std::string &name : outputNames) {
    if (!produced.count(name) && !described.count(name))
      return makeError(evalModel + ": the eval model has no value '" + name +
                       "' to export as an output");
    onnx::ValueInfoProto *info = outputs.Add();
    auto found = described.find(name);
    if (found != described.end())
      *info = found->second;
    else
      info->set_name(name);
  }
  graph.mutable_output()->Swap(&outputs);

  // Keep the nodes the outputs need, walking backwards.
  llvm::StringSet<> needed;
  for (const std::string &name : outputNames)
    needed.insert(name);
  std::vector<bool> keep(graph.node_size(), false);
  for (int i = graph.node_size() - 1; i >= 0; --i) {
    const onnx::NodeProto &node = graph.node(i);
    bool used = llvm::any_of(node.output(), [&](const std::string &output) {
      return needed.count(output);
    });
    if (!used)
      continue;
    keep[i] = true;
    for (const std::string &input : node.input())
      if (!input.empty())
        needed.insert(input);
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i != graph.node_size(); ++i)
    if (keep[i])
      *nodes.Add() = graph.node(i);
  graph.mutable_node()->Swap(&nodes);

  // Parameters become initializers; inputs nothing needs are dropped.
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  for (const onnx::ValueInfoProto &input : graph.input()) {
    if (!needed.count(input.name()))
      continue;
    auto value = parameterValue(input.name());
    if (!value)
      return value.takeError();
    if (!*value) {
      *inputs.Add() = input;
      continue;
    }
    onnx::TensorProto *initializer = graph.add_initializer();
    exportTensor(**value, *initializer);
    initializer->set_name(input.name());
  }
  graph.mutable_input()->Swap(&inputs);
  google::protobuf::RepeatedPtrField<onnx::TensorProto> initializers;
  for (const onnx::TensorProto &tensor : graph.initializer())
    if (needed.count(tensor.name()))
      *initializers.Add() = tensor;
  graph.mutable_initializer()->Swap(&initializers);

  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return makeError(path + ": the inference model is too large to serialize");
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return makeError(path + ": " + ec.message());
  os << bytes;
  os.close();
  if (os.has_error())
    return makeError(path + ": " + os.error().message());
  return llvm::Error::success();
}
