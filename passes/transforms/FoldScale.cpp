//===- FoldScale.cpp - Fold scalar scales into matrix products ------------===//
//
// Two peephole patterns rooted at a Mul or Div by a float32 scalar
// constant, run by the greedy driver (PatternRewriter.h); see FoldScale.h
// for what they fold. Each first decides the whole rewrite (the product or
// products and the factor) without touching the IR, then rewrites.
//
//===----------------------------------------------------------------------===//

#include "passes/transforms/FoldScale.h"
#include "passes/DebugOutput.h"
#include "passes/PatternRewriter.h"
#include "passes/transforms/ScalarConstant.h"

#include "ir/Module.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <optional>

#define DEBUG_TYPE "gmopt-fold-scale"

using namespace gmopt;

namespace {

constexpr llvm::StringLiteral kOfProductPattern = "fold-scale-of-product";
constexpr llvm::StringLiteral kIntoProductsPattern = "fold-scale-into-products";

/// A Mul or Div of a value by a scalar constant: which operand is scaled,
/// and the factor the product's alpha takes (1/c for a Div).
struct Scaling {
  Value *scaled = nullptr;
  /// The constant.
  float constant = 1;
  bool divide = false;
};

/// \p node as a scaling whose result has \p node's operand's type (the
/// constant's rank does not widen the result).
std::optional<Scaling> matchScaling(const Node &node) {
  bool mul = node.isa(kOnnxDomain, "Mul"), div = node.isa(kOnnxDomain, "Div");
  if ((!mul && !div) || node.getNumOperands() != 2 ||
      node.getNumResults() != 1 || !node.getResult(0))
    return std::nullopt;
  for (unsigned i = 0; i != 2; ++i) {
    // A Div scales only its numerator.
    if (div && i == 0)
      continue;
    std::optional<float> constant = f32ScalarConstant(node.getOperand(i));
    Value *scaled = node.getOperand(1 - i);
    if (!constant || !scaled || !std::isfinite(*constant) ||
        (div && *constant == 0))
      continue;
    if (!(scaled->getType() == node.getResult(0)->getType()) ||
        scaled->getType().getDType() != DType::F32)
      continue;
    return Scaling{scaled, *constant, div};
  }
  return std::nullopt;
}

/// True if \p node is a MatMul or FusedMatMul whose alpha can take a
/// factor: float32 operands, no batch transpose, and (for a MatMul, which
/// becomes a FusedMatMul) the com.microsoft domain imported.
bool isScalableProduct(const Node &node, const Module &module) {
  if (node.getNumOperands() != 2 || node.getNumResults() != 1 ||
      !node.getResult(0) || !node.getOperand(0) || !node.getOperand(1))
    return false;
  if (node.getResult(0)->getType().getDType() != DType::F32)
    return false;
  if (node.isa(kOnnxDomain, "MatMul"))
    return module.getOpsetVersion(kMsDomain) >= 1;
  return node.isa(kMsDomain, "FusedMatMul") &&
         node.getIntAttr("transBatchA", 0) == 0 &&
         node.getIntAttr("transBatchB", 0) == 0;
}

/// \p product's alpha (1 for a MatMul) times (or divided by) the factor.
float scaledAlpha(const Node &product, const Scaling &scaling) {
  float alpha = product.isa(kOnnxDomain, "MatMul")
                    ? 1.0f
                    : product.getFloatAttr("alpha", 1.0f);
  return scaling.divide ? alpha / scaling.constant : alpha * scaling.constant;
}

/// A FusedMatMul replacing \p product with operands (\p a, \p b), alpha
/// \p alpha and \p product's other attributes, where \p product was and in
/// its phase.
Node *rebuildProduct(PatternRewriter &rewriter, Node &product, Value *a,
                     Value *b, float alpha, const TensorType &resultType,
                     std::string name) {
  llvm::SmallVector<NamedAttribute, 8> attrs;
  if (product.isa(kMsDomain, "FusedMatMul")) {
    for (const NamedAttribute &attr : product.getAttrs())
      if (attr.name != "alpha")
        attrs.push_back(attr);
  } else {
    attrs.push_back({"transA", Attribute::getInt(0)});
    attrs.push_back({"transB", Attribute::getInt(0)});
  }
  attrs.push_back({"alpha", Attribute::getFloat(alpha)});
  Builder &builder = rewriter.getBuilder();
  builder.setInsertionPoint(&product);
  Phase matchedPhase = builder.getPhase();
  builder.setPhase(product.getPhase());
  Node *rebuilt =
      rewriter.createNode(OpName{kMsDomain.str(), "FusedMatMul"}, {a, b},
                          {resultType}, attrs, std::move(name));
  builder.setPhase(matchedPhase);
  return rebuilt;
}

/// Moves \p from's name to \p to.
void takeName(Value *from, Value *to) {
  std::string name = from->getName().str();
  from->setName("");
  to->setName(name);
}

/// True if \p value may disappear: no graph output, not in the signature.
bool isInternal(const Value *value, PatternRewriter &rewriter) {
  return !value->isGraphOutput() && !rewriter.isInSignature(value);
}

class FoldScaleOfProduct : public RewritePattern {
public:
  FoldScaleOfProduct() : RewritePattern(kOfProductPattern) {}

  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override {
    std::optional<Scaling> scaling = matchScaling(node);
    if (!scaling)
      return false;
    Value *productResult = scaling->scaled;
    Node *product = productResult->getDefiningNode();
    Value *result = node.getResult(0);
    if (!product || !productResult->hasOneUse() ||
        !isInternal(productResult, rewriter) ||
        rewriter.isInSignature(product) ||
        !isScalableProduct(*product, rewriter.getModule()))
      return false;
    Node *rebuilt =
        rebuildProduct(rewriter, *product, product->getOperand(0),
                       product->getOperand(1), scaledAlpha(*product, *scaling),
                       result->getType(), product->getName().str());
    GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] " << node.describe()
                       << " folded into " << product->describe() << "\n");
    rewriter.replaceAllUsesWith(result, rebuilt->getResult(0));
    takeName(result, rebuilt->getResult(0));
    rewriter.eraseNode(&node);
    rewriter.eraseNode(product);
    return true;
  }
};

class FoldScaleIntoProducts : public RewritePattern {
public:
  FoldScaleIntoProducts() : RewritePattern(kIntoProductsPattern) {}

  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override {
    std::optional<Scaling> scaling = matchScaling(node);
    if (!scaling)
      return false;
    Value *result = node.getResult(0);
    if (result->useEmpty() || !isInternal(result, rewriter))
      return false;
    // Each user once, reading the scaled value as exactly one operand.
    llvm::SmallVector<std::pair<Node *, unsigned>, 4> users;
    for (OpOperand &use : result->getUses()) {
      Node *user = use.getOwner();
      if (!user || use.getIndex() > 1 ||
          !isScalableProduct(*user, rewriter.getModule()) ||
          rewriter.isInSignature(user) ||
          user->getOperand(0) == user->getOperand(1))
        return false;
      users.push_back({user, use.getIndex()});
    }
    for (auto [user, operand] : users) {
      Value *a = user->getOperand(0), *b = user->getOperand(1);
      (operand == 0 ? a : b) = scaling->scaled;
      Value *product = user->getResult(0);
      Node *rebuilt =
          rebuildProduct(rewriter, *user, a, b, scaledAlpha(*user, *scaling),
                         product->getType(), user->getName().str());
      GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] " << node.describe()
                         << " folded into " << user->describe() << "\n");
      rewriter.replaceAllUsesWith(product, rebuilt->getResult(0));
      takeName(product, rebuilt->getResult(0));
      rewriter.eraseNode(user);
    }
    rewriter.eraseNode(&node);
    return true;
  }
};

} // namespace

FoldScalePass::FoldScalePass() : FoldScalePass(Options()) {}

FoldScalePass::FoldScalePass(Options initial) : options(initial) {
  declareOption("of-products", options.ofProducts,
                "fold the scale of a product's only use into its alpha");
  declareOption("into-products", options.intoProducts,
                "fold a scaled operand into the alphas of the products "
                "reading it");
  declareStatistic("folded-of-products",
                   "scales of a product folded into its alpha");
  declareStatistic("folded-into-products",
                   "scaled operands folded into the alphas of their products");
}

llvm::Expected<bool> FoldScalePass::run(Module &module, PassContext &context) {
  FoldScaleOfProduct ofProduct;
  FoldScaleIntoProducts intoProducts;
  std::vector<const RewritePattern *> patterns;
  if (options.ofProducts)
    patterns.push_back(&ofProduct);
  if (options.intoProducts)
    patterns.push_back(&intoProducts);
  if (patterns.empty())
    return false;
  auto result = applyPatternsGreedily(module, patterns);
  if (!result)
    return result.takeError();
  auto count = [&](llvm::StringRef pattern) -> uint64_t {
    auto it = result->rewritesByPattern.find(pattern);
    return it == result->rewritesByPattern.end() ? 0 : it->second;
  };
  addStatistic(context, "folded-of-products", count(kOfProductPattern));
  addStatistic(context, "folded-into-products", count(kIntoProductsPattern));
  return result->changed;
}
