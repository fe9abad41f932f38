//===- Canonicalize.cpp - DCE, Identity removal, shape folding ------------===//
//
// Peephole patterns run by the greedy driver (PatternRewriter.h):
// Constant node -> initializer, Identity removal, shape-arithmetic folding
// (ShapeFolding.h) and Cast folding (CastFolding.h). The driver re-infers the
// types of users of every replaced value, so folded shapes make downstream
// types static and may enable further folds (Shape of a value whose type just
// became static). Dead-code elimination runs after the patterns, as a reverse
// walk that collects dead nodes and erases them once the walk is done.
//
// Naming choice for Identity removal: ONNX names are the model's
// interface for graph outputs (ONNX Runtime looks up `loss` and `W_grad`
// by name), so when `y = Identity(x)` feeds a graph output, x takes over
// y's name. That is only possible when x is a node result that is neither
// an output nor named by the training signature: graph inputs and
// initializers have names that callers and checkpoints rely on, and an x
// that is already an output must keep its own. In those cases the Identity
// stays. When y is not an output but the signature names it (ONNX Runtime
// writes `W_grad = Identity(dC_reduced)`), x takes the name when it can, so
// gradients keep their `W_grad` names; otherwise the Identity goes anyway,
// since inside the graph names are not identities.
//
//===----------------------------------------------------------------------===//

#include "passes/transforms/Canonicalize.h"
#include "passes/DebugOutput.h"
#include "passes/PatternRewriter.h"
#include "passes/amp/CastFolding.h"
#include "passes/transforms/DeadCode.h"
#include "passes/transforms/ShapeFolding.h"

#include "ir/Module.h"

#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <vector>

#define DEBUG_TYPE "gmopt-canonicalize"

using namespace gmopt;

namespace {

constexpr llvm::StringLiteral kConstantPattern = "constant-to-initializer";
constexpr llvm::StringLiteral kIdentityPattern = "remove-identity";
constexpr llvm::StringLiteral kFoldPattern = "fold-shape-arithmetic";

/// The tensor a standard `Constant` node produces, if its attribute is one
/// of the kinds gmopt represents as a tensor.
std::optional<TensorData> constantNodeValue(const Node &node) {
  if (!node.isa(kOnnxDomain, "Constant") || node.getNumResults() != 1)
    return std::nullopt;
  if (const Attribute *attr = node.getAttr("value"))
    if (attr->getKind() == Attribute::Kind::Tensor)
      return attr->getTensor();
  if (const Attribute *attr = node.getAttr("value_int"))
    if (attr->getKind() == Attribute::Kind::Int)
      return TensorData::fromValues<int64_t>(DType::I64, {}, {attr->getInt()});
  if (const Attribute *attr = node.getAttr("value_ints"))
    if (attr->getKind() == Attribute::Kind::Ints)
      return TensorData::fromValues<int64_t>(
          DType::I64, {int64_t(attr->getInts().size())}, attr->getInts());
  if (const Attribute *attr = node.getAttr("value_float"))
    if (attr->getKind() == Attribute::Kind::Float)
      return TensorData::fromValues<float>(DType::F32, {}, {attr->getFloat()});
  if (const Attribute *attr = node.getAttr("value_floats"))
    if (attr->getKind() == Attribute::Kind::Floats)
      return TensorData::fromValues<float>(
          DType::F32, {int64_t(attr->getFloats().size())}, attr->getFloats());
  return std::nullopt;
}

/// True if a recorded type admits \p folded (nothing known contradicts it).
bool admits(const TensorType &recorded, const TensorType &folded) {
  if (recorded.getDType() != DType::Undefined &&
      recorded.getDType() != folded.getDType())
    return false;
  if (!recorded.hasRank())
    return true;
  if (recorded.getRank() != folded.getRank())
    return false;
  for (unsigned d = 0, e = recorded.getRank(); d != e; ++d)
    if (recorded.getDim(d).isStatic() &&
        recorded.getDim(d).getExtent() != folded.getDim(d).getExtent())
      return false;
  return true;
}

/// `y = Constant<value=...>` becomes an initializer named y, so constants
/// have one representation that folding and buffer planning understand; it
/// is marked a literal (Value::isLiteral), so it never becomes a parameter.
class ConstantToInitializer : public RewritePattern {
public:
  ConstantToInitializer() : RewritePattern(kConstantPattern) {}

  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override {
    Value *result = node.getNumResults() == 1 ? node.getResult(0) : nullptr;
    // An initializer as a graph output would change the model's interface.
    if (!result || result->isGraphOutput())
      return false;
    std::optional<TensorData> data = constantNodeValue(node);
    if (!data || !admits(result->getType(), data->getType()))
      return false;
    Value *initializer =
        rewriter.createConstant(std::move(*data), result->getName().str());
    // A Constant node's value is a literal of the computation, never a
    // weight: autodiff must not make it a parameter.
    initializer->setLiteral(true);
    rewriter.replaceAllUsesWith(result, initializer);
    rewriter.eraseNode(&node);
    return true;
  }
};

/// `y = Identity(x)`: uses of y read x instead (see the file comment for
/// how names move and when a graph output keeps its Identity).
class RemoveIdentity : public RewritePattern {
public:
  RemoveIdentity() : RewritePattern(kIdentityPattern) {}

  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override {
    if (!node.isa(kOnnxDomain, "Identity") || node.getNumOperands() != 1 ||
        node.getNumResults() != 1)
      return false;
    Value *input = node.getOperand(0);
    Value *output = node.getResult(0);
    if (!input || !output)
      return false;
    return rewriter.forwardOperand(node, input, output);
  }
};

/// Evaluates integer shape arithmetic whose inputs are known.
class FoldShapeArithmetic : public RewritePattern {
public:
  explicit FoldShapeArithmetic(uint64_t maxElements)
      : RewritePattern(kFoldPattern) {
    limits.maxElements = maxElements;
  }

  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override {
    if (!isFoldableShapeOp(node) || node.getNumResults() != 1)
      return false;
    Value *result = node.getResult(0);
    if (!result || result->isGraphOutput())
      return false;

    // Constants are initializers, or Constant nodes not yet converted
    // (those feeding a graph output keep their node form).
    std::vector<std::optional<TensorData>> nodeConstants(node.getNumOperands());
    std::vector<const TensorData *> constants(node.getNumOperands(), nullptr);
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
      Value *operand = node.getOperand(i);
      if (!operand)
        continue;
      if (operand->isInitializer() && operand->hasData()) {
        // Large or unavailable external data is never read here.
        if (operand->getData().hasFoldableBytes())
          constants[i] = &operand->getData();
      } else if (Node *def = operand->getDefiningNode()) {
        nodeConstants[i] = constantNodeValue(*def);
        if (nodeConstants[i])
          constants[i] = &*nodeConstants[i];
      }
    }

    std::optional<TensorData> folded = foldShapeNode(node, constants, limits);
    if (!folded)
      return false;
    if (!admits(result->getType(), folded->getType())) {
      GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] not folding " << node.describe()
                         << ": folded type " << folded->getType()
                         << " contradicts " << result->getType() << "\n");
      return false;
    }
    GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] folded " << node.getOp().str()
                       << (node.getName().empty()
                               ? std::string()
                               : " '" + node.getName().str() + "'")
                       << " to " << folded->getType() << "\n");
    Value *constant =
        rewriter.createConstant(std::move(*folded), result->getName().str());
    // A fold of literals (and of values a shape subgraph computes) is a
    // literal; one that read a model initializer is not decided here.
    constant->setLiteral(llvm::none_of(node.getOperands(), [](Value *operand) {
      return operand && operand->isInitializer() && !operand->isLiteral();
    }));
    rewriter.replaceAllUsesWith(result, constant);
    rewriter.eraseNode(&node);
    return true;
  }

private:
  ShapeFoldLimits limits;
};

} // namespace

CanonicalizePass::CanonicalizePass() : CanonicalizePass(Options()) {}

CanonicalizePass::CanonicalizePass(Options initial) : options(initial) {
  declareOption("dce", options.dce,
                "erase unused side-effect-free nodes and unused initializers");
  declareOption("remove-identity", options.removeIdentity,
                "replace Identity results with their inputs");
  declareOption(
      "fold-constants", options.foldConstants,
      "fold integer shape arithmetic; Constant nodes to initializers");
  declareOption("fold-casts", options.foldCasts,
                "fold Cast pairs whose inner cast is exact and remove casts "
                "to the operand's own type");
  declareOption("max-fold-elements", options.maxFoldElements,
                "largest integer tensor (elements) folding reads or creates");
  declareStatistic("nodes-erased",
                   "Nodes erased (dead, folded, Identity or Constant)");
  declareStatistic("identities-removed", "Identity nodes removed");
  declareStatistic("constants-folded",
                   "Shape computations folded to constants");
  declareStatistic("casts-folded",
                   "Cast pairs folded and identity Casts removed");
  declareStatistic("constant-nodes-converted",
                   "Constant nodes turned into initializers");
  declareStatistic("initializers-removed", "Unused initializers removed");
  declareStatistic("types-refined",
                   "Nodes whose result types became more precise");
}

llvm::Expected<bool> CanonicalizePass::run(Module &module,
                                           PassContext &context) {
  ConstantToInitializer constantToInitializer;
  RemoveIdentity removeIdentity;
  FoldShapeArithmetic foldShapes(options.maxFoldElements);
  FoldCastPair foldCastPair;
  RemoveIdentityCast removeIdentityCast;
  std::vector<const RewritePattern *> patterns;
  if (options.foldConstants)
    patterns.push_back(&constantToInitializer);
  if (options.removeIdentity)
    patterns.push_back(&removeIdentity);
  if (options.foldConstants)
    patterns.push_back(&foldShapes);
  if (options.foldCasts) {
    patterns.push_back(&foldCastPair);
    patterns.push_back(&removeIdentityCast);
  }

  GreedyRewriteResult rewrites;
  if (!patterns.empty()) {
    auto result = applyPatternsGreedily(module, patterns);
    if (!result)
      return result.takeError();
    rewrites = std::move(*result);
  }

  uint64_t deadNodes = 0, deadInitializers = 0;
  if (options.dce) {
    deadNodes = eraseDeadNodes(module);
    deadInitializers = eraseDeadInitializers(module);
  }

  auto count = [&](llvm::StringRef pattern) -> uint64_t {
    auto it = rewrites.rewritesByPattern.find(pattern);
    return it == rewrites.rewritesByPattern.end() ? 0 : it->second;
  };
  addStatistic(context, "nodes-erased", rewrites.nodesErased + deadNodes);
  addStatistic(context, "identities-removed", count(kIdentityPattern));
  addStatistic(context, "constants-folded", count(kFoldPattern));
  addStatistic(context, "casts-folded",
               count(kFoldCastPairPattern) + count(kRemoveIdentityCastPattern));
  addStatistic(context, "constant-nodes-converted", count(kConstantPattern));
  addStatistic(context, "initializers-removed", deadInitializers);
  addStatistic(context, "types-refined", rewrites.typesRefined);
  GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] erased "
                     << rewrites.nodesErased + deadNodes << " nodes, removed "
                     << deadInitializers << " initializers\n");
  return rewrites.changed || deadNodes != 0 || deadInitializers != 0;
}
