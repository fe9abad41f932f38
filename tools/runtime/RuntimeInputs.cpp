//===- RuntimeInputs.cpp - Binding a step's inputs ------------------------===//
//
// How gmopt-run gives every graph input a tensor: from test data, a
// checkpoint or the optimizer's state where those supply it, otherwise
// synthetic data from a deterministic per-name random stream (parameters
// scaled like an initializer, gains at one, integer inputs within the
// index range their uses allow).
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/Runtime.h"

#include "tools/driver/ToolSupport.h"
#include "tools/runtime/RuntimeSupport.h"

#include "backend/cuda/CudaDevice.h"
#include "ir/Collectives.h"
#include "ir/OpRegistry.h"
#include "ir/Optimizer.h"
#include "ir/OptimizerOps.h"
#include "ir/SizeLimits.h"
#include "ir/ZeroSharding.h"
#include "ir/ops/Axes.h"
#include "ir/ops/CrossEntropySpec.h"
#include "ir/ops/ShapeValue.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/OnnxTensor.h"
#include "passes/PassManager.h"
#include "tools/driver/PassManagerCLOptions.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>

using namespace gmopt;
using namespace gmopt::runtime;

namespace {

/// 64-bit FNV-1a: a hash that is the same in every process and build.
uint64_t stableHash(llvm::StringRef text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

constexpr double kPi = 3.14159265358979323846;

/// A small deterministic random stream (splitmix64), independent of the
/// standard library's distributions so that values are the same everywhere.
class RandomStream {
public:
  explicit RandomStream(uint64_t seed) : state(seed) {}

  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  /// Standard normal (Box-Muller).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2 * kPi * u2);
  }
  /// Uniform integer in [lo, hi).
  int64_t integer(int64_t lo, int64_t hi) {
    uint64_t span = static_cast<uint64_t>(hi - lo);
    return lo + static_cast<int64_t>(next() % span);
  }

private:
  uint64_t state;
};

/// Writes \p values (converted) into a new tensor of \p type. The storage
/// is allocated without throwing (allocateTensorData), so a size the
/// system cannot provide is an error, as for the arena.
template <typename Fn>
llvm::Expected<TensorData> fillTensor(const TensorType &type, Fn element) {
  uint64_t n = type.getNumElements();
  auto fillAs = [&](auto typed) {
    using T = decltype(typed);
    return allocateTensorData(type, [&](llvm::MutableArrayRef<uint8_t> bytes) {
      assert(bytes.size() == n * sizeof(T) && "storage of the wrong size");
      for (uint64_t i = 0; i != n; ++i) {
        T value = static_cast<T>(element(i));
        std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
      }
    });
  };
  switch (type.getDType()) {
  case DType::F32:
    return fillAs(float());
  case DType::F64:
    return fillAs(double());
  case DType::I64:
    return fillAs(int64_t());
  case DType::I32:
    return fillAs(int32_t());
  case DType::Bool:
  case DType::U8:
    return fillAs(uint8_t());
  default:
    return makeError("cannot make synthetic values of element type " +
                     dtypeName(type.getDType()));
  }
}

bool isViewNode(const Node &node) {
  const OpSchema *schema = OpRegistry::instance().lookup(node);
  return schema && schema->hasTrait(TraitView);
}

/// Static extent of dimension \p axis of \p value, or -1.
int64_t staticExtent(const Value *value, int64_t axis) {
  if (!value)
    return -1;
  const TensorType &type = value->getType();
  if (!type.hasRank() || axis < 0 || axis >= int64_t(type.getRank()) ||
      !type.getDim(axis).isStatic())
    return -1;
  return type.getDim(axis).getExtent();
}

/// The constraint one use (operand \p index of \p node) puts on an integer.
std::optional<IndexRange> rangeOfUse(const Node &node, unsigned index) {
  // The ignored label: the attribute of the standard ops, the constant
  // operand \p ignoreOperand of ONNX Runtime's Internal variants.
  auto classLabels =
      [&](const Value *scores,
          std::optional<unsigned> ignoreOperand) -> std::optional<IndexRange> {
    int64_t classes = staticExtent(scores, 1);
    if (classes <= 0)
      return std::nullopt;
    IndexRange range;
    range.lowest = 0;
    range.end = classes;
    range.role = "labels";
    if (const Attribute *ignore = node.getAttr("ignore_index"))
      if (ignore->getKind() == Attribute::Kind::Int)
        range.ignoreIndex = ignore->getInt();
    if (ignoreOperand && *ignoreOperand < node.getNumOperands())
      if (const Value *ignore = node.getOperand(*ignoreOperand))
        if (std::optional<std::vector<int64_t>> values =
                ops::getIntValues(*ignore);
            values && values->size() == 1)
          range.ignoreIndex = values->front();
    return range;
  };
  llvm::StringRef op = node.getOpType();
  bool standard = node.getDomain() == kOnnxDomain;
  bool microsoft = node.getDomain() == kMsDomain;
  if (index == 1 && standard &&
      (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss"))
    return classLabels(node.getOperand(0), std::nullopt);
  if (index == 1 && microsoft &&
      (op == "SoftmaxCrossEntropyLossInternal" ||
       op == "NegativeLogLikelihoodLossInternal" ||
       op == "NegativeLogLikelihoodLossInternal2"))
    return classLabels(node.getOperand(0), 3u);
  if (index == 2 && microsoft && op == "SoftmaxCrossEntropyLossGrad")
    return classLabels(node.getOperand(1), std::nullopt);
  if (index == 2 && microsoft && op == "SoftmaxCrossEntropyLossInternalGrad")
    return classLabels(node.getOperand(1), 4u);
  // gmopt's fused linear cross entropy: the classes are W's vocabulary
  // extent (axis 0 of a [V, D] weight, 1 of a [D, V] one).
  if (node.getDomain() == kGmoptDomain &&
      ((index == 2 && op == kFusedLinearCrossEntropyOp) ||
       (index == 3 && op == kFusedLinearCrossEntropyGradOp))) {
    int64_t classes = staticExtent(node.getOperand(index - 1),
                                   node.getIntAttr("trans_w", 1) ? 0 : 1);
    if (classes <= 0)
      return std::nullopt;
    IndexRange range;
    range.lowest = 0;
    range.end = classes;
    range.role = "labels";
    if (const Attribute *ignore = node.getAttr("ignore_index"))
      if (ignore->getKind() == Attribute::Kind::Int)
        range.ignoreIndex = ignore->getInt();
    return range;
  }
  if (index == 1 && standard && (op == "Gather" || op == "GatherElements")) {
    const Value *data = node.getOperand(0);
    if (!data || !data->getType().hasRank())
      return std::nullopt;
    int64_t rank = data->getType().getRank();
    std::optional<unsigned> axis =
        ops::normalizeAxis(node.getIntAttr("axis", 0), rank);
    if (!axis)
      return std::nullopt;
    int64_t extent = staticExtent(data, *axis);
    if (extent <= 0)
      return std::nullopt;
    IndexRange range;
    range.lowest = -extent;
    range.end = extent;
    range.syntheticLowest = 0;
    range.role = "index";
    return range;
  }
  return std::nullopt;
}

void collectRanges(const Value *value, std::optional<IndexRange> &result,
                   unsigned depth) {
  if (depth > 16)
    return;
  for (const OpOperand &use : value->getUses()) {
    const Node *user = use.getOwner();
    if (!user)
      continue;
    // Views, casts and splits keep the values: follow them to the real
    // consumers (fuse-cross-entropy's forward-gradient mode splits the
    // labels into token chunks, one loss each).
    if (use.getIndex() == 0 && user->getNumResults() && user->getResult(0) &&
        (isViewNode(*user) || user->isa(kOnnxDomain, "Cast") ||
         user->isa(kOnnxDomain, "Split"))) {
      for (unsigned i = 0, e = user->getNumResults(); i != e; ++i)
        if (const Value *part = user->getResult(i))
          collectRanges(part, result, depth + 1);
      continue;
    }
    std::optional<IndexRange> range = rangeOfUse(*user, use.getIndex());
    if (!range)
      continue;
    if (!result) {
      result = range;
      continue;
    }
    result->lowest = std::max(result->lowest, range->lowest);
    result->end = std::min(result->end, range->end);
    result->syntheticLowest = std::max(
        {result->syntheticLowest, range->syntheticLowest, result->lowest});
    if (!result->ignoreIndex)
      result->ignoreIndex = range->ignoreIndex;
    if (range->role == "labels")
      result->role = "labels";
  }
}

/// Collects into \p constants the constant each use of \p value (through
/// views and casts) compares it with, when every use is an Equal against a
/// constant scalar; false as soon as one use is anything else.
bool collectComparedConstants(const Value *value,
                              llvm::SmallVectorImpl<int64_t> &constants,
                              unsigned depth) {
  if (depth > 16)
    return false;
  for (const OpOperand &use : value->getUses()) {
    const Node *user = use.getOwner();
    if (!user)
      return false;
    if (use.getIndex() == 0 && user->getNumResults() && user->getResult(0) &&
        (isViewNode(*user) || user->isa(kOnnxDomain, "Cast"))) {
      if (!collectComparedConstants(user->getResult(0), constants, depth + 1))
        return false;
      continue;
    }
    if (!user->isa(kOnnxDomain, "Equal") || user->getNumOperands() != 2)
      return false;
    const Value *other = user->getOperand(1 - use.getIndex());
    std::optional<std::vector<int64_t>> values =
        other ? ops::getIntValues(*other) : std::nullopt;
    if (!values || values->size() != 1)
      return false;
    constants.push_back(values->front());
  }
  return !constants.empty();
}

/// The values synthetic data for integer input \p input draws when the
/// graph only ever asks whether it equals some constants (a padding mask
/// compared with 0): [smallest constant, largest + 2), which holds every
/// constant and one value equal to none, so both outcomes of each
/// comparison occur. nullopt for any other use.
std::optional<std::pair<int64_t, int64_t>>
deriveComparedRange(const Value *input) {
  llvm::SmallVector<int64_t, 4> constants;
  if (!collectComparedConstants(input, constants, 0))
    return std::nullopt;
  int64_t lowest = *llvm::min_element(constants);
  int64_t highest = *llvm::max_element(constants);
  // The span highest + 2 - lowest must fit an int64_t (RandomStream::integer).
  if (highest > std::numeric_limits<int64_t>::max() - 2 ||
      (lowest < 0 &&
       highest > std::numeric_limits<int64_t>::max() - 2 + lowest))
    return std::nullopt;
  return std::make_pair(lowest, highest + 2);
}

/// Checks every element of integer tensor \p data against \p range.
llvm::Error checkIndexValues(const TensorData &data, const IndexRange &range,
                             const Value *input) {
  uint64_t n = data.getNumElements();
  for (uint64_t i = 0; i != n; ++i) {
    int64_t v = data.getIntElement(i);
    if ((v >= range.lowest && v < range.end) ||
        (range.ignoreIndex && v == *range.ignoreIndex))
      continue;
    return makeError(llvm::formatv("{0} value {1} out of range [{2}, {3}) in "
                                   "input {4}",
                                   range.role, v, range.lowest, range.end,
                                   quoted(input)));
  }
  return llvm::Error::success();
}

/// True for rank-1 parameter names that are normalization gains.
bool looksLikeGain(llvm::StringRef name) {
  return name.ends_with("weight") || name.ends_with("gamma") ||
         name.ends_with("scale");
}

/// Seeded initial value of a parameter named \p name of static \p type.
llvm::Expected<TensorData>
initialParameter(llvm::StringRef name, const TensorType &type, uint64_t seed) {
  RandomStream random(seed ^ stableHash(name) ^ 0x5eedull);
  if (type.hasRank() && type.getRank() >= 2) {
    llvm::SmallVector<int64_t, 4> shape = type.getStaticShape();
    int64_t receptive = 1;
    for (size_t i = 2; i < shape.size(); ++i)
      receptive *= shape[i];
    double fanOut = double(shape[0]) * receptive;
    double fanIn = double(shape[1]) * receptive;
    double limit = fanIn + fanOut > 0 ? std::sqrt(6.0 / (fanIn + fanOut)) : 0;
    return fillTensor(
        type, [&](uint64_t) { return (2 * random.uniform() - 1) * limit; });
  }
  double fill =
      type.hasRank() && type.getRank() == 1 && looksLikeGain(name) ? 1.0 : 0.0;
  return fillTensor(type, [&](uint64_t) { return fill; });
}

/// The floats of \p data, an f32 tensor.
llvm::ArrayRef<float> floatsOf(const TensorData &data) {
  llvm::ArrayRef<uint8_t> bytes = data.getBytes();
  return llvm::ArrayRef<float>(reinterpret_cast<const float *>(bytes.data()),
                               bytes.size() / sizeof(float));
}

/// Rank \p rank's shard of \p group from the whole tensors of \p weights
/// (a checkpoint saved whole, by a run on any world size or stage): null
/// when the file holds none of them, an error when it holds only some or
/// one of the wrong type. Parameter groups take the seeded initial value
/// of a parameter the file lacks when \p allowMissing (or without a
/// file), like an unsharded parameter; else the error ends with
/// \p missingHint.
llvm::Expected<std::optional<TensorData>>
shardFromWhole(const ZeroShardGroup &group, const Value *input,
               const WeightSet *weights, bool allowMissing, uint64_t seed,
               int64_t rank, int64_t ranks, llvm::StringRef missingHint) {
  std::vector<TensorData> whole(group.whole.size());
  std::vector<std::string> missing;
  size_t found = 0;
  for (size_t i = 0, e = group.whole.size(); i != e; ++i) {
    TensorType type = TensorType::get(DType::F32, group.shapes[i]);
    const NamedTensor *tensor =
        weights ? weights->lookup(group.whole[i]) : nullptr;
    if (tensor) {
      if (llvm::Error err = tensor->data.load())
        return err;
      if (tensor->data.getType() != type)
        return makeError(tensor->source + ": " + group.whole[i] +
                         " (whole tensor of the ZeRO shard " + quoted(input) +
                         ") must be " + type.str() + " but the weights " +
                         "file holds " + tensor->data.getType().str());
      whole[i] = tensor->data;
      ++found;
    } else {
      missing.push_back(group.whole[i]);
    }
  }
  if (found == 0 && !group.holdsParameters)
    return std::nullopt;
  if (!missing.empty()) {
    if (!group.holdsParameters)
      return makeError(llvm::formatv(
          "{0}: the ZeRO shard {1} is cut from {2} whole tensors and the "
          "file holds {3} of them (missing {4})",
          weights->path, quoted(input), group.whole.size(), found,
          missing.front()));
    if (weights && !allowMissing)
      return makeError(
          weights->path + ": no value for parameter '" + missing.front() +
          "' (its ZeRO shard is " + quoted(input) +
          (missingHint.empty() ? "" : "; " + missingHint.str()) + ")");
    for (size_t i = 0, e = group.whole.size(); i != e; ++i)
      if (whole[i].isNull()) {
        auto data = initialParameter(
            group.whole[i], TensorType::get(DType::F32, group.shapes[i]), seed);
        if (!data)
          return data.takeError();
        whole[i] = std::move(*data);
      }
  }
  llvm::SmallVector<llvm::ArrayRef<float>, 8> views;
  for (const TensorData &tensor : whole)
    views.push_back(floatsOf(tensor));
  auto shard = sliceZeroShard(group, rank, ranks, views);
  if (!shard)
    return shard.takeError();
  TensorData data = TensorData::fromValues(DType::F32, {group.shardElements},
                                           llvm::ArrayRef<float>(*shard));
  if (data.getType() != input->getType())
    return makeError(llvm::formatv("the ZeRO shard {0} is {1} but its record "
                                   "says {2} floats",
                                   quoted(input), input->getType().str(),
                                   group.shardElements));
  return std::optional<TensorData>(std::move(data));
}

/// Seeded synthetic value of data input \p input.
llvm::Expected<TensorData> syntheticData(const Value *input, uint64_t seed) {
  const TensorType &type = input->getType();
  RandomStream random(seed ^ stableHash(input->getName()));
  // Allocation failures name the input.
  auto named =
      [&](llvm::Expected<TensorData> data) -> llvm::Expected<TensorData> {
    if (!data)
      return makeError("input " + quoted(input) + ": " +
                       llvm::toString(data.takeError()));
    return data;
  };
  DType dtype = type.getDType();
  if (isFloatingPoint(dtype))
    return named(fillTensor(type, [&](uint64_t) { return random.normal(); }));
  if (dtype == DType::Bool)
    return named(fillTensor(type, [&](uint64_t) { return random.next() & 1; }));
  std::optional<IndexRange> range = deriveIndexRange(input);
  if (!range) {
    if (std::optional<std::pair<int64_t, int64_t>> compared =
            deriveComparedRange(input))
      return named(fillTensor(type, [&](uint64_t) {
        return random.integer(compared->first, compared->second);
      }));
    return makeError("cannot derive the valid range of integer input " +
                     quoted(input) +
                     " from the graph (it is not a loss's labels, a Gather's "
                     "indices or only compared with constants); supply it "
                     "with --inputs");
  }
  if (range->end <= range->syntheticLowest)
    return makeError("integer input " + quoted(input) +
                     " has an empty valid range");
  return named(fillTensor(type, [&](uint64_t) {
    return random.integer(range->syntheticLowest, range->end);
  }));
}

} // namespace

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

std::optional<IndexRange> gmopt::deriveIndexRange(const Value *input) {
  std::optional<IndexRange> range;
  collectRanges(input, range, 0);
  return range;
}

llvm::StringRef gmopt::inputOriginName(InputOrigin origin) {
  switch (origin) {
  case InputOrigin::TestData:
    return "test data";
  case InputOrigin::Weights:
    return "weights";
  case InputOrigin::GraphDefault:
    return "graph default";
  case InputOrigin::Zeros:
    return "zeros";
  case InputOrigin::DefaultTrue:
    return "true";
  case InputOrigin::Synthetic:
    return "synthetic";
  case InputOrigin::FedEachStep:
    return "fed each step";
  }
  llvm_unreachable("unknown input origin");
}

llvm::Expected<std::vector<BoundInput>>
gmopt::bindInputs(const Module &module, const InputSources &sources) {
  const TrainingSignature &signature = module.getSignature();
  llvm::SmallPtrSet<const Value *, 16> params, accumulators, optimizerState;
  // The moments and the step count are state (restored from a checkpoint);
  // the learning rate and the update signal are fed by trainModule every
  // step.
  for (const ParamInfo &param : signature.getParams()) {
    params.insert(param.param);
    if (param.accumulator)
      accumulators.insert(param.accumulator);
    optimizerState.insert(param.optimizerState.begin(),
                          param.optimizerState.end());
  }
  // ZeRO stage 2's gradient shards are accumulators (ir/ZeroSharding.h);
  // the state (and stage 3's parameter) shards are cut from whole tensors.
  std::optional<ZeroShardingRecord> zero = readZeroSharding(module);
  std::vector<ZeroShardGroup> shardGroups;
  if (zero) {
    for (const ZeroBucketRecord &bucket : zero->buckets)
      if (!bucket.gradientShard.empty())
        if (const Value *shard =
                module.getGraph().lookupValue(bucket.gradientShard))
          accumulators.insert(shard);
    auto groups = getZeroShardGroups(*zero);
    if (!groups)
      return groups.takeError();
    shardGroups = std::move(*groups);
  }
  auto groupOf = [&](const Value *input) -> const ZeroShardGroup * {
    for (const ZeroShardGroup &group : shardGroups)
      if (group.shard == input->getName())
        return &group;
    return nullptr;
  };
  if (const Value *step = signature.getStepSlot(StepSlot::StepCount))
    optimizerState.insert(step);
  // So are mixed precision's loss scale and counter (their initial values
  // are graph defaults).
  for (StepSlot slot : {StepSlot::LossScale, StepSlot::LossScaleGoodSteps})
    if (const Value *state = signature.getStepSlot(slot))
      optimizerState.insert(state);
  llvm::SmallPtrSet<const Value *, 4> fedEachStep;
  if (const Value *rate = signature.getStepSlot(StepSlot::LearningRate))
    fedEachStep.insert(rate);
  if (const Node *optimizer = findOptimizerNode(module)) {
    if (const Value *signal = findFedUpdateSignal(*optimizer))
      fedEachStep.insert(signal);
  }
  const Graph &graph = module.getGraph();
  std::vector<BoundInput> bound;
  for (size_t position = 0; position != graph.getInputs().size(); ++position) {
    const Value *input = graph.getInputs()[position].get();
    const TensorType &type = input->getType();
    if (!type.hasStaticShape())
      return makeError("input " + quoted(input) + " has type " + type.str() +
                       ", which is not static; bind its dimensions with --dim");
    const NamedTensor *fromTestData = nullptr;
    if (sources.testData) {
      fromTestData = sources.testData->findInput(input->getName());
      if (!fromTestData) {
        const NamedTensor *byIndex =
            sources.testData->findInputByIndex(int64_t(position));
        if (byIndex && byIndex->name.empty())
          fromTestData = byIndex;
      }
    }
    BoundInput binding;
    binding.input = input;
    auto useTensor = [&](const NamedTensor &tensor,
                         InputOrigin origin) -> llvm::Error {
      if (tensor.data.getType() != type)
        return makeError(
            tensor.source + ": input " + quoted(input) + " expects " +
            type.str() + " but the " +
            (origin == InputOrigin::Weights ? "weights file" : "file") +
            " holds " + tensor.data.getType().str());
      binding.data = tensor.data;
      binding.origin = origin;
      return llvm::Error::success();
    };
    // A zero-filled tensor of the input's type, bound as \p origin.
    auto useZeros = [&](InputOrigin origin) -> llvm::Error {
      auto zeros = filledTensor(type, 0);
      if (!zeros)
        return makeError("input " + quoted(input) + ": " +
                         llvm::toString(zeros.takeError()));
      binding.data = std::move(*zeros);
      binding.origin = origin;
      return llvm::Error::success();
    };

    const ZeroShardGroup *group = zero ? groupOf(input) : nullptr;
    // A shard the file holds under its own name (saved by one rank) is
    // taken as it is; otherwise it is cut from the whole tensors.
    if (group && !(sources.weights && sources.weights->lookup(group->shard))) {
      auto shard = shardFromWhole(
          *group, input, sources.weights, sources.allowMissingWeights,
          sources.seed, sources.rank, zero->ranks, sources.missingWeightsHint);
      if (!shard)
        return shard.takeError();
      if (*shard) {
        binding.data = std::move(**shard);
        binding.origin =
            sources.weights ? InputOrigin::Weights : InputOrigin::Synthetic;
        bound.push_back(std::move(binding));
        continue;
      }
    }
    if (params.count(input)) {
      const NamedTensor *fromWeights =
          sources.weights ? sources.weights->lookup(input->getName()) : nullptr;
      if (fromWeights) {
        if (llvm::Error err = useTensor(*fromWeights, InputOrigin::Weights))
          return err;
      } else if (sources.weights && !sources.allowMissingWeights) {
        return makeError(sources.weights->path + ": no value for parameter " +
                         quoted(input) +
                         (sources.missingWeightsHint.empty()
                              ? ""
                              : " (" + sources.missingWeightsHint + ")"));
      } else if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else if (input->hasData()) {
        // An external default is mapped now (not before: a --weights value
        // makes it unneeded); a missing file is an error naming it.
        if (llvm::Error err = input->getData().load())
          return makeError("parameter " + quoted(input) + ": " +
                           llvm::toString(std::move(err)));
        binding.data = input->getData();
        binding.origin = InputOrigin::GraphDefault;
      } else {
        auto data =
            initialParameter(input->getName(), input->getType(), sources.seed);
        if (!data)
          return makeError("parameter " + quoted(input) + ": " +
                           llvm::toString(data.takeError()));
        binding.data = std::move(*data);
        binding.origin = InputOrigin::Synthetic;
      }
    } else if (accumulators.count(input)) {
      if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else {
        if (llvm::Error err = useZeros(InputOrigin::Zeros))
          return err;
      }
    } else if (optimizerState.count(input)) {
      const NamedTensor *fromWeights =
          sources.weights ? sources.weights->lookup(input->getName()) : nullptr;
      if (fromWeights) {
        if (llvm::Error err = useTensor(*fromWeights, InputOrigin::Weights))
          return err;
      } else if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else if (input->hasData()) {
        binding.data = input->getData();
        binding.origin = InputOrigin::GraphDefault;
      } else {
        if (llvm::Error err = useZeros(InputOrigin::Zeros))
          return err;
      }
    } else if (fedEachStep.count(input)) {
      if (llvm::Error err = useZeros(InputOrigin::FedEachStep))
        return err;
    } else if (input == signature.getLazyResetGrad()) {
      if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else {
        auto ones = filledTensor(type, 1);
        if (!ones)
          return makeError("input " + quoted(input) + ": " +
                           llvm::toString(ones.takeError()));
        binding.data = std::move(*ones);
        binding.origin = InputOrigin::DefaultTrue;
      }
    } else {
      if (fromTestData) {
        if (llvm::Error err = useTensor(*fromTestData, InputOrigin::TestData))
          return err;
      } else if (input->hasData()) {
        if (llvm::Error err = input->getData().load())
          return makeError("input " + quoted(input) + ": " +
                           llvm::toString(std::move(err)));
        binding.data = input->getData();
        binding.origin = InputOrigin::GraphDefault;
      } else if (sources.testData) {
        // Given test data, a missing tensor is a mistake (a misspelt name,
        // a forgotten file), never a reason to train on noise.
        return makeError(llvm::formatv(
            "data input {0} has no tensor in --inputs {1} (expected an "
            "input_K.pb holding a tensor named {0}, or an unnamed "
            "input_{2}.pb; synthetic data is only used without --inputs)",
            quoted(input), sources.testData->directory, position));
      } else {
        auto data = syntheticData(input, sources.seed);
        if (!data)
          return data.takeError();
        binding.data = std::move(*data);
        binding.origin = InputOrigin::Synthetic;
      }
      // Labels and indices are checked before anything runs: a kernel would
      // only report the first bad one, deep inside the step.
      DType dtype = type.getDType();
      if (isInteger(dtype) && binding.origin != InputOrigin::Synthetic)
        if (std::optional<IndexRange> range = deriveIndexRange(input))
          if (llvm::Error err = checkIndexValues(binding.data, *range, input))
            return fromTestData ? withFile(fromTestData->source, std::move(err))
                                : std::move(err);
    }
    bound.push_back(std::move(binding));
  }
  return bound;
}
