//===- OnnxTestModels.h - Synthetic ONNX models for unit tests --*- C++ -*-===//
//
// Builds small ONNX ModelProtos with the protobuf API for the import,
// round-trip and training-signature tests: a fluent ModelBuilder, an MLP
// training graph in ONNX Runtime's training_model.onnx pattern (forward,
// com.microsoft gradient ops, InPlaceAccumulatorV2 into accumulation
// buffers), a convolutional model, a structural isomorphism check of two
// Modules (same node sequence, ops, names, attributes, types and
// bitwise-equal constants), and import helpers that fail the test on error.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_ONNXTESTMODELS_H
#define GMOPT_TESTS_UNIT_ONNXTESTMODELS_H

#include "ir/Module.h"
#include "ir/serialization/Onnx.h"

#include "onnx/onnx_pb.h"

#include "gtest/gtest.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace gmopt {
namespace test {

/// One dimension in a test type: a static extent or a dim_param name.
struct DimSpec {
  DimSpec(int64_t extent) : extent(extent) {}
  DimSpec(const char *symbol) : symbol(symbol) {}
  int64_t extent = -1;
  std::string symbol;
};

/// Fluent construction of a ModelProto.
class ModelBuilder {
public:
  /// A model of \p irVersion importing ai.onnx at \p opset.
  explicit ModelBuilder(int64_t opset = 17, int64_t irVersion = 8) {
    model.set_ir_version(irVersion);
    model.set_producer_name("gmopt-test");
    addOpset("", opset);
    model.mutable_graph()->set_name("test_graph");
  }

  /// Imports \p domain at \p version.
  ModelBuilder &addOpset(const std::string &domain, int64_t version) {
    onnx::OperatorSetIdProto *opset = model.add_opset_import();
    opset->set_domain(domain);
    opset->set_version(version);
    return *this;
  }
  /// Imports com.microsoft at version 1.
  ModelBuilder &addMsOpset() { return addOpset("com.microsoft", 1); }

  static void setType(onnx::TypeProto &type, int32_t dtype,
                      const std::vector<DimSpec> &dims) {
    onnx::TypeProto::Tensor *tensor = type.mutable_tensor_type();
    tensor->set_elem_type(dtype);
    onnx::TensorShapeProto *shape = tensor->mutable_shape();
    for (const DimSpec &dim : dims) {
      onnx::TensorShapeProto::Dimension *d = shape->add_dim();
      if (dim.extent >= 0)
        d->set_dim_value(dim.extent);
      else if (!dim.symbol.empty())
        d->set_dim_param(dim.symbol);
    }
  }

  /// Adds a graph input of element type \p dtype (ONNX numbering).
  onnx::ValueInfoProto &input(const std::string &name, int32_t dtype,
                              const std::vector<DimSpec> &dims) {
    onnx::ValueInfoProto *info = graph().add_input();
    info->set_name(name);
    setType(*info->mutable_type(), dtype, dims);
    return *info;
  }
  /// Adds a typed graph output.
  onnx::ValueInfoProto &output(const std::string &name, int32_t dtype,
                               const std::vector<DimSpec> &dims) {
    onnx::ValueInfoProto *info = graph().add_output();
    info->set_name(name);
    setType(*info->mutable_type(), dtype, dims);
    return *info;
  }
  /// Adds a graph output without a type.
  onnx::ValueInfoProto &output(const std::string &name) {
    onnx::ValueInfoProto *info = graph().add_output();
    info->set_name(name);
    return *info;
  }
  /// Adds a value_info entry.
  onnx::ValueInfoProto &valueInfo(const std::string &name, int32_t dtype,
                                  const std::vector<DimSpec> &dims) {
    onnx::ValueInfoProto *info = graph().add_value_info();
    info->set_name(name);
    setType(*info->mutable_type(), dtype, dims);
    return *info;
  }

  /// Adds an initializer with raw_data holding \p values.
  template <typename T>
  onnx::TensorProto &initializer(const std::string &name, int32_t dtype,
                                 const std::vector<int64_t> &dims,
                                 const std::vector<T> &values) {
    onnx::TensorProto *tensor = graph().add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(dtype);
    for (int64_t d : dims)
      tensor->add_dims(d);
    tensor->set_raw_data(
        std::string(reinterpret_cast<const char *>(values.data()),
                    values.size() * sizeof(T)));
    return *tensor;
  }
  /// Adds an f32 initializer of \p dims filled with 0.01 * i - 0.1.
  onnx::TensorProto &floatInitializer(const std::string &name,
                                      const std::vector<int64_t> &dims) {
    int64_t count = 1;
    for (int64_t d : dims)
      count *= d;
    std::vector<float> values(count);
    for (int64_t i = 0; i < count; ++i)
      values[i] = 0.01f * float(i) - 0.1f;
    return initializer(name, onnx::TensorProto::FLOAT, dims, values);
  }

  /// Adds a node.
  onnx::NodeProto &node(const std::string &opType,
                        const std::vector<std::string> &inputs,
                        const std::vector<std::string> &outputs,
                        const std::string &name = "",
                        const std::string &domain = "") {
    onnx::NodeProto *n = graph().add_node();
    n->set_op_type(opType);
    n->set_name(name);
    if (!domain.empty())
      n->set_domain(domain);
    for (const std::string &in : inputs)
      n->add_input(in);
    for (const std::string &out : outputs)
      n->add_output(out);
    return *n;
  }

  static onnx::AttributeProto &attr(onnx::NodeProto &node,
                                    const std::string &name,
                                    onnx::AttributeProto::AttributeType type) {
    onnx::AttributeProto *a = node.add_attribute();
    a->set_name(name);
    a->set_type(type);
    return *a;
  }
  static void attrInt(onnx::NodeProto &node, const std::string &name,
                      int64_t v) {
    attr(node, name, onnx::AttributeProto::INT).set_i(v);
  }
  static void attrFloat(onnx::NodeProto &node, const std::string &name,
                        float v) {
    attr(node, name, onnx::AttributeProto::FLOAT).set_f(v);
  }
  static void attrString(onnx::NodeProto &node, const std::string &name,
                         const std::string &v) {
    attr(node, name, onnx::AttributeProto::STRING).set_s(v);
  }
  static void attrInts(onnx::NodeProto &node, const std::string &name,
                       const std::vector<int64_t> &v) {
    onnx::AttributeProto &a = attr(node, name, onnx::AttributeProto::INTS);
    for (int64_t x : v)
      a.add_ints(x);
  }
  static void attrFloats(onnx::NodeProto &node, const std::string &name,
                         const std::vector<float> &v) {
    onnx::AttributeProto &a = attr(node, name, onnx::AttributeProto::FLOATS);
    for (float x : v)
      a.add_floats(x);
  }

  onnx::GraphProto &graph() { return *model.mutable_graph(); }
  std::string bytes() const { return model.SerializeAsString(); }

  onnx::ModelProto model;
};

/// Knobs of makeOrtMlp.
struct MlpOptions {
  /// fc1's parameters are frozen (no gradient, no accumulator).
  bool frozenFc1 = false;
  /// ONNX Runtime's gradient accumulation (buffers, InPlaceAccumulatorV2,
  /// lazy_reset_grad). Without it the `P_grad` values are graph outputs.
  bool accumulate = true;
  /// Parameters are initializers rather than graph inputs.
  bool paramsAsInitializers = false;
  /// Batch dimension: "batch" (symbolic) or a static extent.
  DimSpec batch = DimSpec("batch");
};

/// An MLP training graph, 4 -> 8 -> 3, as ONNX Runtime's artifact generator
/// writes it: Gemm/Relu/Gemm/SoftmaxCrossEntropyLossInternal forward, the
/// loss seed `loss_grad` (an f32 scalar initializer holding 1), gradient
/// ops named `<node>_Grad/...`, and an InPlaceAccumulatorV2 per gradient.
inline onnx::ModelProto makeOrtMlp(const MlpOptions &opts = {}) {
  using TP = onnx::TensorProto;
  ModelBuilder b(17, 8);
  b.addMsOpset();
  b.input("input", TP::FLOAT, {opts.batch, 4});
  b.input("labels", TP::INT64, {opts.batch});
  struct Param {
    const char *name;
    std::vector<int64_t> dims;
    bool trainable;
  };
  std::vector<Param> params = {{"fc1.weight", {8, 4}, !opts.frozenFc1},
                               {"fc1.bias", {8}, !opts.frozenFc1},
                               {"fc2.weight", {3, 8}, true},
                               {"fc2.bias", {3}, true}};
  for (const Param &p : params) {
    if (opts.paramsAsInitializers) {
      b.floatInitializer(p.name, p.dims);
    } else {
      std::vector<DimSpec> dims(p.dims.begin(), p.dims.end());
      b.input(p.name, TP::FLOAT, dims);
    }
  }
  if (opts.accumulate) {
    for (const Param &p : params)
      if (p.trainable) {
        std::vector<DimSpec> dims(p.dims.begin(), p.dims.end());
        b.input(std::string(p.name) + "_grad.accumulation.buffer", TP::FLOAT,
                dims);
      }
    b.input("lazy_reset_grad", TP::BOOL, {1});
  }

  // ONNX Runtime's seed: an f32 scalar written with float_data.
  onnx::TensorProto *seed = b.graph().add_initializer();
  seed->set_name("loss_grad");
  seed->set_data_type(TP::FLOAT);
  seed->add_float_data(1.0f);
  b.initializer<int64_t>("reduce_axes_0", TP::INT64, {1}, {0});

  onnx::NodeProto *n = &b.node("Gemm", {"input", "fc1.weight", "fc1.bias"},
                               {"fc1_out"}, "Gemm_0");
  ModelBuilder::attrInt(*n, "transB", 1);
  b.node("Relu", {"fc1_out"}, {"relu_out"}, "Relu_1");
  n = &b.node("Gemm", {"relu_out", "fc2.weight", "fc2.bias"}, {"logits"},
              "Gemm_2");
  ModelBuilder::attrInt(*n, "transB", 1);
  n = &b.node("SoftmaxCrossEntropyLossInternal", {"logits", "labels"},
              {"loss", "log_prob"}, "SoftmaxCrossEntropyLoss_3",
              "com.microsoft");
  ModelBuilder::attrString(*n, "reduction", "mean");

  n = &b.node("SoftmaxCrossEntropyLossInternalGrad",
              {"loss_grad", "log_prob", "labels"}, {"logits_grad"},
              "SoftmaxCrossEntropyLoss_3_Grad/"
              "SoftmaxCrossEntropyLossInternalGrad_0",
              "com.microsoft");
  ModelBuilder::attrString(*n, "reduction", "mean");
  n = &b.node("Gemm", {"logits_grad", "relu_out"}, {"fc2.weight_grad"},
              "Gemm_2_Grad/Gemm_0");
  ModelBuilder::attrInt(*n, "transA", 1);
  n = &b.node("ReduceSum", {"logits_grad", "reduce_axes_0"}, {"fc2.bias_grad"},
              "Gemm_2_Grad/ReduceSum_1");
  ModelBuilder::attrInt(*n, "keepdims", 0);
  if (!opts.frozenFc1) {
    b.node("Gemm", {"logits_grad", "fc2.weight"}, {"relu_out_grad"},
           "Gemm_2_Grad/Gemm_2");
    b.node("ReluGrad", {"relu_out_grad", "relu_out"}, {"fc1_out_grad"},
           "Relu_1_Grad/ReluGrad_0", "com.microsoft");
    n = &b.node("Gemm", {"fc1_out_grad", "input"}, {"fc1.weight_grad"},
                "Gemm_0_Grad/Gemm_0");
    ModelBuilder::attrInt(*n, "transA", 1);
    n = &b.node("ReduceSum", {"fc1_out_grad", "reduce_axes_0"},
                {"fc1.bias_grad"}, "Gemm_0_Grad/ReduceSum_1");
    ModelBuilder::attrInt(*n, "keepdims", 0);
  }

  b.output("loss", TP::FLOAT, {});
  int accumulatorIndex = 0;
  for (const Param &p : params) {
    if (!p.trainable)
      continue;
    std::string grad = std::string(p.name) + "_grad";
    if (!opts.accumulate) {
      std::vector<DimSpec> dims(p.dims.begin(), p.dims.end());
      b.output(grad, TP::FLOAT, dims);
      continue;
    }
    b.node("InPlaceAccumulatorV2",
           {grad + ".accumulation.buffer", grad, "lazy_reset_grad"},
           {grad + ".accumulation.out"},
           "GradientAccumulator" + std::to_string(accumulatorIndex++),
           "com.microsoft");
    b.output(grad + ".accumulation.out", TP::BOOL, {1});
  }
  return b.model;
}

/// A small convolutional classifier (forward only): Conv, Relu, MaxPool,
/// Flatten, Gemm, ReduceMean to a scalar.
inline onnx::ModelProto makeConvModel() {
  using TP = onnx::TensorProto;
  ModelBuilder b(17, 8);
  b.input("image", TP::FLOAT, {"batch", 1, 8, 8});
  b.floatInitializer("conv.weight", {4, 1, 3, 3});
  b.floatInitializer("conv.bias", {4});
  b.floatInitializer("fc.weight", {10, 64});
  b.floatInitializer("fc.bias", {10});
  onnx::NodeProto *n = &b.node("Conv", {"image", "conv.weight", "conv.bias"},
                               {"conv_out"}, "Conv_0");
  ModelBuilder::attrInts(*n, "kernel_shape", {3, 3});
  ModelBuilder::attrInts(*n, "pads", {1, 1, 1, 1});
  ModelBuilder::attrInts(*n, "strides", {1, 1});
  b.node("Relu", {"conv_out"}, {"relu_out"}, "Relu_1");
  n = &b.node("MaxPool", {"relu_out"}, {"pool_out"}, "MaxPool_2");
  ModelBuilder::attrInts(*n, "kernel_shape", {2, 2});
  ModelBuilder::attrInts(*n, "strides", {2, 2});
  n = &b.node("Flatten", {"pool_out"}, {"flat"}, "Flatten_3");
  ModelBuilder::attrInt(*n, "axis", 1);
  n = &b.node("Gemm", {"flat", "fc.weight", "fc.bias"}, {"logits"}, "Gemm_4");
  ModelBuilder::attrInt(*n, "transB", 1);
  n = &b.node("ReduceMean", {"logits"}, {"score"}, "ReduceMean_5");
  ModelBuilder::attrInt(*n, "keepdims", 0);
  b.output("score", TP::FLOAT, {});
  return b.model;
}

/// Expects \p a and \p b to be the same graph: same inputs, initializers,
/// node sequence, ops, names, attributes, types, operands (position by
/// position), outputs, and bitwise-equal constants.
inline void expectIsomorphic(const Module &a, const Module &b) {
  const Graph &ga = a.getGraph(), &gb = b.getGraph();
  llvm::DenseMap<const Value *, const Value *> map;
  auto same = [&](const Value *va, const Value *vb, const std::string &where) {
    if (!va || !vb) {
      EXPECT_EQ(va == nullptr, vb == nullptr) << where;
      return;
    }
    EXPECT_EQ(va->getName(), vb->getName()) << where;
    EXPECT_EQ(va->getType(), vb->getType())
        << where << ": " << va->getType().str() << " vs "
        << vb->getType().str();
    EXPECT_EQ(va->hasData(), vb->hasData()) << where;
    if (va->hasData() && vb->hasData()) {
      EXPECT_TRUE(va->getData() == vb->getData()) << where << ": data differs";
    }
    map[va] = vb;
  };
  ASSERT_EQ(ga.getInputs().size(), gb.getInputs().size());
  for (size_t i = 0; i < ga.getInputs().size(); ++i)
    same(ga.getInputs()[i].get(), gb.getInputs()[i].get(),
         "input " + std::to_string(i));
  ASSERT_EQ(ga.getInitializers().size(), gb.getInitializers().size());
  for (size_t i = 0; i < ga.getInitializers().size(); ++i)
    same(ga.getInitializers()[i].get(), gb.getInitializers()[i].get(),
         "initializer " + std::to_string(i));
  ASSERT_EQ(ga.getNumNodes(), gb.getNumNodes());
  auto itB = gb.getNodes().begin();
  for (const Node &na : ga.getNodes()) {
    const Node &nb = *itB++;
    std::string where = "node " + na.describe();
    EXPECT_EQ(na.getOp(), nb.getOp()) << where;
    EXPECT_EQ(na.getName(), nb.getName()) << where;
    ASSERT_EQ(na.getNumOperands(), nb.getNumOperands()) << where;
    for (unsigned i = 0; i < na.getNumOperands(); ++i) {
      const Value *oa = na.getOperand(i), *ob = nb.getOperand(i);
      EXPECT_EQ(oa ? map.lookup(oa) : nullptr, ob) << where << " operand " << i;
    }
    ASSERT_EQ(na.getNumResults(), nb.getNumResults()) << where;
    for (unsigned i = 0; i < na.getNumResults(); ++i)
      same(na.getResult(i), nb.getResult(i),
           where + " result " + std::to_string(i));
    ASSERT_EQ(na.getAttrs().size(), nb.getAttrs().size()) << where;
    for (size_t i = 0; i < na.getAttrs().size(); ++i) {
      EXPECT_EQ(na.getAttrs()[i].name, nb.getAttrs()[i].name) << where;
      EXPECT_TRUE(na.getAttrs()[i].value == nb.getAttrs()[i].value)
          << where << " attribute " << na.getAttrs()[i].name;
    }
  }
  ASSERT_EQ(ga.getNumOutputs(), gb.getNumOutputs());
  for (unsigned i = 0; i < ga.getNumOutputs(); ++i)
    EXPECT_EQ(map.lookup(ga.getOutput(i)), gb.getOutput(i)) << "output " << i;
  EXPECT_EQ(a.opsetImports, b.opsetImports);
  EXPECT_EQ(a.irVersion, b.irVersion);
}

/// Imports \p model from its serialized bytes as "m.onnx".
inline llvm::Expected<std::unique_ptr<Module>>
importBytes(const onnx::ModelProto &model, OnnxImportOptions options = {}) {
  return importOnnxBytes(model.SerializeAsString(), "m.onnx", options);
}

/// Imports \p model as importBytes does; null (failing the test) on error.
inline std::unique_ptr<Module> importOk(const onnx::ModelProto &model,
                                        OnnxImportOptions options = {}) {
  auto module = importBytes(model, options);
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

/// The names of \p module's nodes, in order.
inline std::vector<std::string> nodeNames(const Module &module) {
  std::vector<std::string> names;
  for (const Node &node : module.getGraph().getNodes())
    names.push_back(node.getName().str());
  return names;
}

/// A model computing y = Relu(x) over f32[2,3].
inline ModelBuilder reluModel() {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 3});
  b.node("Relu", {"x"}, {"y"}, "r0");
  b.output("y", onnx::TensorProto::FLOAT, {2, 3});
  return b;
}

/// Marks \p tensor as stored in external data \p location at \p offset
/// (with \p length when given), dropping its raw_data.
inline void makeExternal(onnx::TensorProto &tensor, const std::string &location,
                         uint64_t offset,
                         std::optional<uint64_t> length = std::nullopt) {
  tensor.clear_raw_data();
  tensor.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const std::string &key, const std::string &value) {
    onnx::StringStringEntryProto *e = tensor.add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  if (length)
    add("length", std::to_string(*length));
}

} // namespace test
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_ONNXTESTMODELS_H
