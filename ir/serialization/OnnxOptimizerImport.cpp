//===- OnnxOptimizerImport.cpp - ONNX Runtime's optimizer_model.onnx ------===//
//
// Imports the optimizer graph ONNX Runtime's artifact generator writes next
// to training_model.onnx. That graph takes its parameters, gradients and
// moments as tensor sequences, which gmopt's IR does not have, and holds a
// single optimizer node; so it is read as what it means - which optimizer,
// with which attributes - and buildOptimizer merges that into the training
// module, binding each sequence to the trainable parameters. The reader
// checks the graph inputs exactly as ONNX Runtime's training API does
// (optimizer.cc, GraphInputsAreExpected) and reads the protobuf directly:
// the generator writes ir_version 10, which libonnx 1.12's checker rejects.
//
//===----------------------------------------------------------------------===//

#include "ir/Optimizer.h"

#include "ir/serialization/FileIO.h"

#include "onnx/onnx_pb.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <climits>

using namespace gmopt;

namespace {

/// The graph inputs ONNX Runtime's training API requires, in order.
const char *const kAdamWInputs[] = {
    "learning_rate",       "step", "params", "gradients", "first_order_moments",
    "second_order_moments"};
const char *const kSgdInputs[] = {"learning_rate", "params", "gradients"};

constexpr int64_t kMaxIrVersion = 10;

/// Reads optimizer graphs; every message starts with the file name.
class OptimizerModelReader {
public:
  explicit OptimizerModelReader(llvm::StringRef fileName)
      : fileName(fileName.str()) {}

  llvm::Expected<OptimizerSpec> read(const onnx::ModelProto &model);

private:
  llvm::Error error(const llvm::Twine &message) const {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s: %s",
                                   fileName.c_str(), message.str().c_str());
  }
  llvm::Error checkInputs(const onnx::GraphProto &graph,
                          llvm::ArrayRef<const char *> expected) const;
  llvm::Error readAttributes(const onnx::NodeProto &node,
                             OptimizerSpec &spec) const;

  std::string fileName;
};

/// `tensor(float)`, `seq(tensor(float))`, ... for messages.
std::string typeName(const onnx::TypeProto &type) {
  if (type.has_tensor_type())
    return "tensor(" +
           onnx::TensorProto_DataType_Name(
               static_cast<onnx::TensorProto_DataType>(
                   type.tensor_type().elem_type())) +
           ")";
  if (type.has_sequence_type())
    return "seq(" + typeName(type.sequence_type().elem_type()) + ")";
  return "a non-tensor type";
}

bool isTensorOf(const onnx::TypeProto &type, int32_t elemType) {
  return type.has_tensor_type() && type.tensor_type().elem_type() == elemType;
}

bool isFloatSequence(const onnx::TypeProto &type) {
  return type.has_sequence_type() &&
         isTensorOf(type.sequence_type().elem_type(),
                    onnx::TensorProto_DataType_FLOAT);
}

llvm::Error
OptimizerModelReader::checkInputs(const onnx::GraphProto &graph,
                                  llvm::ArrayRef<const char *> expected) const {
  std::vector<std::string> actual;
  for (const onnx::ValueInfoProto &input : graph.input())
    actual.push_back(input.name());
  if (!llvm::equal(actual, expected)) {
    auto list = [](auto names) {
      std::string text;
      for (const auto &name : names)
        text += (text.empty() ? "" : ", ") + std::string(name);
      return "[" + text + "]";
    };
    return error("graph inputs " + list(actual) + ", expected " +
                 list(expected) +
                 " (ONNX Runtime's training API requires these, in order)");
  }
  for (const onnx::ValueInfoProto &input : graph.input()) {
    const onnx::TypeProto &type = input.type();
    bool ok = input.name() == "learning_rate"
                  ? isTensorOf(type, onnx::TensorProto_DataType_FLOAT)
              : input.name() == "step"
                  ? isTensorOf(type, onnx::TensorProto_DataType_INT64)
                  : isFloatSequence(type);
    if (!ok)
      return error("graph input '" + input.name() + "' is " + typeName(type) +
                   ", expected " +
                   (input.name() == "learning_rate" ? "tensor(FLOAT)"
                    : input.name() == "step"        ? "tensor(INT64)"
                                                    : "seq(tensor(FLOAT))"));
  }
  return llvm::Error::success();
}

llvm::Error OptimizerModelReader::readAttributes(const onnx::NodeProto &node,
                                                 OptimizerSpec &spec) const {
  for (const onnx::AttributeProto &attr : node.attribute()) {
    const std::string &name = attr.name();
    bool isFloat = name == "alpha" || name == "beta" || name == "epsilon" ||
                   name == "weight_decay";
    bool isInt = name == "correct_bias" || name == "adam_mode";
    if (spec.kind != OptimizerKind::AdamW || (!isFloat && !isInt))
      return error("unknown attribute '" + name + "' of " + node.op_type() +
                   " (node " + node.name() + ")");
    auto wanted =
        isFloat ? onnx::AttributeProto::FLOAT : onnx::AttributeProto::INT;
    if (attr.type() != wanted)
      return error("attribute '" + name + "' of " + node.op_type() +
                   " must be " + (isFloat ? "a float" : "an int") + " (node " +
                   node.name() + ")");
    if (name == "alpha")
      spec.alpha = attr.f();
    else if (name == "beta")
      spec.beta = attr.f();
    else if (name == "epsilon")
      spec.epsilon = attr.f();
    else if (name == "weight_decay")
      spec.weightDecay = attr.f();
    else if (name == "correct_bias")
      spec.correctBias = attr.i();
    else
      spec.adamMode = attr.i();
  }
  if (llvm::Error err = spec.validate())
    return error(llvm::toString(std::move(err)) + " (node " + node.name() +
                 ")");
  return llvm::Error::success();
}

llvm::Expected<OptimizerSpec>
OptimizerModelReader::read(const onnx::ModelProto &model) {
  if (model.ir_version() < 3 || model.ir_version() > kMaxIrVersion)
    return error(llvm::formatv("unsupported ONNX ir_version {0} (gmopt reads "
                               "3 to {1})",
                               model.ir_version(), kMaxIrVersion));
  const onnx::GraphProto &graph = model.graph();
  if (graph.node_size() != 1)
    return error(llvm::formatv(
        "expected one optimizer node (com.microsoft AdamWOptimizer or "
        "SGDOptimizerV2), found {0} nodes",
        graph.node_size()));
  const onnx::NodeProto &node = graph.node(0);
  if (node.domain() != kMsDomain || (node.op_type() != "AdamWOptimizer" &&
                                     node.op_type() != "SGDOptimizerV2"))
    return error("unsupported optimizer node " + node.domain() +
                 (node.domain().empty() ? "" : ".") + node.op_type() +
                 " (gmopt imports com.microsoft AdamWOptimizer and "
                 "SGDOptimizerV2)");
  int64_t msOpset = 0;
  for (const onnx::OperatorSetIdProto &opset : model.opset_import())
    if (opset.domain() == kMsDomain)
      msOpset = opset.version();
  if (msOpset < 1)
    return error("the model does not import the com.microsoft domain");

  OptimizerSpec spec;
  spec.kind = node.op_type() == "AdamWOptimizer" ? OptimizerKind::AdamW
                                                 : OptimizerKind::SGD;
  // The op's own defaults for attributes the file leaves out.
  if (spec.kind == OptimizerKind::AdamW) {
    spec.epsilon = 1e-8f;
    spec.weightDecay = 1e-2f;
    spec.adamMode = 0;
  }
  llvm::ArrayRef<const char *> expected = spec.kind == OptimizerKind::AdamW
                                              ? llvm::ArrayRef(kAdamWInputs)
                                              : llvm::ArrayRef(kSgdInputs);
  if (llvm::Error err = checkInputs(graph, expected))
    return err;
  std::vector<std::string> operands(node.input().begin(), node.input().end());
  if (!llvm::equal(operands, expected))
    return error("node " + node.name() +
                 " must read the graph inputs in "
                 "order (an update_signal input is not supported here; gmopt "
                 "adds its own)");
  for (int i = 1; i < node.output_size(); ++i)
    if (!node.output(i).empty())
      return error("node " + node.name() + ": output " + node.output(i) +
                   " (an updated sequence) is not supported; gmopt updates "
                   "weights and moments in place");
  if (llvm::Error err = readAttributes(node, spec))
    return err;
  return spec;
}

} // namespace

llvm::Expected<OptimizerSpec>
gmopt::importOptimizerModelBytes(llvm::StringRef bytes,
                                 llvm::StringRef fileName) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "%s: not a valid ONNX model",
                                   fileName.str().c_str());
  return OptimizerModelReader(fileName).read(model);
}

llvm::Expected<OptimizerSpec>
gmopt::importOptimizerModelFile(llvm::StringRef path) {
  auto buffer = readFileBounded(path);
  if (!buffer)
    return buffer.takeError();
  return importOptimizerModelBytes((*buffer)->getBuffer(), path);
}
