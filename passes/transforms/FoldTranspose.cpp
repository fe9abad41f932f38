//===- FoldTranspose.cpp - Fold transposes into matrix products -----------===//
//
// Two peephole patterns rooted at a Transpose, run by the greedy driver
// (PatternRewriter.h); see FoldTranspose.h for what they fold. Each pattern
// first decides the whole rewrite (a FoldPlan: which axes remain to move,
// which product operands flip) without touching the IR, then rewrites.
//
// Perm algebra: write s for the swap of the last two axes. A Transpose with
// perm p equals s applied after a Transpose with perm q = p∘s (p with its
// last two entries exchanged), and s applied before a Transpose with perm
// q = s∘p (every entry r-2 and r-1 of p exchanged). The s half folds into
// the product; q stays as a Transpose unless it is the identity, and is
// only accepted when it keeps the last axis in place, so what remains is a
// copy of whole rows, never the element gather the original perm needed.
// A remaining q never matches again (its own s half would move the last
// axis), so the rewrites terminate.
//
//===----------------------------------------------------------------------===//

#include "passes/transforms/FoldTranspose.h"
#include "passes/DebugOutput.h"
#include "passes/PatternRewriter.h"

#include "ir/Module.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

#define DEBUG_TYPE "gmopt-fold-transpose"

using namespace gmopt;

namespace {

constexpr llvm::StringLiteral kIntoProductsPattern = "fold-into-products";
constexpr llvm::StringLiteral kOfProductPattern = "fold-of-product";

using Perm = llvm::SmallVector<int64_t, 6>;

/// The perm of a Transpose over a ranked operand (the default reverses the
/// axes), or nothing if \p node is not such a Transpose.
std::optional<Perm> transposePerm(const Node &node) {
  if (!node.isa(kOnnxDomain, "Transpose") || node.getNumOperands() != 1 ||
      node.getNumResults() != 1 || !node.getOperand(0) || !node.getResult(0) ||
      !node.getOperand(0)->getType().hasRank())
    return std::nullopt;
  int64_t rank = node.getOperand(0)->getType().getRank();
  std::vector<int64_t> attr = node.getIntsAttr("perm", {});
  Perm perm;
  if (attr.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
    return perm;
  }
  if (static_cast<int64_t>(attr.size()) != rank)
    return std::nullopt;
  llvm::SmallVector<bool, 6> seen(rank, false);
  for (int64_t axis : attr) {
    if (axis < 0 || axis >= rank || seen[axis])
      return std::nullopt;
    seen[axis] = true;
    perm.push_back(axis);
  }
  return perm;
}

bool isIdentity(llvm::ArrayRef<int64_t> perm) {
  for (unsigned d = 0; d < perm.size(); ++d)
    if (perm[d] != static_cast<int64_t>(d))
      return false;
  return true;
}

/// The Transpose left over once the swap of the last two axes is folded, or
/// nothing if that would still move the last axis. \p swapAfter: the swap
/// is applied after the rest (folded into a consumer), else before (folded
/// into the producer).
std::optional<Perm> residualPerm(llvm::ArrayRef<int64_t> perm, bool swapAfter) {
  int64_t rank = perm.size();
  if (rank < 2)
    return std::nullopt;
  Perm rest(perm.begin(), perm.end());
  if (swapAfter) {
    std::swap(rest[rank - 2], rest[rank - 1]);
  } else {
    for (int64_t &axis : rest)
      if (axis >= rank - 2)
        axis = axis == rank - 2 ? rank - 1 : rank - 2;
  }
  if (rest[rank - 1] != rank - 1)
    return std::nullopt;
  return rest;
}

/// \p type with its dimensions permuted: result dim d is input dim perm[d].
TensorType permuteType(const TensorType &type, llvm::ArrayRef<int64_t> perm) {
  llvm::SmallVector<Dim, 6> dims;
  for (int64_t axis : perm)
    dims.push_back(type.getDim(axis));
  return TensorType(type.getDType(), dims);
}

/// The matrix products the pass rewrites.
enum class ProductKind { MatMul, FusedMatMul, Gemm };

std::optional<ProductKind> productKind(const Node &node) {
  if (node.isa(kOnnxDomain, "MatMul"))
    return ProductKind::MatMul;
  if (node.isa(kMsDomain, "FusedMatMul") ||
      node.isa(kMsDomain, "TransposeMatMul"))
    return ProductKind::FusedMatMul;
  if (node.isa(kOnnxDomain, "Gemm"))
    return ProductKind::Gemm;
  return std::nullopt;
}

bool isFloatType(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::F16 ||
         dtype == DType::BF16;
}

/// True if \p node is a product whose transA/transB (after it becomes a
/// FusedMatMul, for a MatMul) can be flipped: two matrix operands of rank
/// >= 2, no bias, no batch transpose.
bool isFlippableProduct(const Node &node, const Module &module) {
  std::optional<ProductKind> kind = productKind(node);
  if (!kind || node.getNumResults() != 1 || !node.getResult(0))
    return false;
  if (*kind == ProductKind::Gemm) {
    if (node.getNumOperands() > 2 && node.getOperand(2))
      return false;
  } else if (node.getNumOperands() != 2) {
    return false;
  }
  for (unsigned i = 0; i < 2; ++i) {
    const Value *operand = node.getOperand(i);
    if (!operand || !operand->getType().hasRank() ||
        operand->getType().getRank() < 2)
      return false;
  }
  switch (*kind) {
  case ProductKind::MatMul:
    // The replacement FusedMatMul needs the com.microsoft domain and, like
    // ONNX Runtime's, takes floating-point operands only.
    return module.getOpsetVersion(kMsDomain) >= 1 &&
           isFloatType(node.getOperand(0)->getType().getDType());
  case ProductKind::FusedMatMul:
    return node.getIntAttr("transBatchA", 0) == 0 &&
           node.getIntAttr("transBatchB", 0) == 0;
  case ProductKind::Gemm:
    return true;
  }
  return false;
}

/// The product's flags as (transA, transB); MatMul has none.
std::pair<bool, bool> productFlags(const Node &node) {
  return {node.getIntAttr("transA", 0) != 0, node.getIntAttr("transB", 0) != 0};
}

/// Moves \p from's name to \p to (names are the interface of graph outputs
/// and gradients; the old value is about to be erased).
void takeName(Value *from, Value *to) {
  std::string name = from->getName().str();
  from->setName("");
  to->setName(name);
}

/// Replaces \p product by a product of \p kind (FusedMatMul for a MatMul)
/// over (\p a, \p b) with flags (\p transA, \p transB) and the other
/// attributes of \p product, producing \p resultType. The new node sits
/// where \p product was and takes its name.
Node *rebuildProduct(PatternRewriter &rewriter, Node &product, Value *a,
                     Value *b, bool transA, bool transB,
                     const TensorType &resultType) {
  ProductKind kind = *productKind(product);
  llvm::SmallVector<NamedAttribute, 8> attrs;
  for (const NamedAttribute &attr : product.getAttrs())
    if (attr.name != "transA" && attr.name != "transB")
      attrs.push_back(attr);
  attrs.push_back({"transA", Attribute::getInt(transA)});
  attrs.push_back({"transB", Attribute::getInt(transB)});
  OpName op = product.getOp();
  if (kind == ProductKind::MatMul) {
    op = OpName{kMsDomain.str(), "FusedMatMul"};
    attrs.push_back({"alpha", Attribute::getFloat(1.0f)});
  }
  Builder &builder = rewriter.getBuilder();
  builder.setInsertionPoint(&product);
  // The new product replaces the old one: it keeps the product's phase
  // (the rewriter set the matched Transpose's, which may differ).
  Phase matchedPhase = builder.getPhase();
  builder.setPhase(product.getPhase());
  Node *rebuilt = rewriter.createNode(op, {a, b}, {resultType}, attrs,
                                      product.getName().str());
  builder.setPhase(matchedPhase);
  return rebuilt;
}

//===----------------------------------------------------------------------===//
// Into products
//===----------------------------------------------------------------------===//

/// How a Transpose folds into its users.
struct IntoProductsPlan {
  /// The Transpose still needed before the products, if any.
  std::optional<Perm> residual;
  /// Each user with the operands (bit 0: A, bit 1: B) that read the
  /// Transpose.
  llvm::SmallVector<std::pair<Node *, unsigned>, 4> users;
};

std::optional<IntoProductsPlan> planIntoProducts(const Node &transpose,
                                                 PatternRewriter &rewriter) {
  const Module &module = rewriter.getModule();
  std::optional<Perm> perm = transposePerm(transpose);
  if (!perm)
    return std::nullopt;
  Value *result = transpose.getResult(0);
  if (result->useEmpty() || result->isGraphOutput() ||
      rewriter.isInSignature(result))
    return std::nullopt;
  IntoProductsPlan plan;
  plan.residual = residualPerm(*perm, /*swapAfter=*/true);
  if (!plan.residual)
    return std::nullopt;
  for (OpOperand &use : result->getUses()) {
    Node *user = use.getOwner();
    if (!user || use.getIndex() > 1 || !isFlippableProduct(*user, module))
      return std::nullopt;
    auto it = llvm::find_if(
        plan.users, [&](const auto &entry) { return entry.first == user; });
    if (it == plan.users.end())
      plan.users.push_back({user, 1u << use.getIndex()});
    else
      it->second |= 1u << use.getIndex();
  }
  if (isIdentity(*plan.residual))
    plan.residual.reset();
  return plan;
}

class FoldIntoProducts : public RewritePattern {
public:
  FoldIntoProducts() : RewritePattern(kIntoProductsPattern) {}

  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override {
    std::optional<IntoProductsPlan> plan = planIntoProducts(node, rewriter);
    if (!plan)
      return false;
    Value *input = node.getOperand(0);
    Value *result = node.getResult(0);
    Builder &builder = rewriter.getBuilder();
    if (plan->residual) {
      builder.setInsertionPoint(&node);
      std::vector<int64_t> perm(plan->residual->begin(), plan->residual->end());
      Node *rest = rewriter.createNode(
          node.getOp(), {input},
          {permuteType(input->getType(), *plan->residual)},
          {{"perm", Attribute::getInts(perm)}}, node.getName().str());
      input = rest->getResult(0);
      takeName(result, input);
    }
    for (auto [user, operands] : plan->users) {
      auto [transA, transB] = productFlags(*user);
      Value *a = user->getOperand(0), *b = user->getOperand(1);
      if (operands & 1) {
        a = input;
        transA = !transA;
      }
      if (operands & 2) {
        b = input;
        transB = !transB;
      }
      Value *product = user->getResult(0);
      Node *replacement = rebuildProduct(rewriter, *user, a, b, transA, transB,
                                         product->getType());
      GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] " << user->describe()
                         << " reads the transpose's input with transA="
                         << transA << " transB=" << transB << "\n");
      rewriter.replaceAllUsesWith(product, replacement->getResult(0));
      takeName(product, replacement->getResult(0));
      rewriter.eraseNode(user);
    }
    rewriter.eraseNode(&node);
    return true;
  }
};

//===----------------------------------------------------------------------===//
// Of a product
//===----------------------------------------------------------------------===//

/// How a Transpose folds into the product it reads.
struct OfProductPlan {
  Node *product = nullptr;
  /// The Transpose still needed after the product, if any.
  std::optional<Perm> residual;
};

std::optional<OfProductPlan> planOfProduct(const Node &transpose,
                                           PatternRewriter &rewriter) {
  const Module &module = rewriter.getModule();
  std::optional<Perm> perm = transposePerm(transpose);
  if (!perm)
    return std::nullopt;
  Value *input = transpose.getOperand(0);
  Node *product = input->getDefiningNode();
  if (!product || !input->hasOneUse() || input->isGraphOutput() ||
      rewriter.isInSignature(input) || rewriter.isInSignature(product) ||
      !isFlippableProduct(*product, module))
    return std::nullopt;
  OfProductPlan plan;
  plan.product = product;
  plan.residual = residualPerm(*perm, /*swapAfter=*/false);
  if (!plan.residual)
    return std::nullopt;
  if (isIdentity(*plan.residual))
    plan.residual.reset();
  return plan;
}

class FoldOfProduct : public RewritePattern {
public:
  FoldOfProduct() : RewritePattern(kOfProductPattern) {}

  llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const override {
    std::optional<OfProductPlan> plan = planOfProduct(node, rewriter);
    if (!plan)
      return false;
    Node &product = *plan->product;
    Value *oldProduct = product.getResult(0);
    Value *result = node.getResult(0);
    int64_t rank = oldProduct->getType().getRank();
    Perm swapLast;
    for (int64_t d = 0; d < rank; ++d)
      swapLast.push_back(d);
    std::swap(swapLast[rank - 2], swapLast[rank - 1]);
    // (op(A) op(B))^T = op(B)^T op(A)^T.
    auto [transA, transB] = productFlags(product);
    Node *swapped = rebuildProduct(
        rewriter, product, product.getOperand(1), product.getOperand(0),
        !transB, !transA, permuteType(oldProduct->getType(), swapLast));
    Value *replacement = swapped->getResult(0);
    if (plan->residual) {
      Builder &builder = rewriter.getBuilder();
      builder.setInsertionPoint(&node);
      std::vector<int64_t> perm(plan->residual->begin(), plan->residual->end());
      Node *rest = rewriter.createNode(
          node.getOp(), {replacement}, {result->getType()},
          {{"perm", Attribute::getInts(perm)}}, node.getName().str());
      takeName(oldProduct, replacement);
      replacement = rest->getResult(0);
    }
    GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] " << node.describe()
                       << " folded into " << product.describe() << "\n");
    rewriter.replaceAllUsesWith(result, replacement);
    takeName(result, replacement);
    rewriter.eraseNode(&node);
    rewriter.eraseNode(&product);
    return true;
  }
};

} // namespace

FoldTransposePass::FoldTransposePass() : FoldTransposePass(Options()) {}

FoldTransposePass::FoldTransposePass(Options initial) : options(initial) {
  declareOption("into-products", options.intoProducts,
                "fold transposes read by matrix products into transA/transB");
  declareOption("of-products", options.ofProducts,
                "fold the transpose of a product into the product");
  declareStatistic("folded-into-products",
                   "Transposes folded into the products that read them");
  declareStatistic("folded-of-products",
                   "Transposes of a product folded into the product");
}

llvm::Expected<bool> FoldTransposePass::run(Module &module,
                                            PassContext &context) {
  FoldIntoProducts intoProducts;
  FoldOfProduct ofProduct;
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
  addStatistic(context, "folded-into-products", count(kIntoProductsPattern));
  addStatistic(context, "folded-of-products", count(kOfProductPattern));
  return result->changed;
}
