//===- Amp.cpp - Mixed precision as a graph rewrite -----------------------===//
//
// Analysis (AmpPolicy), rewrite (casts around the low nodes, in one walk
// in graph order), cleanup (Cast folding, dead casts), loss scaling
// (LossScaling.cpp), statistics.
//
//===----------------------------------------------------------------------===//

#include "passes/amp/Amp.h"
#include "passes/PatternRewriter.h"
#include "passes/amp/AmpPolicy.h"
#include "passes/amp/CastFolding.h"
#include "passes/amp/LossScaling.h"
#include "passes/recompute/SavedActivations.h"
#include "passes/transforms/DeadCode.h"

#include "ir/Half.h"
#include "ir/IR.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

using namespace gmopt;

AmpPass::AmpPass() : AmpPass(Options()) {}

AmpPass::AmpPass(Options opts) : options(std::move(opts)) {
  declareOption("dtype", options.dtype, "the low-precision type: fp16 or bf16");
  declareOption("loss-scale", options.lossScale,
                "dynamic, static:V or none (default: dynamic for fp16, none "
                "for bf16)");
  declareOption("init-scale", options.initScale,
                "dynamic loss scaling: the initial scale");
  declareOption("growth-interval", options.growthInterval,
                "dynamic loss scaling: finite steps before the scale grows", 1);
  declareOption("growth-factor", options.growthFactor,
                "dynamic loss scaling: factor of each growth");
  declareOption("backoff-factor", options.backoffFactor,
                "dynamic loss scaling: factor applied on overflow");
  declareOption("max-scale", options.maxScale,
                "dynamic loss scaling: the largest scale");
  declareOption("min-scale", options.minScale,
                "dynamic loss scaling: the smallest scale");
  declareOption("strict-fp32", options.strictFp32,
                "run softmax, layer/RMS norm and their gradients on fp32 "
                "tensors (torch.autocast) instead of fp32 arithmetic on "
                "16-bit storage");
  declareOption("print-plan", options.printPlan,
                "print each op's low-precision and fp32 node counts to "
                "stderr");
  declareStatistic("low-precision-nodes",
                   "Nodes computing in the low-precision type");
  declareStatistic(
      "fp32-fallbacks",
      "Nodes the policy chose whose op does not take the low type");
  declareStatistic("casts-inserted",
                   "Cast nodes added (after folding and dead-cast removal)");
  declareStatistic("constants-narrowed", "Constants narrowed at compile time");
  declareStatistic("nodes-erased", "Dead nodes (unused casts) erased");
  declareStatistic("low-precision-bytes",
                   "Bytes of node results in the low-precision type");
  declareStatistic("fp32-bytes", "Bytes of fp32 node results");
  declareStatistic("saved-bytes-before",
                   "Bytes of forward values the backward pass reads, before");
  declareStatistic("saved-bytes-after",
                   "Bytes of forward values the backward pass reads, after");
  declareStatistic("gradients-unscaled", "Gradients divided by the loss scale");
  declareStatistic("scaler-nodes", "Nodes of the loss scaler");
}

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "amp: " + message);
}

/// The parsed options.
struct AmpConfig {
  DType low = DType::F16;
  LossScalingOptions scaling;
  LossScaleMode mode = LossScaleMode::None;
};

llvm::Expected<AmpConfig> parseConfig(const AmpPass::Options &options) {
  AmpConfig config;
  if (options.dtype == "fp16" || options.dtype == "f16")
    config.low = DType::F16;
  else if (options.dtype == "bf16")
    config.low = DType::BF16;
  else
    return makeError("dtype '" + options.dtype + "' is not one of fp16, bf16");
  llvm::StringRef scale = options.lossScale;
  if (scale.empty())
    config.mode =
        config.low == DType::F16 ? LossScaleMode::Dynamic : LossScaleMode::None;
  else if (scale == "dynamic")
    config.mode = LossScaleMode::Dynamic;
  else if (scale == "none")
    config.mode = LossScaleMode::None;
  else if (scale.consume_front("static:")) {
    double value;
    if (scale.getAsDouble(value) || !(value > 0) || !std::isfinite(value))
      return makeError("loss-scale 'static:" + scale +
                       "' needs a positive finite scale");
    config.mode = LossScaleMode::Static;
    config.scaling.scale = value;
  } else {
    return makeError("loss-scale '" + options.lossScale +
                     "' is not one of dynamic, static:V, none");
  }
  config.scaling.mode = config.mode;
  if (config.mode == LossScaleMode::Dynamic) {
    config.scaling.scale = options.initScale;
    config.scaling.growthInterval = options.growthInterval;
    config.scaling.growthFactor = options.growthFactor;
    config.scaling.backoffFactor = options.backoffFactor;
    config.scaling.maxScale = options.maxScale;
    config.scaling.minScale = options.minScale;
    auto positive = [](double v) { return v > 0 && std::isfinite(v); };
    if (!positive(options.initScale) || !positive(options.maxScale) ||
        !positive(options.minScale))
      return makeError("init-scale, max-scale and min-scale must be positive "
                       "and finite");
    if (!(options.minScale <= options.initScale &&
          options.initScale <= options.maxScale))
      return makeError(llvm::formatv(
          "init-scale {0} is not within [min-scale {1}, max-scale {2}]",
          options.initScale, options.minScale, options.maxScale));
    if (!(options.growthFactor >= 1) || !std::isfinite(options.growthFactor))
      return makeError("growth-factor must be at least 1");
    if (!(options.backoffFactor > 0 && options.backoffFactor < 1))
      return makeError("backoff-factor must be in (0, 1)");
  }
  if (config.mode != LossScaleMode::None &&
      config.scaling.scale > std::numeric_limits<float>::max())
    return makeError("the loss scale does not fit in fp32");
  return config;
}

/// `_fp16` or `_bf16`.
llvm::StringRef lowSuffix(DType low) {
  return low == DType::F16 ? "_fp16" : "_bf16";
}

/// \p data (f32) narrowed to \p low, finite values saturating at the
/// largest finite one (a mask's -3.4e38 becomes -65504, not -inf).
TensorData narrowConstant(const TensorData &data, DType low) {
  uint64_t n = data.getNumElements();
  std::vector<uint16_t> bits(n);
  llvm::ArrayRef<uint8_t> bytes = data.getBytes();
  const float limit = low == DType::F16 ? 65504.0f : 3.3895314e38f;
  for (uint64_t i = 0; i != n; ++i) {
    float value;
    std::memcpy(&value, bytes.data() + i * sizeof(float), sizeof(float));
    if (std::isfinite(value))
      value = std::fmax(-limit, std::fmin(limit, value));
    bits[i] = low == DType::F16 ? floatToHalf(value) : floatToBFloat16(value);
  }
  std::vector<int64_t> shape;
  for (const Dim &dim : data.getType().getDims())
    shape.push_back(dim.getExtent());
  return TensorData::fromValues<uint16_t>(low, shape, bits);
}

/// Largest constant narrowed at compile time; larger ones get a Cast.
constexpr uint64_t kMaxNarrowedConstantElements = 1 << 16;

/// The rewrite of one module under one policy.
class AmpRewriter {
public:
  AmpRewriter(Module &module, const AmpPolicy &policy)
      : module(module), graph(module.getGraph()), policy(policy),
        low(policy.getLowType()), builder(graph) {}

  /// Casts around every low node. Returns the number of low nodes.
  uint64_t run() {
    const OpRegistry &registry = OpRegistry::instance();
    std::vector<Node *> order;
    order.reserve(graph.getNumNodes());
    for (Node &node : graph)
      order.push_back(&node);
    for (Node *node : order) {
      const OpSchema *schema = registry.lookup(*node);
      if (!policy.isLow(node)) {
        if (schema && schema->hasTrait(TraitShapeOnly))
          readLowVersions(*node);
        continue;
      }
      lowerNode(*node, schema);
    }
    return lowered;
  }

  uint64_t getCastsCreated() const { return castsCreated; }
  uint64_t getConstantsNarrowed() const { return constantsNarrowed; }
  uint64_t getFallbacks() const { return fallbacks; }

private:
  /// A node that reads only shapes reads the low version: no cast back.
  void readLowVersions(Node &node) {
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i)
      if (Value *operand = node.getOperand(i))
        if (Value *lowValue = lowVersion.lookup(operand))
          node.setOperand(i, lowValue);
  }

  void lowerNode(Node &node, const OpSchema *schema) {
    llvm::SmallVector<Value *, 4> before = node.getOperands();
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
      Value *operand = node.getOperand(i);
      if (AmpPolicy::followsPrecision(schema, i, operand) &&
          operand->getType().getDType() == DType::F32)
        node.setOperand(i, getLow(operand, node));
    }
    auto types = inferNodeTypes(node);
    if (!types) {
      // The op does not take the low type here: it stays fp32.
      llvm::consumeError(types.takeError());
      node.setOperands(before);
      ++fallbacks;
      return;
    }
    ++lowered;
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i) {
      Value *result = node.getResult(i);
      if (!result || i >= types->size())
        continue;
      const TensorType &inferred = (*types)[i];
      if (inferred.getDType() == result->getType().getDType())
        continue;
      assert(isLowPrecisionFloat(inferred.getDType()) &&
             result->getType().getDType() == DType::F32 &&
             "a low node's results change from fp32 to the low type only");
      // Only the element type changes: keep what was known of the shape
      // (inference over the new operands may know less).
      TensorType lowType = result->getType();
      lowType.setDType(inferred.getDType());
      retypeResult(node, *result, lowType);
    }
  }

  /// \p result becomes low; every reader reads it cast back to fp32 (the
  /// cast takes its name and its roles in the signature).
  void retypeResult(Node &node, Value &result, const TensorType &lowType) {
    llvm::SmallVector<OpOperand *, 8> uses;
    for (OpOperand &use : result.getUses())
      uses.push_back(&use);
    TensorType original = result.getType();
    result.setType(lowType);
    builder.setInsertionPointAfter(&node);
    builder.setPhase(node.getPhase());
    Node *up = createCast(&result, DType::F32, original);
    Value *widened = up->getResult(0);
    for (OpOperand *use : uses)
      use->set(widened);
    module.getSignature().replaceValue(&result, widened);
    widened->setName(result.getName());
    result.setName((result.getName() + lowSuffix(low)).str());
    lowVersion[widened] = &result;
  }

  Node *createCast(Value *input, DType to, TensorType type) {
    type.setDType(to);
    ++castsCreated;
    return builder.create(
        OpName{std::string(kOnnxDomain), "Cast"}, {input}, {type},
        {{"to", Attribute::getInt(static_cast<int64_t>(to))}});
  }

  /// The low version of fp32 \p value for \p user: a low node's result, a
  /// narrowed constant, or one Cast shared by every low user.
  Value *getLow(Value *value, Node &user) {
    if (Value *existing = lowVersion.lookup(value))
      return existing;
    Value *lowValue = nullptr;
    if (value->isInitializer() && value->hasData() &&
        !module.getSignature().lookup(value) &&
        value->getType().hasStaticShape() &&
        value->getType().getNumElements() <= kMaxNarrowedConstantElements &&
        value->getData().hasFoldableBytes()) {
      lowValue =
          builder.createConstant(narrowConstant(value->getData(), low),
                                 (value->getName() + lowSuffix(low)).str());
      ++constantsNarrowed;
    } else {
      // A computed value is cast once, right after its definition; an
      // input (a parameter: once per step) right before its first low
      // reader.
      if (Node *def = value->getDefiningNode()) {
        builder.setInsertionPointAfter(def);
        builder.setPhase(def->getPhase());
      } else {
        builder.setInsertionPoint(&user);
        builder.setPhase(user.getPhase());
      }
      Node *cast = createCast(value, low, value->getType());
      lowValue = cast->getResult(0);
      lowValue->setName((value->getName() + lowSuffix(low)).str());
    }
    lowVersion[value] = lowValue;
    return lowValue;
  }

  Module &module;
  Graph &graph;
  const AmpPolicy &policy;
  DType low;
  Builder builder;
  /// fp32 value -> the value holding it in the low type.
  llvm::DenseMap<Value *, Value *> lowVersion;
  uint64_t lowered = 0, castsCreated = 0, constantsNarrowed = 0, fallbacks = 0;
};

/// Number of Cast nodes in \p graph.
uint64_t countCasts(const Graph &graph) {
  uint64_t casts = 0;
  for (const Node &node : graph.getNodes())
    casts += node.isa(kOnnxDomain, "Cast");
  return casts;
}

/// Bytes of the low-precision values and of the fp32 float values.
std::pair<uint64_t, uint64_t> floatBytes(const Graph &graph) {
  uint64_t lowBytes = 0, fp32Bytes = 0;
  for (const Node &node : graph.getNodes())
    for (const Value *result : node.getResults()) {
      if (!result || !result->getType().hasStaticShape())
        continue;
      DType type = result->getType().getDType();
      uint64_t bytes =
          dtypeStorageBytes(type, result->getType().getNumElements());
      if (isLowPrecisionFloat(type))
        lowBytes += bytes;
      else if (type == DType::F32)
        fp32Bytes += bytes;
    }
  return {lowBytes, fp32Bytes};
}

} // namespace

llvm::Expected<bool> AmpPass::run(Module &module, PassContext &context) {
  auto config = parseConfig(options);
  if (!config)
    return config.takeError();
  const TrainingSignature &signature = module.getSignature();
  if (signature.getStepSlot(StepSlot::LossScale))
    return makeError("the module is already mixed precision: its signature "
                     "has a loss_scale");
  if (config->mode != LossScaleMode::None && !signature.getLossGradSeed())
    return makeError("loss scaling needs the loss-gradient seed, and the "
                     "training signature has none (use loss-scale=none)");

  // Saved activations before and after (when shapes are static).
  std::optional<uint64_t> savedBefore = savedActivationBytes(module);

  AmpPolicy policy =
      AmpPolicy::compute(module, config->low, options.strictFp32);
  if (options.printPlan) {
    llvm::errs() << "amp plan ("
                 << (config->low == DType::F16 ? "fp16" : "bf16")
                 << "): op, low-precision nodes, fp32 nodes\n";
    std::vector<std::string> ops;
    for (const auto &entry : policy.getCountsByOp())
      ops.push_back(entry.getKey().str());
    llvm::sort(ops);
    for (const std::string &op : ops) {
      const auto &counts = policy.getCountsByOp().find(op)->getValue();
      llvm::errs() << llvm::formatv("  {0,-48} {1,6} {2,6}\n", op, counts.first,
                                    counts.second);
    }
  }

  uint64_t castsBefore = countCasts(module.getGraph());
  AmpRewriter rewriter(module, policy);
  uint64_t lowered = rewriter.run();

  // Cleanup: redundant cast pairs, then casts nobody reads.
  FoldCastPair foldPair;
  RemoveIdentityCast removeIdentity;
  GreedyRewriteConfig cleanupConfig;
  auto folded = applyPatternsGreedily(module, {&foldPair, &removeIdentity},
                                      cleanupConfig);
  if (!folded)
    return folded.takeError();
  uint64_t dead = eraseDeadNodes(module);

  LossScalingResult scaling;
  if (config->mode != LossScaleMode::None && lowered != 0) {
    auto inserted = insertLossScaling(module, config->scaling);
    if (!inserted)
      return inserted.takeError();
    scaling = *inserted;
  }

  uint64_t castsAfter = countCasts(module.getGraph());
  auto [lowBytes, fp32Bytes] = floatBytes(module.getGraph());
  addStatistic(context, "low-precision-nodes", lowered);
  addStatistic(context, "fp32-fallbacks", rewriter.getFallbacks());
  addStatistic(context, "casts-inserted",
               castsAfter > castsBefore ? castsAfter - castsBefore : 0);
  addStatistic(context, "constants-narrowed", rewriter.getConstantsNarrowed());
  addStatistic(context, "nodes-erased", dead);
  addStatistic(context, "low-precision-bytes", lowBytes);
  addStatistic(context, "fp32-bytes", fp32Bytes);
  if (savedBefore)
    if (std::optional<uint64_t> savedAfter = savedActivationBytes(module)) {
      addStatistic(context, "saved-bytes-before", *savedBefore);
      addStatistic(context, "saved-bytes-after", *savedAfter);
    }
  addStatistic(context, "gradients-unscaled", scaling.gradients);
  addStatistic(context, "scaler-nodes", scaling.nodes);
  return lowered != 0 || folded->changed || dead != 0;
}
