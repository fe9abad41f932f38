//===- CudaElementwiseDispatch.cpp - The CUDA table's elementwise entries -===//
//
// The n-ary elementwise entries: ONNX's unary, rounding, trigonometric and
// activation ops, the binary arithmetic ops and Sum, and com.microsoft's
// GELU family, their gradients and Scale. Each node maps to one op code of
// ElementwiseMath.h (its attributes as the launch's two scalar parameters,
// rounded to float as the CPU kernels round them) and one broadcast launch.
// The op code, storage, broadcast indexing and parameters are decoded once,
// when the node is prepared (ElementwiseDescriptor); Sum and Mean keep
// choosing their operand order per launch (an operand may share the
// output's bytes), so they decode their partial sums' indexing then.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/CudaKernels.h"

#include "llvm/ADT/StringMap.h"

#include <limits>
#include <memory>
#include <optional>
#include <tuple>

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// The elementwise op of \p node, if it is one.
std::optional<ElementwiseOp> elementwiseOpOf(const Node &node) {
  llvm::StringRef op = node.getOpType();
  bool ms = node.getDomain() == kMsDomain;
  if (!ms && node.getDomain() != kOnnxDomain)
    return std::nullopt;
  if (!ms) {
    static const llvm::StringMap<ElementwiseOp> onnxOps = {
        {"Relu", ElementwiseOp::Relu},
        {"Neg", ElementwiseOp::Neg},
        {"Abs", ElementwiseOp::Abs},
        {"Exp", ElementwiseOp::Exp},
        {"Log", ElementwiseOp::Log},
        {"Sqrt", ElementwiseOp::Sqrt},
        {"Reciprocal", ElementwiseOp::Reciprocal},
        {"Tanh", ElementwiseOp::Tanh},
        {"Sigmoid", ElementwiseOp::Sigmoid},
        {"Erf", ElementwiseOp::Erf},
        {"Add", ElementwiseOp::Add},
        {"Sub", ElementwiseOp::Sub},
        {"Mul", ElementwiseOp::Mul},
        {"Div", ElementwiseOp::Div},
        {"Pow", ElementwiseOp::Pow},
        {"Max", ElementwiseOp::Max},
        {"Min", ElementwiseOp::Min},
        {"Sum", ElementwiseOp::Add},
        {"Mean", ElementwiseOp::Add},
        {"PRelu", ElementwiseOp::PRelu},
        {"Mod", ElementwiseOp::Fmod},
        {"Clip", ElementwiseOp::Clip},
        {"Floor", ElementwiseOp::Floor},
        {"Ceil", ElementwiseOp::Ceil},
        {"Round", ElementwiseOp::Round},
        {"Sign", ElementwiseOp::Sign},
        {"Sin", ElementwiseOp::Sin},
        {"Cos", ElementwiseOp::Cos},
        {"Tan", ElementwiseOp::Tan},
        {"Asin", ElementwiseOp::Asin},
        {"Acos", ElementwiseOp::Acos},
        {"Atan", ElementwiseOp::Atan},
        {"Sinh", ElementwiseOp::Sinh},
        {"Cosh", ElementwiseOp::Cosh},
        {"Asinh", ElementwiseOp::Asinh},
        {"Acosh", ElementwiseOp::Acosh},
        {"Atanh", ElementwiseOp::Atanh},
        {"Softsign", ElementwiseOp::Softsign},
        {"Softplus", ElementwiseOp::Softplus},
        {"Mish", ElementwiseOp::Mish},
        {"HardSwish", ElementwiseOp::HardSwish},
        {"LeakyRelu", ElementwiseOp::LeakyRelu},
        {"Elu", ElementwiseOp::Elu},
        {"Celu", ElementwiseOp::Celu},
        {"Selu", ElementwiseOp::Selu},
        {"HardSigmoid", ElementwiseOp::HardSigmoid},
        {"ThresholdedRelu", ElementwiseOp::ThresholdedRelu},
    };
    if (op == "Gelu")
      return node.getStringAttr("approximate", "none") == "tanh"
                 ? ElementwiseOp::GeluTanh
                 : ElementwiseOp::GeluExact;
    auto it = onnxOps.find(op);
    if (it == onnxOps.end())
      return std::nullopt;
    return it->second;
  }
  static const llvm::StringMap<ElementwiseOp> msOps = {
      {"Gelu", ElementwiseOp::GeluExact},
      {"BiasGelu", ElementwiseOp::BiasGeluExact},
      {"ReluGrad", ElementwiseOp::ReluGrad},
      {"GeluGrad", ElementwiseOp::GeluGrad},
      {"FastGeluGrad", ElementwiseOp::FastGeluGrad},
      {"SigmoidGrad", ElementwiseOp::SigmoidGrad},
      {"TanhGrad", ElementwiseOp::TanhGrad},
      {"BiasGeluGrad_dX", ElementwiseOp::BiasGeluGradExact},
      {"BiasFastGeluGrad_dX", ElementwiseOp::BiasGeluGradTanh},
      {"QuickGelu", ElementwiseOp::QuickGelu},
      {"QuickGeluGrad", ElementwiseOp::QuickGeluGrad},
  };
  if (op == "Scale")
    return node.getIntAttr("scale_down", 0) ? ElementwiseOp::ScaleDown
                                            : ElementwiseOp::ScaleUp;
  if (op == "FastGelu")
    return node.getNumOperands() > 1 && node.getOperand(1)
               ? ElementwiseOp::BiasGeluTanh
               : ElementwiseOp::GeluTanh;
  auto it = msOps.find(op);
  if (it == msOps.end())
    return std::nullopt;
  return it->second;
}

/// Scale(X, scale) with a constant scale: the factor the CPU kernel uses,
/// float(scale_down ? 1 / scale : scale) computed in double.
std::optional<float> constantScaleFactor(const Node &node) {
  if (node.getDomain() != kMsDomain || node.getOpType() != "Scale")
    return std::nullopt;
  const Value *scale = node.getOperand(1);
  if (!scale || !scale->isInitializer())
    return std::nullopt;
  if (llvm::Error err = scale->getData().load()) {
    // Left to the binary path, which reports nothing better; the import
    // already read constant data.
    llvm::consumeError(std::move(err));
    return std::nullopt;
  }
  if (scale->getData().getNumElements() != 1)
    return std::nullopt;
  double s = scale->getData().getFloatElement(0);
  return static_cast<float>(node.getIntAttr("scale_down", 0) ? 1.0 / s : s);
}

/// The scalar attributes \p op reads, with ONNX's defaults, as the CPU
/// kernels round them (to float).
std::pair<float, float> elementwiseParams(const Node &node, ElementwiseOp op) {
  switch (op) {
  case ElementwiseOp::LeakyRelu:
    return {node.getFloatAttr("alpha", 0.01f), 0.0f};
  case ElementwiseOp::Elu:
  case ElementwiseOp::Celu:
  case ElementwiseOp::ThresholdedRelu:
    return {node.getFloatAttr("alpha", 1.0f), 0.0f};
  case ElementwiseOp::Selu:
    return {node.getFloatAttr("alpha", 1.67326319217681884765625f),
            node.getFloatAttr("gamma", 1.05070102214813232421875f)};
  case ElementwiseOp::HardSigmoid:
    return {node.getFloatAttr("alpha", 0.2f), node.getFloatAttr("beta", 0.5f)};
  default:
    // QuickGelu's alpha.
    return {node.getFloatAttr("alpha", 1.702f), 0.0f};
  }
}

/// Clip's bounds: the min/max attributes (opset < 11) or constant min/max
/// inputs, each as the CPU rounds it (to float); absent bounds are the
/// float range's ends, as on the CPU. Inputs only known at run time are
/// refused (the kernel takes its bounds as launch parameters).
llvm::Expected<std::pair<float, float>> clipBounds(const Node &node) {
  float lo = node.getFloatAttr("min", -std::numeric_limits<float>::max());
  float hi = node.getFloatAttr("max", std::numeric_limits<float>::max());
  for (unsigned i : {1u, 2u}) {
    const Value *bound =
        i < node.getNumOperands() ? node.getOperand(i) : nullptr;
    if (!bound)
      continue;
    llvm::StringRef what = i == 1 ? "min" : "max";
    if (!bound->isInitializer())
      return nodeError(node, "the " + what +
                                 " input must be a constant (an initializer) "
                                 "for the CUDA kernel");
    if (llvm::Error err = bound->getData().load())
      return err;
    if (bound->getData().getNumElements() != 1)
      return nodeError(node, "the " + what + " input must be a scalar");
    (i == 1 ? lo : hi) = float(bound->getData().getFloatElement(0));
  }
  return std::make_pair(lo, hi);
}

llvm::Error checkElementwise(const Node &node) {
  if (constantScaleFactor(node))
    return commonFloatStorage(node, {1}).takeError();
  std::optional<ElementwiseOp> op = elementwiseOpOf(node);
  if (!op)
    return nodeError(node, "not an elementwise op");
  if (*op == ElementwiseOp::Celu && elementwiseParams(node, *op).first == 0)
    return nodeError(node, "alpha must not be 0");
  // Float tensors only on CUDA (integer Mod runs on the CPU backend).
  if (*op == ElementwiseOp::Fmod && node.getIntAttr("fmod", 0) == 0)
    return nodeError(node, "floating-point Mod requires fmod = 1");
  unsigned present = 0;
  for (Value *operand : node.getOperands())
    present += operand != nullptr;
  bool variadic = node.getOpType() == "Sum" || node.getOpType() == "Mean";
  if (*op == ElementwiseOp::Clip) {
    if (auto bounds = clipBounds(node); !bounds)
      return bounds.takeError();
    present = node.getOperand(0) != nullptr;
  }
  if (variadic ? present < 1 : present != unsigned(operandCount(*op)))
    return nodeError(node, "expected " + llvm::Twine(operandCount(*op)) +
                               " operands, got " + llvm::Twine(present));
  if (auto storage = commonFloatStorage(node); !storage)
    return storage.takeError();
  Shape out = shapeOf(node.getResult(0));
  for (Value *operand : node.getOperands())
    if (operand) {
      Shape strides;
      if (!broadcastStrides(shapeOf(operand), out, strides))
        return nodeError(node, "operand shapes do not broadcast");
    }
  return llvm::Error::success();
}

/// Sum (and Mean's sum): out = in0 (+ in1 (+ ...)), one binary launch per
/// extra operand.
llvm::Error runSum(CudaCall &call, Storage storage, const Shape &out) {
  const Node &node = call.node;
  int64_t elements = product(out);
  llvm::SmallVector<unsigned, 4> present;
  for (unsigned i = 0; i < node.getNumOperands(); ++i)
    if (call.in(i))
      present.push_back(i);
  // An operand whose bytes the plan gave the output must be read before
  // the first partial sum overwrites it: it goes first.
  for (size_t k = 1; k < present.size(); ++k)
    if (call.inPtr(present[k]) == call.outPtr(0))
      std::swap(present[0], present[k]);
  if (present.size() == 1) {
    auto ix = broadcastIndexing(node, {shapeOf(call.in(present[0]))}, out);
    if (!ix)
      return ix.takeError();
    return call.check(launchElementwise(ElementwiseOp::Identity, storage,
                                        call.inPtr(present[0]), nullptr,
                                        nullptr, call.outPtr(0), elements, *ix,
                                        call.ctx.stream),
                      "Sum kernel");
  }
  for (size_t k = 1; k < present.size(); ++k) {
    const void *lhs = k == 1 ? call.inPtr(present[0]) : call.outPtr(0);
    Shape lhsShape = k == 1 ? shapeOf(call.in(present[0])) : out;
    auto ix =
        broadcastIndexing(node, {lhsShape, shapeOf(call.in(present[k]))}, out);
    if (!ix)
      return ix.takeError();
    if (llvm::Error err = call.check(
            launchElementwise(ElementwiseOp::Add, storage, lhs,
                              call.inPtr(present[k]), nullptr, call.outPtr(0),
                              elements, *ix, call.ctx.stream),
            "Sum kernel"))
      return err;
  }
  return llvm::Error::success();
}

/// An elementwise node decoded once.
struct ElementwiseDescriptor final : CudaKernelDescriptor {
  enum class Form {
    /// Scale(X, constant): X times a launch parameter.
    ConstantScale,
    /// Sum and Mean: one launch per extra operand (then Mean's division).
    Sum,
    Mean,
    /// One broadcast launch of op over the present operands.
    Broadcast,
  };
  Form form = Form::Broadcast;
  ElementwiseOp op = ElementwiseOp::Identity;
  Storage storage = Storage::F32;
  Shape out;
  int64_t elements = 0;
  /// The launch's indexing (Mean: the division's).
  BroadcastIndexing indexing;
  float param = 0, param2 = 0;
  /// The launch's name in errors.
  const char *what = "elementwise kernel";
};

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareElementwise(const Node &node, const KernelPreparation &,
                   CudaKernelContext &) {
  if (llvm::Error err = checkElementwise(node))
    return err;
  auto d = std::make_unique<ElementwiseDescriptor>();
  d->out = shapeOf(node.getResult(0));
  d->elements = product(d->out);
  auto setIndexing = [&](llvm::ArrayRef<Shape> operands) -> llvm::Error {
    auto ix = broadcastIndexing(node, operands, d->out);
    if (!ix)
      return ix.takeError();
    d->indexing = *ix;
    return llvm::Error::success();
  };
  if (std::optional<float> factor = constantScaleFactor(node)) {
    d->form = ElementwiseDescriptor::Form::ConstantScale;
    d->op = ElementwiseOp::MulParam;
    d->storage = *commonFloatStorage(node, {1});
    d->param = *factor;
    d->what = "Scale kernel";
    if (llvm::Error err = setIndexing({shapeOf(node.getOperand(0))}))
      return err;
    return d;
  }
  d->op = *elementwiseOpOf(node);
  d->storage = *commonFloatStorage(node);
  if (d->op == ElementwiseOp::Clip) {
    std::tie(d->param, d->param2) = *clipBounds(node);
    d->what = "Clip kernel";
    if (llvm::Error err = setIndexing({shapeOf(node.getOperand(0))}))
      return err;
    return d;
  }
  if (node.getOpType() == "Sum" || node.getOpType() == "Mean") {
    bool mean = node.getOpType() == "Mean";
    d->form = mean ? ElementwiseDescriptor::Form::Mean
                   : ElementwiseDescriptor::Form::Sum;
    // Mean: the sum divided by the input count, as the CPU rounds it.
    unsigned count = 0;
    for (const Value *operand : node.getOperands())
      count += operand != nullptr;
    d->op = ElementwiseOp::DivParam;
    d->param = float(count);
    d->what = "Mean kernel";
    if (llvm::Error err = setIndexing({d->out}))
      return err;
    return d;
  }
  llvm::SmallVector<Shape, 3> shapes;
  for (const Value *operand : node.getOperands())
    if (operand)
      shapes.push_back(shapeOf(operand));
  if (llvm::Error err = setIndexing(shapes))
    return err;
  std::tie(d->param, d->param2) = elementwiseParams(node, d->op);
  return d;
}

llvm::Error runElementwise(CudaCall &call) {
  using Form = ElementwiseDescriptor::Form;
  const auto &d = call.getDescriptor<ElementwiseDescriptor>();
  if (d.form == Form::Sum || d.form == Form::Mean) {
    if (llvm::Error err = runSum(call, d.storage, d.out))
      return err;
    if (d.form == Form::Sum)
      return llvm::Error::success();
  }
  // Present operands in order (Mean divides its output in place; Scale
  // reads X alone).
  const void *pointers[3] = {nullptr, nullptr, nullptr};
  if (d.form == Form::Mean) {
    pointers[0] = call.outPtr(0);
  } else if (d.form == Form::ConstantScale || d.op == ElementwiseOp::Clip) {
    pointers[0] = call.inPtr(0);
  } else {
    unsigned next = 0;
    for (unsigned i = 0, e = call.node.getNumOperands(); i != e && next < 3;
         ++i)
      if (call.in(i))
        pointers[next++] = call.inPtr(i);
  }
  return call.check(launchElementwise(d.op, d.storage, pointers[0], pointers[1],
                                      pointers[2], call.outPtr(0), d.elements,
                                      d.indexing, call.ctx.stream, d.param,
                                      d.param2),
                    d.what);
}

} // namespace

void cuda::dispatch::addElementwiseKernels(llvm::StringMap<KernelEntry> &t) {
  auto add = [&](llvm::StringRef domain, llvm::StringRef op, CheckFn check,
                 PrepareFn prepare, RunFn run) {
    t[(domain + "::" + op).str()] = {check, run, prepare};
  };
  for (const char *op :
       {"Relu",    "Neg",       "Abs",         "Exp",
        "Log",     "Sqrt",      "Reciprocal",  "Tanh",
        "Sigmoid", "Erf",       "Gelu",        "Add",
        "Sub",     "Mul",       "Div",         "Pow",
        "Max",     "Min",       "Sum",         "Mean",
        "PRelu",   "Clip",      "Mod",         "Floor",
        "Ceil",    "Round",     "Sign",        "Sin",
        "Cos",     "Tan",       "Asin",        "Acos",
        "Atan",    "Sinh",      "Cosh",        "Asinh",
        "Acosh",   "Atanh",     "Softsign",    "Softplus",
        "Mish",    "HardSwish", "LeakyRelu",   "Elu",
        "Celu",    "Selu",      "HardSigmoid", "ThresholdedRelu"})
    add("", op, checkElementwise, prepareElementwise, runElementwise);
  for (const char *op :
       {"Gelu", "FastGelu", "BiasGelu", "ReluGrad", "GeluGrad", "FastGeluGrad",
        "SigmoidGrad", "TanhGrad", "BiasGeluGrad_dX", "BiasFastGeluGrad_dX",
        "QuickGelu", "QuickGeluGrad", "Scale"})
    add(kMsDomain, op, checkElementwise, prepareElementwise, runElementwise);
}
