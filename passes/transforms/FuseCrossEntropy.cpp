//===- FuseCrossEntropy.cpp - LM head + loss as one fused op pair ---------===//
//
// Matches each SoftmaxCrossEntropyLoss against the pattern of
// FuseCrossEntropy.h, forward and backward, without touching the IR; every
// complete match becomes a CrossEntropyFusion plan; then each plan is
// rewritten into gmopt.FusedLinearCrossEntropy(Grad) and the matched nodes
// (and the Shape nodes that only served the erased reshapes) are erased,
// users before producers.
//
//===----------------------------------------------------------------------===//

#include "passes/transforms/FuseCrossEntropy.h"
#include "passes/DebugOutput.h"
#include "passes/PatternRewriter.h"

#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/ops/CrossEntropySpec.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#define DEBUG_TYPE "gmopt-fuse-cross-entropy"

using namespace gmopt;

namespace {

/// Why a SoftmaxCrossEntropyLoss was left alone (each is a statistic).
enum class LeftReason {
  /// The logits, log-probabilities or the logits' gradient have a use
  /// outside the pattern.
  ExtraUse,
  /// No SoftmaxCrossEntropyLossGrad reads the log-probabilities.
  NoBackward,
  /// The projection's gradient products differ from the recognised forms.
  BackwardUnmatched,
  /// Class weights, or logits that are not a plain product of h and a
  /// rank-2 weight.
  Unsupported,
};

constexpr LeftReason kAllReasons[] = {
    LeftReason::ExtraUse, LeftReason::NoBackward, LeftReason::BackwardUnmatched,
    LeftReason::Unsupported};

llvm::StringRef statisticOf(LeftReason reason) {
  switch (reason) {
  case LeftReason::ExtraUse:
    return "left-extra-use";
  case LeftReason::NoBackward:
    return "left-no-backward";
  case LeftReason::BackwardUnmatched:
    return "left-backward-unmatched";
  case LeftReason::Unsupported:
    return "left-unsupported";
  }
  llvm_unreachable("unknown reason");
}

llvm::StringRef descriptionOf(LeftReason reason) {
  switch (reason) {
  case LeftReason::ExtraUse:
    return "losses left: logits, log-probabilities or their gradient have "
           "another use";
  case LeftReason::NoBackward:
    return "losses left: no SoftmaxCrossEntropyLossGrad";
  case LeftReason::BackwardUnmatched:
    return "losses left: the projection's gradient not recognised";
  case LeftReason::Unsupported:
    return "losses left: class weights, or logits not a product of h and a "
           "rank-2 weight";
  }
  llvm_unreachable("unknown reason");
}

/// A MatMul or FusedMatMul without batch transposes or scale, or a Gemm
/// without C and scale: op(A) op(B).
struct Product {
  Node *node = nullptr;
  Value *a = nullptr, *b = nullptr;
  bool transA = false, transB = false;
};

std::optional<Product> matchProduct(Node *node) {
  if (!node || node->getNumOperands() != 2 || node->getNumResults() != 1 ||
      !node->getResult(0) || !node->getOperand(0) || !node->getOperand(1))
    return std::nullopt;
  Product product{node, node->getOperand(0), node->getOperand(1)};
  if (node->isa(kOnnxDomain, "MatMul"))
    return product;
  bool fused = node->isa(kMsDomain, "FusedMatMul");
  if (!fused && !node->isa(kOnnxDomain, "Gemm"))
    return std::nullopt;
  if (node->getFloatAttr("alpha", 1.0f) != 1.0f ||
      (fused && (node->getIntAttr("transBatchA", 0) ||
                 node->getIntAttr("transBatchB", 0))))
    return std::nullopt;
  product.transA = node->getIntAttr("transA", 0) != 0;
  product.transB = node->getIntAttr("transB", 0) != 0;
  return product;
}

/// A Reshape's data operand when \p node is a Reshape, else null.
bool isReshape(const Node *node) {
  return node && node->isa(kOnnxDomain, "Reshape") &&
         node->getNumOperands() >= 1 && node->getNumResults() == 1;
}

/// True if \p a and \p b have one element type and the same dimensions
/// where both are static (symbolic names may differ).
bool sameType(const Value *a, const Value *b) {
  const TensorType &x = a->getType(), &y = b->getType();
  if (x.getDType() != y.getDType() || !x.hasRank() || !y.hasRank() ||
      x.getRank() != y.getRank())
    return false;
  if (x.hasStaticShape() && y.hasStaticShape())
    return x.getStaticShape() == y.getStaticShape();
  return true;
}

uint64_t staticBytes(const Value *value) {
  const TensorType &type = value->getType();
  return type.hasStaticShape() ? type.getSizeInBytes() : 0;
}

/// One projection + loss to fuse: what the fused pair reads and every node
/// it replaces.
struct CrossEntropyFusion {
  Value *h = nullptr, *w = nullptr, *labels = nullptr, *dLoss = nullptr;
  bool transW = true;
  /// The loss node, its gradient, the forward product and the two
  /// gradient products.
  Node *loss = nullptr, *lossGrad = nullptr;
  Node *product = nullptr, *dhProduct = nullptr, *dwProduct = nullptr;
  Value *dh = nullptr, *dW = nullptr;
  /// Every matched node (erased after the rewrite).
  llvm::SmallVector<Node *, 12> nodes;
  /// Nodes erased when the rewrite leaves them unused (the Shape nodes of
  /// the logits, h's 2-d reshape).
  llvm::SmallVector<Node *, 4> maybeDead;
  /// Bytes of the [N, V] tensors that disappear (when static).
  uint64_t logitBytes = 0;

  void print(llvm::raw_ostream &os) const {
    os << "cross-entropy fusion: loss " << loss->describe() << ", W "
       << (transW ? "[V, D]" : "[D, V]") << ", " << nodes.size() << " nodes, "
       << logitBytes << " bytes of logits removed\n";
  }
};

/// Either a fusion or why the loss was left.
struct MatchResult {
  std::optional<CrossEntropyFusion> fusion;
  std::optional<LeftReason> left;
};

MatchResult leave(LeftReason reason) {
  MatchResult result;
  result.left = reason;
  return result;
}

/// The analysis of one SoftmaxCrossEntropyLoss node.
MatchResult matchLoss(Node &loss) {
  MatchResult none;
  if (!loss.isa(kOnnxDomain, "SoftmaxCrossEntropyLoss"))
    return none;
  if (loss.getNumOperands() > 2 && loss.getOperand(2))
    return leave(LeftReason::Unsupported);
  if (loss.getNumResults() != 2 || !loss.getResult(1))
    return leave(LeftReason::NoBackward);
  CrossEntropyFusion fusion;
  fusion.loss = &loss;
  fusion.labels = loss.getOperand(1);
  Value *logProb = loss.getResult(1);

  // The gradient of the loss reads the log-probabilities, and only it.
  if (logProb->isGraphOutput() || logProb->getNumUses() == 0)
    return leave(logProb->isGraphOutput() ? LeftReason::ExtraUse
                                          : LeftReason::NoBackward);
  if (!logProb->hasOneUse())
    return leave(LeftReason::ExtraUse);
  Node *lossGrad = logProb->getUses().begin()->getOwner();
  if (!lossGrad || !lossGrad->isa(kMsDomain, "SoftmaxCrossEntropyLossGrad"))
    return leave(LeftReason::ExtraUse);
  if (lossGrad->getNumOperands() < 3 || lossGrad->getOperand(1) != logProb ||
      lossGrad->getOperand(2) != fusion.labels ||
      (lossGrad->getNumOperands() > 3 && lossGrad->getOperand(3)) ||
      lossGrad->getStringAttr("reduction", "mean") !=
          loss.getStringAttr("reduction", "mean") ||
      lossGrad->hasAttr("ignore_index") != loss.hasAttr("ignore_index") ||
      lossGrad->getIntAttr("ignore_index", 0) !=
          loss.getIntAttr("ignore_index", 0) ||
      !lossGrad->getOperand(0) || !lossGrad->getResult(0))
    return leave(LeftReason::BackwardUnmatched);
  fusion.lossGrad = lossGrad;
  fusion.dLoss = lossGrad->getOperand(0);

  // Forward: logits = [Reshape](h op(W)), read only by the loss (and by
  // Shape nodes, which only see the product's shape).
  Value *logits = loss.getOperand(0);
  if (!logits || logits->isGraphOutput() || !logits->hasOneUse())
    return leave(LeftReason::ExtraUse);
  Node *producer = logits->getDefiningNode();
  Value *productValue = logits;
  llvm::SmallVector<Node *, 2> shapeNodes;
  if (isReshape(producer)) {
    fusion.nodes.push_back(producer);
    productValue = producer->getOperand(0);
    if (!productValue || productValue->isGraphOutput())
      return leave(LeftReason::ExtraUse);
    for (const OpOperand &use : productValue->getUses()) {
      Node *user = use.getOwner();
      if (user == producer)
        continue;
      if (!user || !user->isa(kOnnxDomain, "Shape"))
        return leave(LeftReason::ExtraUse);
      shapeNodes.push_back(user);
    }
  }
  std::optional<Product> product =
      matchProduct(productValue ? productValue->getDefiningNode() : nullptr);
  if (!product || product->transA || product->node->isa(kOnnxDomain, "Gemm") ||
      !product->b->getType().hasRank() || product->b->getType().getRank() != 2)
    return leave(LeftReason::Unsupported);
  fusion.nodes.push_back(product->node);
  fusion.product = product->node;
  fusion.h = product->a;
  fusion.w = product->b;
  fusion.transW = product->transB;
  // SoftmaxCrossEntropyLoss's classes are axis 1: the logits must be
  // [N, V] with W's vocabulary, one label per row, so that token i of the
  // loss is row i of h.
  const TensorType &logitsType = logits->getType();
  const TensorType &labelsType = fusion.labels->getType();
  if (!logitsType.hasRank() || logitsType.getRank() != 2 ||
      !labelsType.hasRank() || labelsType.getRank() != 1 ||
      !(logitsType.getDims()[1] ==
        fusion.w->getType().getDims()[fusion.transW ? 0 : 1]))
    return leave(LeftReason::Unsupported);

  // Backward: the logits' gradient through reshapes reaches one product
  // giving dh and one Gemm giving dW, and nothing else.
  llvm::SmallVector<Value *, 4> gradients{lossGrad->getResult(0)};
  std::optional<Product> dhProduct, dwProduct;
  for (size_t i = 0; i != gradients.size(); ++i) {
    Value *gradient = gradients[i];
    if (gradient->isGraphOutput())
      return leave(LeftReason::ExtraUse);
    for (const OpOperand &use : gradient->getUses()) {
      Node *user = use.getOwner();
      if (isReshape(user) && use.getIndex() == 0) {
        fusion.nodes.push_back(user);
        gradients.push_back(user->getResult(0));
        continue;
      }
      std::optional<Product> candidate = matchProduct(user);
      if (!candidate)
        return leave(LeftReason::ExtraUse);
      // dh = dZ op(W) with W's other orientation.
      if (!dhProduct && candidate->a == gradient && candidate->b == fusion.w &&
          !candidate->transA && candidate->transB != fusion.transW &&
          sameType(candidate->node->getResult(0), fusion.h)) {
        dhProduct = candidate;
        continue;
      }
      // dW = dZ^T h ([V, D]) or h^T dZ ([D, V]), h possibly reshaped.
      Value *other = fusion.transW ? candidate->b : candidate->a;
      Value *dz = fusion.transW ? candidate->a : candidate->b;
      Node *otherProducer = other->getDefiningNode();
      bool isH =
          other == fusion.h || (isReshape(otherProducer) &&
                                otherProducer->getOperand(0) == fusion.h);
      if (!dwProduct && dz == gradient && isH && candidate->transA &&
          !candidate->transB &&
          sameType(candidate->node->getResult(0), fusion.w)) {
        dwProduct = candidate;
        if (other != fusion.h)
          fusion.maybeDead.push_back(otherProducer);
        continue;
      }
      return leave(LeftReason::BackwardUnmatched);
    }
  }
  if (!dhProduct || !dwProduct)
    return leave(LeftReason::BackwardUnmatched);
  fusion.nodes.push_back(lossGrad);
  fusion.nodes.push_back(dhProduct->node);
  fusion.nodes.push_back(dwProduct->node);
  fusion.dhProduct = dhProduct->node;
  fusion.dwProduct = dwProduct->node;
  fusion.dh = dhProduct->node->getResult(0);
  fusion.dW = dwProduct->node->getResult(0);
  fusion.maybeDead.append(shapeNodes.begin(), shapeNodes.end());
  fusion.logitBytes = staticBytes(productValue) + staticBytes(logProb) +
                      staticBytes(lossGrad->getResult(0));
  MatchResult result;
  result.fusion = std::move(fusion);
  return result;
}

/// Moves \p from's name to \p to.
void takeName(Value *from, Value *to) {
  std::string name = from->getName().str();
  from->setName("");
  to->setName(name);
}

/// Rewrites one planned fusion.
void rewriteFusion(PatternRewriter &rewriter,
                   const CrossEntropyFusion &fusion) {
  const Node &loss = *fusion.loss;
  llvm::SmallVector<NamedAttribute, 3> attrs;
  attrs.push_back({"trans_w", Attribute::getInt(fusion.transW ? 1 : 0)});
  if (loss.hasAttr("ignore_index"))
    attrs.push_back({"ignore_index",
                     Attribute::getInt(loss.getIntAttr("ignore_index", 0))});
  attrs.push_back(
      {"reduction",
       Attribute::getString(loss.getStringAttr("reduction", "mean").str())});
  Builder &builder = rewriter.getBuilder();
  Phase savedPhase = builder.getPhase();
  Value *lossValue = fusion.loss->getResult(0);
  std::string name = lossValue->getName().str() + "/FusedLinearCrossEntropy";

  // Forward: loss and the log-sum-exp, where the loss was.
  builder.setInsertionPoint(fusion.loss);
  builder.setPhase(fusion.loss->getPhase());
  Node *forward = rewriter.createNode(
      OpName{kGmoptDomain.str(), kFusedLinearCrossEntropyOp.str()},
      {fusion.h, fusion.w, fusion.labels},
      {lossValue->getType(),
       TensorType(DType::F32, fusion.labels->getType().getDims())},
      attrs, name);
  forward->getResult(1)->setName(lossValue->getName().str() + "_lse");

  // Backward: dh and dW where the loss's gradient was.
  builder.setInsertionPoint(fusion.lossGrad);
  builder.setPhase(fusion.lossGrad->getPhase());
  Node *backward = rewriter.createNode(
      OpName{kGmoptDomain.str(), kFusedLinearCrossEntropyGradOp.str()},
      {fusion.dLoss, fusion.h, fusion.w, fusion.labels, forward->getResult(1)},
      {fusion.dh->getType(), fusion.dW->getType()}, attrs, name + "Grad");
  builder.setPhase(savedPhase);

  rewriter.replaceAllUsesWith(lossValue, forward->getResult(0));
  takeName(lossValue, forward->getResult(0));
  rewriter.replaceAllUsesWith(fusion.dh, backward->getResult(0));
  takeName(fusion.dh, backward->getResult(0));
  rewriter.replaceAllUsesWith(fusion.dW, backward->getResult(1));
  takeName(fusion.dW, backward->getResult(1));
}

/// The token chunks of a forward-gradient rewrite, or nothing when
/// \p fusion does not qualify (see FuseCrossEntropyPass::Options::mode).
std::optional<std::vector<int64_t>>
forwardGradientChunks(const CrossEntropyFusion &fusion, uint64_t chunkBytes) {
  const Node &loss = *fusion.loss;
  const TensorType &hType = fusion.h->getType();
  const TensorType &wType = fusion.w->getType();
  const TensorType &labelsType = fusion.labels->getType();
  if (loss.getStringAttr("reduction", "mean") == "none" ||
      hType.getDType() != DType::F32 || !hType.hasStaticShape() ||
      hType.getRank() < 2 || !wType.hasStaticShape() ||
      !labelsType.hasStaticShape() ||
      loss.getResult(0)->getType().getRank() != 0 ||
      !fusion.dLoss->getType().hasStaticShape() ||
      fusion.dLoss->getType().getNumElements() != 1 ||
      fusion.dLoss->getType().getDType() != DType::F32)
    return std::nullopt;
  const int64_t tokens = int64_t(labelsType.getNumElements());
  const int64_t vocabulary = wType.getStaticShape()[fusion.transW ? 0 : 1];
  if (tokens <= 0 || vocabulary <= 0 ||
      int64_t(hType.getNumElements()) / hType.getStaticShape().back() != tokens)
    return std::nullopt;
  // A chunk has more than D / 2 tokens, so that its logits' gradient is
  // more than half of dW's bytes: the first dW share then allocates less
  // net than the next chunk's logits, and the schedule's list scheduler
  // (passes/planning/Schedule.h: the ready node freeing the most bytes
  // net first) runs each chunk's dW accumulation with its chunk instead of
  // deferring the whole chain, with every chunk's gradient live, to the
  // backward pass (GPT-2 small 8 x 1024: 6.5 GiB planned with 64 MiB
  // chunks of 333 tokens, 5.2 GiB with 385).
  const int64_t depth = hType.getStaticShape().back();
  const int64_t rowBytes = vocabulary * int64_t(sizeof(float));
  const int64_t rows = std::clamp<int64_t>(
      std::max(int64_t(chunkBytes) / rowBytes, depth / 2 + 1), int64_t(1),
      tokens);
  std::vector<int64_t> chunks;
  for (int64_t start = 0; start < tokens; start += rows)
    chunks.push_back(std::min(rows, tokens - start));
  return chunks;
}

/// Rewrites one planned fusion with the gradient computed in the forward
/// pass, one token chunk at a time (FuseCrossEntropyPass::Options::mode).
void rewriteForwardGradient(PatternRewriter &rewriter, Module &module,
                            const CrossEntropyFusion &fusion,
                            llvm::ArrayRef<int64_t> chunks) {
  const Node &loss = *fusion.loss;
  Builder &builder = rewriter.getBuilder();
  Phase savedPhase = builder.getPhase();
  Value *lossValue = fusion.loss->getResult(0);
  const std::string name = lossValue->getName().str() + "/ForwardGradient";
  const TensorType &hType = fusion.h->getType();
  const TensorType &wType = fusion.w->getType();
  const int64_t depth = hType.getStaticShape().back();
  const int64_t vocabulary = wType.getStaticShape()[fusion.transW ? 0 : 1];
  int64_t tokens = 0;
  for (int64_t rows : chunks)
    tokens += rows;
  auto f32 = [](llvm::ArrayRef<int64_t> shape) {
    return TensorType::get(DType::F32, shape);
  };
  auto i64Constant = [&](llvm::ArrayRef<int64_t> values,
                         llvm::ArrayRef<int64_t> shape,
                         const std::string &suffix) {
    return rewriter.createConstant(
        TensorData::fromValues<int64_t>(DType::I64, shape, values),
        name + suffix);
  };
  auto f32Scalar = [&](float value, const std::string &suffix) {
    return rewriter.createConstant(
        TensorData::fromValues<float>(DType::F32, {}, {value}), name + suffix);
  };
  llvm::SmallVector<NamedAttribute, 2> lossAttrs;
  lossAttrs.push_back({"reduction", Attribute::getString("sum")});
  if (loss.hasAttr("ignore_index"))
    lossAttrs.push_back({"ignore_index", Attribute::getInt(loss.getIntAttr(
                                             "ignore_index", 0))});
  auto create =
      [&](llvm::StringRef domain, llvm::StringRef op,
          llvm::ArrayRef<Value *> operands, llvm::ArrayRef<TensorType> types,
          llvm::ArrayRef<NamedAttribute> attrs, const std::string &suffix) {
        return rewriter.createNode(OpName{domain.str(), op.str()}, operands,
                                   types, attrs, name + suffix);
      };

  // Forward, where the loss was: h as [N, D], h and the labels in chunks.
  builder.setInsertionPoint(fusion.loss);
  builder.setPhase(fusion.loss->getPhase());
  Value *h2 = fusion.h;
  if (hType.getRank() != 2)
    h2 = create(kOnnxDomain, "Reshape",
                {fusion.h, i64Constant({tokens, depth}, {2}, "/h_shape")},
                {f32({tokens, depth})}, {}, "/h")
             ->getResult(0);
  std::vector<Value *> hChunks{h2}, labelChunks{fusion.labels};
  if (chunks.size() > 1) {
    auto split = [&](Value *value, llvm::ArrayRef<int64_t> rest,
                     const std::string &suffix) {
      llvm::SmallVector<TensorType, 32> types;
      for (int64_t rows : chunks) {
        llvm::SmallVector<int64_t, 2> shape{rows};
        shape.append(rest.begin(), rest.end());
        types.push_back(TensorType::get(value->getType().getDType(), shape));
      }
      llvm::SmallVector<NamedAttribute, 2> attrs{
          {"axis", Attribute::getInt(0)}};
      llvm::SmallVector<Value *, 2> operands{value};
      if (module.getOpsetVersion(kOnnxDomain) >= 13)
        operands.push_back(
            i64Constant(chunks, {int64_t(chunks.size())}, suffix + "_split"));
      else
        attrs.push_back({"split", Attribute::getInts(chunks)});
      Node *node = create(kOnnxDomain, "Split", operands, types, attrs, suffix);
      std::vector<Value *> results;
      for (unsigned i = 0, e = node->getNumResults(); i != e; ++i)
        results.push_back(node->getResult(i));
      return results;
    };
    hChunks = split(h2, {depth}, "/h_chunks");
    labelChunks = split(fusion.labels, {}, "/label_chunks");
  }
  Value *one = f32Scalar(1.0f, "/one");
  std::vector<Value *> losses, dhChunks;
  Value *dW = nullptr;
  const bool gemm = fusion.dwProduct->isa(kOnnxDomain, "Gemm");
  for (size_t c = 0; c != chunks.size(); ++c) {
    const int64_t rows = chunks[c];
    const std::string chunk = "/chunk" + std::to_string(c);
    Value *hc = hChunks[c], *labels = labelChunks[c];
    Value *logits =
        create(fusion.product->getDomain(), fusion.product->getOpType(),
               {hc, fusion.w}, {f32({rows, vocabulary})},
               fusion.product->getAttrs(), chunk + "/logits")
            ->getResult(0);
    Node *chunkLoss =
        create(kOnnxDomain, "SoftmaxCrossEntropyLoss", {logits, labels},
               {f32({}), f32({rows, vocabulary})}, lossAttrs, chunk + "/loss");
    losses.push_back(chunkLoss->getResult(0));
    Value *dLogits =
        create(kMsDomain, "SoftmaxCrossEntropyLossGrad",
               {one, chunkLoss->getResult(1), labels},
               {f32({rows, vocabulary})}, lossAttrs, chunk + "/dlogits")
            ->getResult(0);
    dhChunks.push_back(create(fusion.dhProduct->getDomain(),
                              fusion.dhProduct->getOpType(),
                              {dLogits, fusion.w}, {f32({rows, depth})},
                              fusion.dhProduct->getAttrs(), chunk + "/dh")
                           ->getResult(0));
    llvm::SmallVector<Value *, 3> operands;
    if (fusion.transW)
      operands = {dLogits, hc};
    else
      operands = {hc, dLogits};
    llvm::SmallVector<NamedAttribute, 6> attrs(
        fusion.dwProduct->getAttrs().begin(),
        fusion.dwProduct->getAttrs().end());
    if (gemm && dW) {
      // Gemm accumulates into C: dW += this chunk's share, in place.
      operands.push_back(dW);
      llvm::erase_if(attrs,
                     [](const NamedAttribute &a) { return a.name == "beta"; });
      attrs.push_back({"beta", Attribute::getFloat(1.0f)});
    }
    Value *share =
        create(fusion.dwProduct->getDomain(), fusion.dwProduct->getOpType(),
               operands, {wType}, attrs, chunk + "/dW")
            ->getResult(0);
    dW = gemm || !dW ? share
                     : create(kOnnxDomain, "Add", {dW, share}, {wType}, {},
                              chunk + "/dW_sum")
                           ->getResult(0);
  }
  Value *lossSum = losses.front();
  if (losses.size() > 1)
    lossSum = create(kOnnxDomain, "Sum", losses, {f32({})}, {}, "/loss_sum")
                  ->getResult(0);
  const bool mean = loss.getStringAttr("reduction", "mean") == "mean";
  Value *count = nullptr;
  if (mean && loss.hasAttr("ignore_index")) {
    // The mean is over the tokens whose label is not ignore_index.
    DType labelType = fusion.labels->getType().getDType();
    int64_t ignore = loss.getIntAttr("ignore_index", 0);
    Value *ignoreValue =
        labelType == DType::I32
            ? rewriter.createConstant(TensorData::fromValues<int32_t>(
                                          DType::I32, {}, {int32_t(ignore)}),
                                      name + "/ignore_index")
            : i64Constant({ignore}, {}, "/ignore_index");
    TensorType flags = TensorType::get(DType::Bool, {tokens});
    Value *ignored = create(kOnnxDomain, "Equal", {fusion.labels, ignoreValue},
                            {flags}, {}, "/ignored")
                         ->getResult(0);
    Value *counted =
        create(kOnnxDomain, "Not", {ignored}, {flags}, {}, "/counted")
            ->getResult(0);
    Value *weights =
        create(kOnnxDomain, "Cast", {counted}, {f32({tokens})},
               {{"to", Attribute::getInt(int64_t(DType::F32))}}, "/weights")
            ->getResult(0);
    count = create(kOnnxDomain, "ReduceSum", {weights}, {f32({})},
                   {{"keepdims", Attribute::getInt(0)}}, "/count")
                ->getResult(0);
  } else if (mean) {
    count = f32Scalar(float(tokens), "/count");
  }
  // Mean and sum losses are scalars (forwardGradientChunks).
  Value *newLoss = lossSum;
  if (mean)
    newLoss = create(kOnnxDomain, "Div", {lossSum, count},
                     {lossValue->getType()}, {}, "/loss_mean")
                  ->getResult(0);
  Value *dhUnit = dhChunks.front();
  if (dhChunks.size() > 1)
    dhUnit = create(kOnnxDomain, "Concat", dhChunks, {f32({tokens, depth})},
                    {{"axis", Attribute::getInt(0)}}, "/dh_unit")
                 ->getResult(0);

  // Backward, where the loss's gradient was: scale by dloss (over the count).
  builder.setInsertionPoint(fusion.lossGrad);
  builder.setPhase(fusion.lossGrad->getPhase());
  Value *scale = fusion.dLoss;
  if (fusion.dLoss->getType().getRank() != 0)
    scale = create(kOnnxDomain, "Reshape",
                   {scale, i64Constant({}, {0}, "/scalar_shape")}, {f32({})},
                   {}, "/dloss_scalar")
                ->getResult(0);
  if (mean)
    scale =
        create(kOnnxDomain, "Div", {scale, count}, {f32({})}, {}, "/dloss_mean")
            ->getResult(0);
  Value *dh = create(kOnnxDomain, "Mul", {dhUnit, scale},
                     {f32({tokens, depth})}, {}, "/dh_scaled")
                  ->getResult(0);
  if (hType.getRank() != 2)
    dh = create(kOnnxDomain, "Reshape",
                {dh, i64Constant(hType.getStaticShape(), {hType.getRank()},
                                 "/dh_shape")},
                {fusion.dh->getType()}, {}, "/dh")
             ->getResult(0);
  Value *dWScaled = create(kOnnxDomain, "Mul", {dW, scale},
                           {fusion.dW->getType()}, {}, "/dW_scaled")
                        ->getResult(0);
  builder.setPhase(savedPhase);

  rewriter.replaceAllUsesWith(lossValue, newLoss);
  takeName(lossValue, newLoss);
  rewriter.replaceAllUsesWith(fusion.dh, dh);
  takeName(fusion.dh, dh);
  rewriter.replaceAllUsesWith(fusion.dW, dWScaled);
  takeName(fusion.dW, dWScaled);
}

} // namespace

FuseCrossEntropyPass::FuseCrossEntropyPass()
    : FuseCrossEntropyPass(Options()) {}

FuseCrossEntropyPass::FuseCrossEntropyPass(Options opts)
    : options(std::move(opts)) {
  declareEnumOption<CrossEntropyMode>(
      "mode", options.mode,
      {{"recompute", CrossEntropyMode::Recompute},
       {"forward-gradient", CrossEntropyMode::ForwardGradient}},
      "recompute: one fused op pair, the backward recomputes the logits one "
      "vocabulary block at a time; forward-gradient: the gradient is computed "
      "in the forward pass, one token chunk at a time, with no recompute "
      "(mean and sum fp32 losses; others fall back to recompute)");
  declareOption("chunk-bytes", options.chunkBytes,
                "forward-gradient: bytes of one token chunk's fp32 logits");
  declareStatistic("fused", "projection + cross-entropy losses fused, forward "
                            "and backward");
  declareStatistic("forward-gradient",
                   "of those, rewritten with the gradient in the forward "
                   "pass (token chunks, no recompute)");
  declareStatistic("chunks", "token chunks of the forward-gradient rewrites");
  declareStatistic("logit-bytes-removed",
                   "bytes of the [N, V] logits, log-probabilities and their "
                   "gradient no longer stored");
  for (LeftReason reason : kAllReasons)
    declareStatistic(statisticOf(reason), descriptionOf(reason));
}

llvm::Expected<bool> FuseCrossEntropyPass::run(Module &module,
                                               PassContext &context) {
  Graph &graph = module.getGraph();
  PatternRewriter rewriter(module);
  llvm::DenseMap<const Node *, size_t> positions;
  for (const Node &node : graph.getNodes())
    positions[&node] = positions.size();

  // Analysis and plan: every loss, matched without touching the IR.
  std::vector<CrossEntropyFusion> plan;
  llvm::DenseMap<unsigned, uint64_t> leftCounts;
  for (Node &node : graph.getNodes()) {
    MatchResult result = matchLoss(node);
    if (result.left) {
      GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] left " << node.describe() << ": "
                         << statisticOf(*result.left) << "\n");
      ++leftCounts[static_cast<unsigned>(*result.left)];
    }
    if (result.fusion) {
      GMOPT_DEBUG(result.fusion->print(dbgs()));
      plan.push_back(std::move(*result.fusion));
    }
  }

  // Rewrite, then erase every replaced node, users first.
  uint64_t logitBytes = 0;
  uint64_t forwardGradient = 0, chunkCount = 0;
  for (const CrossEntropyFusion &fusion : plan) {
    std::optional<std::vector<int64_t>> chunks;
    if (options.mode == CrossEntropyMode::ForwardGradient)
      chunks = forwardGradientChunks(fusion, options.chunkBytes);
    if (chunks) {
      rewriteForwardGradient(rewriter, module, fusion, *chunks);
      ++forwardGradient;
      chunkCount += chunks->size();
    } else {
      if (!module.opsetImports.count(kGmoptDomain.str()))
        module.opsetImports[kGmoptDomain.str()] = 1;
      rewriteFusion(rewriter, fusion);
    }
    logitBytes += fusion.logitBytes;
    llvm::SmallVector<Node *, 16> nodes(fusion.nodes.begin(),
                                        fusion.nodes.end());
    nodes.push_back(fusion.loss);
    nodes.append(fusion.maybeDead.begin(), fusion.maybeDead.end());
    llvm::sort(nodes, [&](const Node *a, const Node *b) {
      return positions.lookup(a) > positions.lookup(b);
    });
    for (Node *node : nodes) {
      if (rewriter.isErased(node))
        continue;
      bool optional = llvm::is_contained(fusion.maybeDead, node);
      if (optional && !node->resultsUnused())
        continue;
      assert(node->resultsUnused() && "a fused node's result is still used");
      rewriter.eraseNode(node);
    }
  }
  rewriter.finalizeErasures();

  addStatistic(context, "fused", plan.size());
  addStatistic(context, "forward-gradient", forwardGradient);
  addStatistic(context, "chunks", chunkCount);
  addStatistic(context, "logit-bytes-removed", logitBytes);
  for (LeftReason reason : kAllReasons)
    addStatistic(context, statisticOf(reason),
                 leftCounts.lookup(static_cast<unsigned>(reason)));
  return !plan.empty();
}
