//===- GradientRules.cpp - The gradient rule table and its builder --------===//
//
// The GradientBuilder every rule emits through (constants, shapes, the
// reduction of broadcast gradients) and the table that maps each op to its
// rule. The rules themselves are in GradientRules{Math,Nn,Shape}.cpp.
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/GradientRules.h"

#include "ir/Half.h"
#include "ir/Module.h"
#include "ir/ops/ShapeEval.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace gmopt;

llvm::Error gmopt::gradientError(const Node &node, const llvm::Twine &message) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(), "autodiff: %s (node %s)",
      message.str().c_str(), node.describe().c_str());
}

//===----------------------------------------------------------------------===//
// GradientBuilder
//===----------------------------------------------------------------------===//

GradientBuilder::GradientBuilder(Graph &graph) : graph(graph), builder(graph) {
  builder.setPhase(Phase::Backward);
  builder.setInsertionPointToEnd();
}

int64_t GradientBuilder::getOnnxOpset() const {
  Module *module = graph.getModule();
  int64_t version = module ? module->getOpsetVersion(kOnnxDomain) : 0;
  return version ? version : 17;
}

llvm::Expected<Node *>
GradientBuilder::create(llvm::StringRef domain, llvm::StringRef opType,
                        llvm::ArrayRef<Value *> operands, unsigned numResults,
                        llvm::ArrayRef<NamedAttribute> attrs) {
  auto node = builder.createInferred(OpName{domain.str(), opType.str()},
                                     operands, numResults, attrs);
  if (!node)
    return node.takeError();
  for (unsigned i = 0; i != numResults; ++i)
    if (Value *result = (*node)->getResult(i))
      result->setName(
          llvm::formatv("autodiff/{0}_{1}_{2}", opType, graph.getNumNodes(), i)
              .str());
  return *node;
}

llvm::Expected<Value *>
GradientBuilder::onnx(llvm::StringRef opType, llvm::ArrayRef<Value *> operands,
                      llvm::ArrayRef<NamedAttribute> attrs) {
  auto node = create(kOnnxDomain, opType, operands, 1, attrs);
  if (!node)
    return node.takeError();
  return (*node)->getResult(0);
}

llvm::Expected<Value *>
GradientBuilder::microsoft(llvm::StringRef opType,
                           llvm::ArrayRef<Value *> operands,
                           llvm::ArrayRef<NamedAttribute> attrs) {
  auto node = create(kMsDomain, opType, operands, 1, attrs);
  if (!node)
    return node.takeError();
  return (*node)->getResult(0);
}

Value *GradientBuilder::scalar(DType dtype, double value) {
  std::string name = llvm::formatv("autodiff/const_{0}", constantCount++).str();
  switch (dtype) {
  case DType::F64:
    return builder.createConstant(
        TensorData::fromValues<double>(dtype, {}, {value}), name);
  case DType::F16:
    return builder.createConstant(
        TensorData::fromValues<uint16_t>(
            dtype, {}, {floatToHalf(static_cast<float>(value))}),
        name);
  case DType::BF16:
    return builder.createConstant(
        TensorData::fromValues<uint16_t>(
            dtype, {}, {floatToBFloat16(static_cast<float>(value))}),
        name);
  default:
    assert(dtype == DType::F32 && "gradients are floating point");
    return builder.createConstant(
        TensorData::fromValues<float>(DType::F32, {},
                                      {static_cast<float>(value)}),
        name);
  }
}

Value *GradientBuilder::int64s(llvm::ArrayRef<int64_t> values) {
  std::string name = llvm::formatv("autodiff/const_{0}", constantCount++).str();
  return builder.createConstant(
      TensorData::fromValues<int64_t>(
          DType::I64, {static_cast<int64_t>(values.size())}, values),
      name);
}

llvm::Expected<Value *> GradientBuilder::shapeOf(Value *value) {
  const TensorType &type = value->getType();
  if (type.hasStaticShape()) {
    llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
    return int64s(shape);
  }
  auto found = shapes.find(value);
  if (found != shapes.end())
    return found->second;
  auto shape = onnx("Shape", {value});
  if (!shape)
    return shape.takeError();
  shapes[value] = *shape;
  return *shape;
}

llvm::Expected<Value *> GradientBuilder::reduceToShapeOf(Value *grad,
                                                         Value *target) {
  const TensorType &gradType = grad->getType();
  const TensorType &targetType = target->getType();
  if (gradType.hasRank() && targetType.hasRank() &&
      gradType.getDims() == targetType.getDims())
    return grad;
  if (!gradType.hasRank() || !targetType.hasRank() ||
      gradType.getRank() < targetType.getRank())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "autodiff: cannot tell how %s was broadcast to %s",
        targetType.str().c_str(), gradType.str().c_str());
  unsigned lead = gradType.getRank() - targetType.getRank();
  // The target's side of BroadcastGradientArgs (ops::walkBroadcastGradient)
  // over the types: a dimension the types cannot tell (unknown extents) is
  // left to ONNX Runtime's dynamic pattern, which finds the axes at run
  // time.
  auto classify = [](const Dim &from, const Dim &to) {
    if (from == to)
      return ops::BroadcastPair::Same;
    if (from.isStatic() && from.getExtent() == 1)
      return ops::BroadcastPair::ReduceA;
    return ops::BroadcastPair::Unknown;
  };
  ops::GradientAxesResult walk = ops::walkBroadcastGradient(
      targetType.getDims(), gradType.getDims(), classify);
  if (walk.stop != ops::BroadcastPair::Same)
    return reduceToShapeOfAtRunTime(grad, target);
  llvm::SmallVector<int64_t, 4> axes(walk.axes.a.rbegin(), walk.axes.a.rend());
  Value *summed = grad;
  if (!axes.empty()) {
    // Only leading axes (a bias): ONNX Runtime's ReduceSum without
    // keepdims, which needs no Reshape after it.
    bool leadingOnly = axes.size() == lead;
    auto reduced = onnx("ReduceSum", {grad, int64s(axes)},
                        {{"keepdims", Attribute::getInt(leadingOnly ? 0 : 1)}});
    if (!reduced)
      return reduced.takeError();
    summed = *reduced;
  }
  if (summed->getType().getDims() == targetType.getDims())
    return summed;
  auto shape = shapeOf(target);
  if (!shape)
    return shape.takeError();
  return onnx("Reshape", {summed, *shape});
}

llvm::Expected<Value *>
GradientBuilder::reduceToShapeOfAtRunTime(Value *grad, Value *target) {
  auto targetShape = shapeOf(target);
  if (!targetShape)
    return targetShape.takeError();
  auto gradShape = shapeOf(grad);
  if (!gradShape)
    return gradShape.takeError();
  auto args =
      create(kMsDomain, "BroadcastGradientArgs", {*targetShape, *gradShape}, 1);
  if (!args)
    return args.takeError();
  auto reduced = microsoft("ReduceSumTraining", {grad, (*args)->getResult(0)},
                           {{"keepdims", Attribute::getInt(1)},
                            {"noop_with_empty_axes", Attribute::getInt(1)}});
  if (!reduced)
    return reduced.takeError();
  auto reshaped = onnx("Reshape", {*reduced, *targetShape});
  if (!reshaped)
    return reshaped.takeError();
  // The run-time shape is the target's; say so where inference could not.
  (*reshaped)->setType(target->getType());
  return *reshaped;
}

llvm::Expected<Value *> GradientBuilder::zerosLike(Value *like) {
  auto shape = shapeOf(like);
  if (!shape)
    return shape.takeError();
  DType dtype = like->getType().getDType();
  TensorData zero;
  switch (dtype) {
  case DType::F64:
    zero = TensorData::fromValues<double>(dtype, {1}, {0.0});
    break;
  case DType::F16:
  case DType::BF16:
    zero = TensorData::fromValues<uint16_t>(dtype, {1}, {0});
    break;
  default:
    zero = TensorData::fromValues<float>(DType::F32, {1}, {0.0f});
    break;
  }
  return onnx("ConstantOfShape", {*shape},
              {{"value", Attribute::getTensor(std::move(zero))}});
}

//===----------------------------------------------------------------------===//
// GradientRuleTable
//===----------------------------------------------------------------------===//

namespace {

std::string ruleKey(llvm::StringRef domain, llvm::StringRef opType) {
  return domain.empty() ? opType.str() : (domain + "." + opType).str();
}

} // namespace

const GradientRuleTable &GradientRuleTable::instance() {
  static const GradientRuleTable table = [] {
    GradientRuleTable result;
    registerMathGradients(result);
    registerActivationGradients(result);
    registerNnGradients(result);
    registerShapeGradients(result);
    registerIndexingGradients(result);
    registerResizeGradients(result);
    return result;
  }();
  return table;
}

const GradientRule *GradientRuleTable::lookup(const OpName &op) const {
  auto found = rules.find(ruleKey(op.domain, op.type));
  return found == rules.end() ? nullptr : &found->second;
}

bool GradientRuleTable::isDifferentiableOperand(const Node &node,
                                                unsigned index) const {
  const GradientRule *rule = lookup(node.getOp());
  if (!rule || rule->nonDifferentiable || index >= node.getNumOperands())
    return false;
  Value *operand = node.getOperand(index);
  if (!operand || !isFloatingPoint(operand->getType().getDType()))
    return false;
  return rule->differentiableOperands.empty() ||
         llvm::is_contained(rule->differentiableOperands, index);
}

std::vector<std::string> GradientRuleTable::differentiableOps() const {
  std::vector<std::string> names;
  for (const auto &entry : rules)
    if (!entry.second.nonDifferentiable)
      names.push_back(entry.getKey().str());
  std::sort(names.begin(), names.end());
  return names;
}

void GradientRuleTable::add(llvm::StringRef domain, llvm::StringRef opType,
                            GradientRule rule) {
  bool inserted =
      rules.try_emplace(ruleKey(domain, opType), std::move(rule)).second;
  assert(inserted && "two gradient rules for one op");
  (void)inserted;
}

void GradientRuleTable::addNonDifferentiable(llvm::StringRef domain,
                                             llvm::StringRef opType) {
  GradientRule rule;
  rule.nonDifferentiable = true;
  add(domain, opType, std::move(rule));
}
