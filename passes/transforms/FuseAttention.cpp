//===- FuseAttention.cpp - Attention as one fused op pair -----------------===//
//
// Matches each Softmax over the last axis against the attention pattern of
// FuseAttention.h, forward and backward, without touching the IR; every
// complete match becomes an AttentionFusion plan; then each plan is
// rewritten into gmopt.FusedAttention + gmopt.FusedAttentionGrad and the
// matched nodes are erased, users before producers.
//
//===----------------------------------------------------------------------===//

#include "passes/transforms/FuseAttention.h"
#include "passes/DebugOutput.h"
#include "passes/PatternRewriter.h"
#include "passes/transforms/ScalarConstant.h"

#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/ops/AttentionSpec.h"
#include "ir/ops/Axes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#define DEBUG_TYPE "gmopt-fuse-attention"

using namespace gmopt;

namespace {

/// Why a softmax that starts an attention pattern was left alone (each is a
/// statistic).
enum class LeftReason {
  /// An intermediate (scores, probabilities, dropped copy, mask, their
  /// gradients) has a use outside the pattern.
  ExtraUse,
  /// The forward pattern matched but no gradient subgraph reads it.
  NoBackward,
  /// The gradient subgraph differs from the recognised forms.
  BackwardUnmatched,
  /// The forward and backward scales disagree.
  ScaleMismatch,
};

llvm::StringRef statisticOf(LeftReason reason) {
  switch (reason) {
  case LeftReason::ExtraUse:
    return "left-extra-use";
  case LeftReason::NoBackward:
    return "left-no-backward";
  case LeftReason::BackwardUnmatched:
    return "left-backward-unmatched";
  case LeftReason::ScaleMismatch:
    return "left-scale-mismatch";
  }
  llvm_unreachable("unknown reason");
}

/// A MatMul or FusedMatMul without batch transposes: alpha op(A) op(B).
struct Product {
  Node *node = nullptr;
  Value *a = nullptr, *b = nullptr;
  bool transA = false, transB = false;
  float alpha = 1;
};

std::optional<Product> matchProduct(Node *node) {
  if (!node || node->getNumOperands() != 2 || node->getNumResults() != 1 ||
      !node->getResult(0))
    return std::nullopt;
  Product product;
  product.node = node;
  product.a = node->getOperand(0);
  product.b = node->getOperand(1);
  if (!product.a || !product.b)
    return std::nullopt;
  if (node->isa(kOnnxDomain, "MatMul"))
    return product;
  if (!node->isa(kMsDomain, "FusedMatMul") ||
      node->getIntAttr("transBatchA", 0) || node->getIntAttr("transBatchB", 0))
    return std::nullopt;
  product.transA = node->getIntAttr("transA", 0) != 0;
  product.transB = node->getIntAttr("transB", 0) != 0;
  product.alpha = node->getFloatAttr("alpha", 1.0f);
  return product;
}

/// The product defining \p value, or nullopt.
std::optional<Product> productOf(Value *value) {
  return value ? matchProduct(value->getDefiningNode()) : std::nullopt;
}

/// True if \p a and \p b have one element type and rank (their symbolic
/// dimensions may carry different names).
bool sameKind(const Value *a, const Value *b) {
  const TensorType &x = a->getType(), &y = b->getType();
  return x.getDType() == y.getDType() && x.hasRank() && y.hasRank() &&
         x.getRank() == y.getRank();
}

/// A Mul or Div of \p value's producer by a scalar constant: the scaled
/// operand and the factor (1/c for a Div).
struct Scaling {
  Node *node = nullptr;
  Value *scaled = nullptr;
  float factor = 1;
};

std::optional<Scaling> scalingOf(Value *value) {
  Node *node = value ? value->getDefiningNode() : nullptr;
  if (!node || node->getNumOperands() != 2)
    return std::nullopt;
  bool mul = node->isa(kOnnxDomain, "Mul"), div = node->isa(kOnnxDomain, "Div");
  if (!mul && !div)
    return std::nullopt;
  for (unsigned i = div ? 1 : 0; i != 2; ++i) {
    std::optional<float> constant = f32ScalarConstant(node->getOperand(i));
    Value *scaled = node->getOperand(1 - i);
    if (!constant || !scaled || !std::isfinite(*constant) || *constant == 0)
      continue;
    if (!sameKind(scaled, value))
      continue;
    return Scaling{node, scaled, div ? 1.0f / *constant : *constant};
  }
  return std::nullopt;
}

/// The only user of \p value through Identity nodes (which are collected),
/// or null when it has another count of uses or is a graph output.
Node *soleUserThroughIdentities(Value *&value,
                                llvm::SmallVectorImpl<Node *> &skipped) {
  while (value && value->hasOneUse() && !value->isGraphOutput()) {
    Node *user = value->getUses().begin()->getOwner();
    if (!user)
      return nullptr;
    if (!user->isa(kOnnxDomain, "Identity"))
      return user;
    skipped.push_back(user);
    value = user->getResult(0);
  }
  return nullptr;
}

/// True if \p a and \p b agree to float32 rounding.
bool sameScale(float a, float b) {
  return std::fabs(a - b) <= 1e-6f * std::max(std::fabs(a), std::fabs(b));
}

/// One attention pattern to fuse: what the fused pair reads and every node
/// it replaces.
struct AttentionFusion {
  Value *q = nullptr, *k = nullptr, *v = nullptr;
  /// The mask operand (boolean or additive), null when none or causal.
  Value *mask = nullptr;
  Value *ratio = nullptr, *trainingMode = nullptr;
  float scale = 1;
  bool kTransposed = false;
  bool causal = false;
  bool maskTrueKeeps = true;
  float maskedValue = -INFINITY;
  /// The dropout whose stream the fused pair draws (null: none).
  Node *dropout = nullptr;
  /// The forward output product and the gradient values replaced.
  Node *output = nullptr;
  Value *dO = nullptr;
  Value *dQ = nullptr, *dK = nullptr, *dV = nullptr;
  /// Where the fused gradient goes: before the earlier of the two products
  /// that read dO.
  Node *gradientPosition = nullptr;
  /// Every matched node (erased after the rewrite).
  llvm::SmallVector<Node *, 16> nodes;
  /// Bytes of the [.., sq, sk] tensors that disappear (when static).
  uint64_t scoreBytes = 0;

  void print(llvm::raw_ostream &os) const {
    os << "attention fusion: output " << output->describe() << ", scale "
       << scale << (kTransposed ? ", K transposed" : "")
       << (causal ? ", causal" : "")
       << (mask
               ? (mask->getType().getDType() == DType::Bool ? ", boolean mask"
                                                            : ", additive mask")
               : "")
       << (dropout ? ", dropout" : "") << ", " << nodes.size()
       << " nodes replaced\n";
  }
};

/// What matching one softmax found.
struct MatchResult {
  std::optional<AttentionFusion> fusion;
  /// Set when the softmax started an attention pattern that was left.
  std::optional<LeftReason> left;
};

/// True if \p value is the causal triangle of a [.., sq, sk] score: a
/// boolean initializer with leading dimensions 1 whose element (i, j) is
/// masked (true when \p trueMasks, false otherwise) exactly when
/// j > i + sk - sq.
bool isCausalConstant(const Value *value, bool trueMasks, int64_t sq,
                      int64_t sk) {
  if (!value || !value->isInitializer())
    return false;
  const TensorData &data = value->getData();
  const TensorType &type = data.getType();
  if (type.getDType() != DType::Bool || !type.hasStaticShape() ||
      data.isExternal())
    return false;
  llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
  if (shape.size() < 2 || shape[shape.size() - 2] != sq || shape.back() != sk)
    return false;
  for (size_t i = 0; i + 2 < shape.size(); ++i)
    if (shape[i] != 1)
      return false;
  llvm::ArrayRef<uint8_t> bytes = data.getBytes();
  if (bytes.size() != static_cast<size_t>(sq * sk))
    return false;
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j) {
      bool masked = (bytes[i * sk + j] != 0) == trueMasks;
      if (masked != (j > i + sk - sq))
        return false;
    }
  return true;
}

/// Static [.., sq, sk] extents of \p type, or nullopt.
std::optional<std::pair<int64_t, int64_t>> scoreExtents(const TensorType &t) {
  if (!t.hasRank() || t.getRank() < 2)
    return std::nullopt;
  const Dim &rows = t.getDim(t.getRank() - 2),
            &cols = t.getDim(t.getRank() - 1);
  if (!rows.isStatic() || !cols.isStatic())
    return std::nullopt;
  return std::make_pair(rows.getExtent(), cols.getExtent());
}

uint64_t staticBytes(const Value *value) {
  const TensorType &type = value->getType();
  return type.hasStaticShape() ? type.getSizeInBytes() : 0;
}

/// True if \p mask broadcasts to the scores \p scores without widening
/// them (right-aligned dimensions equal or 1 where both are static).
bool broadcastsTo(const TensorType &mask, const TensorType &scores) {
  if (!mask.hasRank() || !scores.hasRank() || mask.getRank() > scores.getRank())
    return false;
  unsigned offset = scores.getRank() - mask.getRank();
  for (unsigned i = 0; i != mask.getRank(); ++i) {
    const Dim &m = mask.getDim(i), &s = scores.getDim(offset + i);
    if (m.isStatic() && s.isStatic() && m.getExtent() != 1 &&
        m.getExtent() != s.getExtent())
      return false;
  }
  return true;
}

/// The analysis of one softmax node.
class AttentionMatcher {
public:
  AttentionMatcher(PatternRewriter &rewriter,
                   const FuseAttentionPass::Options &options,
                   const llvm::DenseMap<const Node *, size_t> &positions)
      : rewriter(rewriter), options(options), positions(positions) {}

  MatchResult match(Node &softmax);

private:
  /// A value that may disappear: no graph output, not in the signature.
  bool isInternal(const Value *value) {
    return !value->isGraphOutput() && !rewriter.isInSignature(value);
  }
  /// The users of \p value, or nullopt when it is a graph output, in the
  /// signature, or read twice by one node.
  std::optional<llvm::SmallVector<Node *, 4>> usersOf(const Value *value);

  MatchResult left(LeftReason reason) {
    MatchResult result;
    result.left = reason;
    return result;
  }

  PatternRewriter &rewriter;
  const FuseAttentionPass::Options &options;
  const llvm::DenseMap<const Node *, size_t> &positions;
};

std::optional<llvm::SmallVector<Node *, 4>>
AttentionMatcher::usersOf(const Value *value) {
  if (!isInternal(value))
    return std::nullopt;
  llvm::SmallVector<Node *, 4> users;
  for (const OpOperand &use : value->getUses()) {
    Node *user = use.getOwner();
    if (!user || llvm::is_contained(users, user))
      return std::nullopt;
    users.push_back(user);
  }
  return users;
}

MatchResult AttentionMatcher::match(Node &softmax) {
  MatchResult none;
  if (!softmax.isa(kOnnxDomain, "Softmax") || softmax.getNumOperands() != 1 ||
      softmax.getNumResults() != 1 || !softmax.getResult(0))
    return none;
  Value *probs = softmax.getResult(0);
  const TensorType &scoreType = probs->getType();
  if (!scoreType.hasRank() || scoreType.getRank() < 2)
    return none;
  auto axis = ops::getSoftmaxAxis(softmax, scoreType.getRank());
  if (!axis) {
    llvm::consumeError(axis.takeError());
    return none;
  }
  if (*axis != scoreType.getRank() - 1)
    return none;

  AttentionFusion fusion;
  fusion.nodes.push_back(&softmax);
  // Forward, backwards from the softmax: mask, scale, scores.
  Value *masked = softmax.getOperand(0);
  Value *scaledScores = masked;
  Node *maskNode = nullptr;
  Value *maskValue = nullptr;
  bool whereMask = false;
  if (Node *producer = masked->getDefiningNode()) {
    if (producer->isa(kOnnxDomain, "Where") &&
        producer->getNumOperands() == 3) {
      Value *cond = producer->getOperand(0);
      std::optional<float> fillX = f32ScalarConstant(producer->getOperand(1));
      std::optional<float> fillY = f32ScalarConstant(producer->getOperand(2));
      if (cond && cond->getType().getDType() == DType::Bool &&
          (fillX.has_value() != fillY.has_value())) {
        maskNode = producer;
        whereMask = true;
        maskValue = cond;
        fusion.maskTrueKeeps = fillY.has_value();
        fusion.maskedValue = fillX ? *fillX : *fillY;
        scaledScores = producer->getOperand(fillX ? 2 : 1);
      }
    } else if (producer->isa(kOnnxDomain, "Add") &&
               producer->getNumOperands() == 2) {
      for (unsigned i = 0; i != 2 && !maskNode; ++i) {
        Value *candidate = producer->getOperand(i);
        Value *bias = producer->getOperand(1 - i);
        if (!candidate || !bias || !sameKind(candidate, masked) ||
            bias->getType().getDType() != masked->getType().getDType())
          continue;
        if (productOf(candidate) || scalingOf(candidate)) {
          maskNode = producer;
          maskValue = bias;
          scaledScores = candidate;
        }
      }
    }
  }
  if (maskValue && !broadcastsTo(maskValue->getType(), scoreType))
    return none;
  Value *scores = scaledScores;
  float forwardScale = 1;
  if (std::optional<Scaling> scaling = scalingOf(scaledScores)) {
    fusion.nodes.push_back(scaling->node);
    forwardScale = scaling->factor;
    scores = scaling->scaled;
  }
  std::optional<Product> scoreProduct = productOf(scores);
  if (!scoreProduct || scoreProduct->transA)
    return none;
  fusion.q = scoreProduct->a;
  fusion.k = scoreProduct->b;
  fusion.kTransposed = !scoreProduct->transB;
  fusion.scale = forwardScale * scoreProduct->alpha;
  fusion.nodes.push_back(scoreProduct->node);
  if (maskNode)
    fusion.nodes.push_back(maskNode);
  // Forward, after the softmax: dropout and the product with V.
  std::optional<llvm::SmallVector<Node *, 4>> probUsers = usersOf(probs);
  if (!probUsers)
    return left(LeftReason::ExtraUse);
  Node *softmaxGrad = nullptr;
  Value *dropped = probs;
  Value *dropMask = nullptr;
  for (Node *user : *probUsers) {
    bool isDropout = (user->isa(kOnnxDomain, "Dropout") ||
                      user->isa(kMsDomain, "BitmaskDropout")) &&
                     user->getOperand(0) == probs &&
                     user->getNumResults() == 2 && !user->hasAttr("ratio");
    if (isDropout && !fusion.dropout) {
      fusion.dropout = user;
      dropped = user->getResult(0);
      dropMask = user->getResult(1);
      fusion.ratio = user->getNumOperands() > 1 ? user->getOperand(1) : nullptr;
      fusion.trainingMode =
          user->getNumOperands() > 2 ? user->getOperand(2) : nullptr;
    } else if ((user->isa(kMsDomain, "SoftmaxGrad_13") ||
                user->isa(kMsDomain, "SoftmaxGrad")) &&
               user->getNumOperands() == 2 && user->getOperand(1) == probs &&
               !softmaxGrad) {
      softmaxGrad = user;
    }
  }
  if (!dropped)
    return none;
  std::optional<llvm::SmallVector<Node *, 4>> droppedUsers = usersOf(dropped);
  if (!droppedUsers)
    return left(LeftReason::ExtraUse);
  std::optional<Product> outputProduct, dvProduct;
  for (Node *user : *droppedUsers) {
    std::optional<Product> product = matchProduct(user);
    if (!product || product->a != dropped)
      continue;
    if (!product->transA && !product->transB && product->alpha == 1 &&
        !outputProduct && product->node->getPhase() == Phase::Forward)
      outputProduct = product;
    else if (product->transA && !product->transB && product->alpha == 1 &&
             !dvProduct)
      dvProduct = product;
  }
  if (!outputProduct)
    return none;
  fusion.output = outputProduct->node;
  fusion.v = outputProduct->b;
  fusion.nodes.push_back(outputProduct->node);
  if (fusion.dropout)
    fusion.nodes.push_back(fusion.dropout);
  for (Value *intermediate : {scores, scaledScores, masked}) {
    std::optional<llvm::SmallVector<Node *, 4>> users = usersOf(intermediate);
    if (!users || users->size() != 1)
      return left(LeftReason::ExtraUse);
  }
  if (!softmaxGrad && !dvProduct)
    return left(LeftReason::NoBackward);
  if (!softmaxGrad || !dvProduct)
    return left(LeftReason::BackwardUnmatched);
  // The probabilities feed the dropout (or both products) and the softmax
  // gradient; the dropped copy feeds the two products; nothing else.
  size_t expectedProbUsers = fusion.dropout ? 2 : 3;
  if (probUsers->size() != expectedProbUsers ||
      (fusion.dropout && droppedUsers->size() != 2))
    return left(LeftReason::ExtraUse);
  auto softmaxGradAxis = ops::getSoftmaxAxis(*softmaxGrad, scoreType.getRank());
  if (!softmaxGradAxis) {
    llvm::consumeError(softmaxGradAxis.takeError());
    return left(LeftReason::BackwardUnmatched);
  }
  if (*softmaxGradAxis != scoreType.getRank() - 1)
    return left(LeftReason::BackwardUnmatched);
  fusion.nodes.push_back(softmaxGrad);
  fusion.nodes.push_back(dvProduct->node);
  fusion.dO = dvProduct->b;
  fusion.dV = dvProduct->node->getResult(0);

  // Backward: dD = dO V^T, through the dropout's gradient, into the
  // softmax gradient.
  Value *dProbs = softmaxGrad->getOperand(0);
  Value *dDropped = dProbs;
  if (fusion.dropout) {
    if (!dropMask)
      return left(LeftReason::BackwardUnmatched);
    std::optional<llvm::SmallVector<Node *, 4>> maskUsers = usersOf(dropMask);
    if (!maskUsers || maskUsers->size() != 1)
      return left(LeftReason::ExtraUse);
    Node *dropoutGrad = dProbs->getDefiningNode();
    bool packed = fusion.dropout->isa(kMsDomain, "BitmaskDropout");
    if (!dropoutGrad || dropoutGrad != maskUsers->front() ||
        !dropoutGrad->isa(kMsDomain,
                          packed ? "BitmaskDropoutGrad" : "DropoutGrad") ||
        dropoutGrad->getNumOperands() < 2 ||
        dropoutGrad->getOperand(1) != dropMask)
      return left(LeftReason::BackwardUnmatched);
    // The gradient must scale by the forward's ratio and mode.
    Value *gradRatio = dropoutGrad->getNumOperands() > 2
                           ? dropoutGrad->getOperand(2)
                           : nullptr;
    Value *gradTraining = dropoutGrad->getNumOperands() > 3
                              ? dropoutGrad->getOperand(3)
                              : nullptr;
    if (gradRatio != fusion.ratio || gradTraining != fusion.trainingMode)
      return left(LeftReason::BackwardUnmatched);
    fusion.nodes.push_back(dropoutGrad);
    dDropped = dropoutGrad->getOperand(0);
  }
  std::optional<Product> ddProduct = productOf(dDropped);
  if (!ddProduct || ddProduct->a != fusion.dO || ddProduct->b != fusion.v ||
      ddProduct->transA || !ddProduct->transB || ddProduct->alpha != 1)
    return left(LeftReason::BackwardUnmatched);
  fusion.nodes.push_back(ddProduct->node);
  for (Value *gradient : {dDropped, dProbs}) {
    std::optional<llvm::SmallVector<Node *, 4>> users = usersOf(gradient);
    if (!users || users->size() != 1)
      return left(LeftReason::ExtraUse);
  }

  // Backward: the mask's and the scale's gradients, then dS's products.
  Value *dScores = softmaxGrad->getResult(0);
  llvm::SmallVector<Node *, 4> identities;
  float gradientScale = 1;
  Node *next = soleUserThroughIdentities(dScores, identities);
  if (whereMask) {
    // Where(cond, 0, dW) or Where(cond, dW, 0), zero on the masked side.
    unsigned zeroSide = fusion.maskTrueKeeps ? 2 : 1;
    if (!next || !next->isa(kOnnxDomain, "Where") ||
        next->getNumOperands() != 3 || next->getOperand(0) != maskValue ||
        next->getOperand(3 - zeroSide) != dScores ||
        f32ScalarConstant(next->getOperand(zeroSide)) != 0.0f)
      return left(next ? LeftReason::BackwardUnmatched : LeftReason::ExtraUse);
    fusion.nodes.push_back(next);
    dScores = next->getResult(0);
    next = soleUserThroughIdentities(dScores, identities);
  }
  if (next &&
      (next->isa(kOnnxDomain, "Mul") || next->isa(kOnnxDomain, "Div"))) {
    std::optional<Scaling> scaling = scalingOf(next->getResult(0));
    if (scaling && scaling->scaled == dScores) {
      gradientScale = scaling->factor;
      fusion.nodes.push_back(next);
      dScores = next->getResult(0);
      next = soleUserThroughIdentities(dScores, identities);
    }
  }
  fusion.nodes.append(identities.begin(), identities.end());
  std::optional<llvm::SmallVector<Node *, 4>> dScoreUsers = usersOf(dScores);
  if (!dScoreUsers || dScoreUsers->size() != 2)
    return left(dScoreUsers ? LeftReason::ExtraUse
                            : LeftReason::BackwardUnmatched);
  std::optional<Product> dqProduct, dkProduct;
  for (Node *user : *dScoreUsers) {
    std::optional<Product> product = matchProduct(user);
    if (!product)
      return left(LeftReason::ExtraUse);
    // dQ = dS K (K plain) or dS (K^T)^T (K transposed).
    if (product->a == dScores && !product->transA && product->b == fusion.k &&
        product->transB == fusion.kTransposed)
      dqProduct = product;
    // dK = dS^T Q (K plain) or dK^T = Q^T dS (K transposed).
    else if (!fusion.kTransposed && product->a == dScores &&
             product->b == fusion.q && product->transA && !product->transB)
      dkProduct = product;
    else if (fusion.kTransposed && product->a == fusion.q &&
             product->b == dScores && product->transA && !product->transB)
      dkProduct = product;
  }
  if (!dqProduct || !dkProduct)
    return left(LeftReason::BackwardUnmatched);
  if (!sameScale(dqProduct->alpha * gradientScale, fusion.scale) ||
      !sameScale(dkProduct->alpha * gradientScale, fusion.scale))
    return left(LeftReason::ScaleMismatch);
  fusion.nodes.push_back(dqProduct->node);
  fusion.nodes.push_back(dkProduct->node);
  fusion.dQ = dqProduct->node->getResult(0);
  fusion.dK = dkProduct->node->getResult(0);

  // The mask operand: a causal triangle becomes the attribute.
  fusion.mask = maskValue;
  std::optional<std::pair<int64_t, int64_t>> extents = scoreExtents(scoreType);
  if (whereMask && options.causal && extents &&
      fusion.maskedValue == -INFINITY &&
      isCausalConstant(maskValue, !fusion.maskTrueKeeps, extents->first,
                       extents->second)) {
    fusion.causal = true;
    fusion.mask = nullptr;
  }
  fusion.gradientPosition =
      positions.lookup(dvProduct->node) < positions.lookup(ddProduct->node)
          ? dvProduct->node
          : ddProduct->node;
  fusion.scoreBytes = staticBytes(probs) + staticBytes(scores);
  if (fusion.dropout)
    fusion.scoreBytes += staticBytes(dropped) + staticBytes(dropMask);
  MatchResult result;
  result.fusion = std::move(fusion);
  return result;
}

/// Operands up to the last present one (absent optional ones are null).
llvm::SmallVector<Value *, 9> trimOperands(llvm::SmallVector<Value *, 9> ops) {
  while (!ops.empty() && !ops.back())
    ops.pop_back();
  return ops;
}

/// Moves \p from's name to \p to.
void takeName(Value *from, Value *to) {
  std::string name = from->getName().str();
  from->setName("");
  to->setName(name);
}

/// Rewrites one planned fusion.
void rewriteFusion(PatternRewriter &rewriter, const AttentionFusion &fusion) {
  llvm::SmallVector<NamedAttribute, 6> attrs;
  attrs.push_back({"scale", Attribute::getFloat(fusion.scale)});
  if (fusion.causal)
    attrs.push_back({"causal", Attribute::getInt(1)});
  if (fusion.kTransposed)
    attrs.push_back({"k_transposed", Attribute::getInt(1)});
  if (fusion.mask && fusion.mask->getType().getDType() == DType::Bool) {
    attrs.push_back(
        {"mask_true_keeps", Attribute::getInt(fusion.maskTrueKeeps)});
    attrs.push_back({"masked_value", Attribute::getFloat(fusion.maskedValue)});
  }
  Builder &builder = rewriter.getBuilder();
  Phase savedPhase = builder.getPhase();
  std::string name = fusion.output->getName().str() + "/FusedAttention";
  std::optional<uint64_t> stream =
      fusion.dropout ? fusion.dropout->getStreamId()
                     : std::optional<uint64_t>(computeStreamId(name, 0));

  // Forward: O and the log-sum-exp, where the output product was.
  Value *output = fusion.output->getResult(0);
  const TensorType &outputType = output->getType();
  llvm::SmallVector<Dim, 4> rowDims(outputType.getDims().begin(),
                                    outputType.getDims().end() - 1);
  builder.setInsertionPoint(fusion.output);
  builder.setPhase(fusion.output->getPhase());
  Node *forward = rewriter.createNode(
      OpName{kGmoptDomain.str(), kFusedAttentionOp.str()},
      trimOperands({fusion.q, fusion.k, fusion.v, fusion.mask, fusion.ratio,
                    fusion.trainingMode}),
      {outputType, TensorType(DType::F32, rowDims)}, attrs, name);
  forward->setStreamId(stream);
  forward->getResult(1)->setName(output->getName().str() + "_lse");

  // Backward: dQ, dK, dV before the first product that read dO.
  builder.setInsertionPoint(fusion.gradientPosition);
  builder.setPhase(fusion.gradientPosition->getPhase());
  Node *backward = rewriter.createNode(
      OpName{kGmoptDomain.str(), kFusedAttentionGradOp.str()},
      trimOperands({fusion.dO, fusion.q, fusion.k, fusion.v,
                    forward->getResult(0), forward->getResult(1), fusion.mask,
                    fusion.ratio, fusion.trainingMode}),
      {fusion.dQ->getType(), fusion.dK->getType(), fusion.dV->getType()}, attrs,
      name + "Grad");
  backward->setStreamId(stream);
  builder.setPhase(savedPhase);

  rewriter.replaceAllUsesWith(output, forward->getResult(0));
  takeName(output, forward->getResult(0));
  Value *gradients[] = {fusion.dQ, fusion.dK, fusion.dV};
  for (unsigned i = 0; i != 3; ++i) {
    rewriter.replaceAllUsesWith(gradients[i], backward->getResult(i));
    takeName(gradients[i], backward->getResult(i));
  }
}

} // namespace

FuseAttentionPass::FuseAttentionPass() : FuseAttentionPass(Options()) {}

FuseAttentionPass::FuseAttentionPass(Options initial) : options(initial) {
  declareOption("causal", options.causal,
                "turn a causal-triangle mask constant into the causal "
                "attribute");
  declareStatistic("fused", "attention patterns fused, forward and backward");
  declareStatistic("causal", "fused patterns whose mask became causal");
  declareStatistic("score-bytes-removed",
                   "bytes of the [.., sq, sk] scores, probabilities, dropped "
                   "copies and masks no longer stored");
  for (LeftReason reason :
       {LeftReason::ExtraUse, LeftReason::NoBackward,
        LeftReason::BackwardUnmatched, LeftReason::ScaleMismatch})
    declareStatistic(statisticOf(reason),
                     reason == LeftReason::ExtraUse
                         ? "patterns left: an intermediate has another use"
                     : reason == LeftReason::NoBackward
                         ? "patterns left: no gradient subgraph"
                     : reason == LeftReason::BackwardUnmatched
                         ? "patterns left: gradient subgraph not recognised"
                         : "patterns left: forward and backward scales "
                           "differ");
}

llvm::Expected<bool> FuseAttentionPass::run(Module &module,
                                            PassContext &context) {
  Graph &graph = module.getGraph();
  PatternRewriter rewriter(module);
  llvm::DenseMap<const Node *, size_t> positions;
  for (const Node &node : graph.getNodes())
    positions[&node] = positions.size();

  // Analysis and plan: every softmax, matched without touching the IR.
  AttentionMatcher matcher(rewriter, options, positions);
  std::vector<AttentionFusion> plan;
  llvm::DenseMap<unsigned, uint64_t> leftCounts;
  for (Node &node : graph.getNodes()) {
    MatchResult result = matcher.match(node);
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
  if (!plan.empty() && !module.opsetImports.count(kGmoptDomain.str()))
    module.opsetImports[kGmoptDomain.str()] = 1;
  uint64_t causal = 0, scoreBytes = 0;
  for (const AttentionFusion &fusion : plan) {
    rewriteFusion(rewriter, fusion);
    causal += fusion.causal;
    scoreBytes += fusion.scoreBytes;
    llvm::SmallVector<Node *, 16> nodes = fusion.nodes;
    llvm::sort(nodes, [&](const Node *a, const Node *b) {
      return positions.lookup(a) > positions.lookup(b);
    });
    for (Node *node : nodes) {
      assert(node->resultsUnused() && "a fused node's result is still used");
      rewriter.eraseNode(node);
    }
  }
  rewriter.finalizeErasures();

  addStatistic(context, "fused", plan.size());
  addStatistic(context, "causal", causal);
  addStatistic(context, "score-bytes-removed", scoreBytes);
  for (LeftReason reason :
       {LeftReason::ExtraUse, LeftReason::NoBackward,
        LeftReason::BackwardUnmatched, LeftReason::ScaleMismatch})
    addStatistic(context, statisticOf(reason),
                 leftCounts.lookup(static_cast<unsigned>(reason)));
  return !plan.empty();
}
