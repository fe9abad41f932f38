//===- RecomputeStrategies.cpp - Which activations recompute drops --------===//
//
// The planning half of the recompute pass: from the saved-activation
// analysis to a RecomputePlan, for the selective, sqrt and full modes and
// the hybrids budget searches over. Every strategy first decides the set of
// forward values kept for the backward pass; every other saved activation is
// dropped, and regions (SavedActivations::computeRegion) recompute it from
// what is kept. Groups say where clones go: selective values are recomputed
// just before their first later-phase reader, a recomputed segment as a
// whole before the first reader of any of its values.
//
//===----------------------------------------------------------------------===//

#include "passes/recompute/MinCut.h"
#include "passes/recompute/Recompute.h"
#include "passes/recompute/SavedActivations.h"

#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace gmopt;

namespace {

/// Ops selective recompute may recompute: cheap per element or per row
/// (normalisations, softmax, activations, dropout, casts, views and data
/// movement). Matrix products, convolutions, pooling, gathers, reductions
/// and losses are kept.
bool isCheapToRecompute(const Node &node) {
  static const llvm::StringSet<> cheap = {
      // Normalisations and their ONNX Runtime forms.
      "LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization",
      "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
      "BatchNormalization", "BatchNormInternal",
      // Softmax and dropout.
      "Softmax", "LogSoftmax", "Dropout", "BitmaskDropout", "BiasDropout",
      // Activations.
      "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Relu", "LeakyRelu",
      "Sigmoid", "Tanh", "Elu", "Selu", "Softplus", "HardSigmoid", "Erf",
      // Casts, views and data movement.
      "Cast", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten",
      "Identity", "Expand", "Concat", "ConcatTraining", "Split",
      "SplitTraining", "Slice", "Where", "Constant", "ConstantOfShape"};
  if (cheap.contains(node.getOpType()))
    return true;
  const OpSchema *schema = OpRegistry::instance().lookup(node);
  return schema &&
         (schema->hasTrait(TraitElementwise) || schema->hasTrait(TraitView) ||
          schema->hasTrait(TraitShapeOnly));
}

/// A product of two activations - attention's scores (Q K^T) and context
/// (P V) - rather than a layer's product with a weight. Megatron-LM's
/// selective recompute recomputes this core attention: its results are
/// quadratic in the sequence, its FLOPs a few percent of the step.
bool isAttentionCoreProduct(const Node &node,
                            const SavedActivations &analysis) {
  bool product = node.isa(kOnnxDomain, "MatMul") ||
                 node.isa("com.microsoft", "FusedMatMul");
  if (!product || node.getNumOperands() < 2)
    return false;
  for (unsigned i = 0; i != 2; ++i) {
    const Value *operand = node.getOperand(i);
    if (!operand || !analysis.isForwardValue(operand) ||
        analysis.isParameterDerived(operand))
      return false;
  }
  return true;
}

uint64_t saturatingMul(uint64_t a, uint64_t b) {
  if (a && b > FlowNetwork::kInfinite / a)
    return FlowNetwork::kInfinite;
  return a * b;
}

/// A node's FLOPs in fp32-equivalent quarters: 4 for fp32 (and wider, and
/// non-float) arithmetic, 2 for 16-bit, 1 for 8-bit. Narrow arithmetic runs
/// at least that many times fp32's rate on the GPUs plans are made for
/// (tensor cores), and it keeps the exchange rate of FLOPs against kept
/// bytes independent of precision: amp halves both the bytes a saved value
/// holds and what recomputing it costs, so selective recompute makes the
/// same choice with and without it (priced at fp32's rate, the attention
/// scores that selective recomputes in fp32 were kept under amp, whose plan
/// then exceeded fp32 selective's).
uint64_t flopRateShare(const Node &node) {
  for (const Value *result : node.getResults())
    if (result && isFloatingPoint(result->getType().getDType()))
      return std::clamp<uint64_t>(dtypeSize(result->getType().getDType()), 1,
                                  4);
  return 4;
}

/// What recomputing forward node \p position costs, in kept bytes: its
/// FLOPs (at fp32's rate) per flopsPerByte plus the bytes it writes per
/// writtenBytesPerByte. Selective's cut keeps this price rather than the
/// byte-priced cost (recomputeCostFlops) that budget mode minimises: priced
/// by its traffic at the CPU preset's balance, every pointwise op cost about
/// 0.2 kept bytes per byte it reads and writes, and on GPT-2 small at
/// 8 x 1024 selective then kept enough to plan 12.2 GiB instead of 7.7 GiB.
uint64_t recomputePrice(const SavedActivations &analysis, uint32_t position,
                        const RecomputeTuning &tuning) {
  uint64_t price = 0;
  if (tuning.flopsPerByte)
    price += analysis.getFlops(position) *
             flopRateShare(*analysis.getForwardNodes()[position]) / 4 /
             tuning.flopsPerByte;
  if (tuning.writtenBytesPerByte)
    price += analysis.getBytesWritten(position) / tuning.writtenBytesPerByte;
  return std::min(price, FlowNetwork::kInfinite);
}

/// The kept set of selective recompute: a minimum cut of the forward graph.
/// Per forward node n a vertex A(n) (sink side: recomputed in the backward
/// pass), per result r a vertex B(r) (sink side: available to the backward
/// pass). Edges: A(n) -> B(r) with r's bytes (cut: r is kept); B(r) -> A(n)
/// infinite (a recomputed node makes all its results); B(u) -> A(n)
/// infinite for each forward operand u (a recomputed node needs its
/// operands); source -> A(n) infinite for nodes that must not be
/// recomputed, and otherwise source -> A(n) with the node's FLOPs divided
/// by flopsPerByte (cut: n is recomputed, at that price in bytes); B(r) ->
/// sink infinite for saved activations. The cut minimises kept bytes plus
/// priced recompute. A node's price is multiplied by \p multiplicity (how
/// many groups cloned it in an earlier round; empty: once each). Capacities are
/// scaled so that among equal cuts the one keeping later values (less to
/// recompute) wins.
llvm::DenseSet<const Value *>
selectiveKeptSet(const SavedActivations &analysis,
                 llvm::function_ref<bool(uint32_t)> mayRecompute,
                 const RecomputeTuning &tuning,
                 llvm::ArrayRef<uint32_t> multiplicity) {
  llvm::ArrayRef<const Node *> forward = analysis.getForwardNodes();
  const uint32_t numForward = forward.size();
  llvm::DenseMap<const Value *, uint32_t> valueVertex;
  std::vector<const Value *> vertexValue;
  const uint32_t source = 0, sink = 1;
  uint32_t nextVertex = 2 + numForward;
  for (const Node *node : forward)
    for (const Value *result : node->getResults())
      if (result && analysis.isForwardValue(result)) {
        valueVertex[result] = nextVertex++;
        vertexValue.push_back(result);
      }
  FlowNetwork network(nextVertex);
  const uint64_t tieScale = uint64_t(numForward) + 1;
  for (uint32_t position = 0; position != numForward; ++position) {
    const Node *node = forward[position];
    uint32_t nodeVertex = 2 + position;
    if (!mayRecompute(position))
      network.addEdge(source, nodeVertex, FlowNetwork::kInfinite);
    else if (uint64_t price = recomputePrice(analysis, position, tuning))
      // Recomputing (A(n) on the sink side) costs the node's price, once
      // per group that clones it.
      network.addEdge(
          source, nodeVertex,
          saturatingMul(
              saturatingMul(price, tieScale),
              multiplicity.empty() ? 1 : std::max(1u, multiplicity[position])));
    for (const Value *operand : node->getOperands()) {
      auto it = operand ? valueVertex.find(operand) : valueVertex.end();
      if (it != valueVertex.end())
        network.addEdge(it->second, nodeVertex, FlowNetwork::kInfinite);
    }
    for (const Value *result : node->getResults()) {
      auto it = result ? valueVertex.find(result) : valueVertex.end();
      if (it == valueVertex.end())
        continue;
      uint64_t capacity =
          saturatingMul(analysis.getBytes(result) + 1, tieScale) +
          (numForward - position);
      network.addEdge(nodeVertex, it->second, capacity);
      network.addEdge(it->second, nodeVertex, FlowNetwork::kInfinite);
    }
  }
  for (const SavedActivation &activation : analysis.getSaved())
    network.addEdge(valueVertex.lookup(activation.value), sink,
                    FlowNetwork::kInfinite);
  network.maxFlow(source, sink);

  llvm::DenseSet<const Value *> kept;
  for (const Value *value : vertexValue) {
    uint32_t producer =
        2 + *analysis.getForwardPosition(value->getDefiningNode());
    if (network.onSourceSide(producer) &&
        !network.onSourceSide(valueVertex.lookup(value)))
      kept.insert(value);
  }
  return kept;
}

/// Points between forward nodes where the forward pass may be cut into
/// segments. Boundary i lies after forward node i; crossing[i] is the bytes
/// of forward values defined at or before i and read by a forward node
/// after it.
struct SegmentBoundaries {
  std::vector<uint32_t> points;
  std::vector<uint64_t> crossing;
};

/// Candidate boundaries: local minima of the crossing bytes (over a window
/// of forward nodes either side), accepted greedily along the forward pass
/// when the saved bytes since the last accepted boundary are at least
/// twice what keeping this one costs, so each kept boundary pays for
/// itself (Chen et al.'s greedy, with the cut placed in a valley).
SegmentBoundaries findSegmentBoundaries(const SavedActivations &analysis) {
  llvm::ArrayRef<const Node *> forward = analysis.getForwardNodes();
  const uint32_t numForward = forward.size();
  SegmentBoundaries result;
  if (numForward < 2)
    return result;
  // Difference array: a value defined at p and last read by the forward
  // pass at q > p crosses boundaries p..q-1.
  std::vector<int64_t> delta(numForward + 1, 0);
  std::vector<uint64_t> savedAt(numForward, 0);
  for (const SavedActivation &activation : analysis.getSaved())
    savedAt[activation.producer] += activation.bytes;
  for (uint32_t p = 0; p != numForward; ++p)
    for (const Value *result : forward[p]->getResults()) {
      // Weights transposed or cast cross every cut but are made again
      // cheaply wherever they are read: they do not make a cut dear.
      if (!result || !analysis.isForwardValue(result) ||
          analysis.isParameterDerived(result))
        continue;
      uint32_t last = analysis.getLastForwardUse(result);
      if (last > p) {
        delta[p] += analysis.getBytes(result);
        delta[last] -= analysis.getBytes(result);
      }
    }
  result.crossing.resize(numForward - 1);
  int64_t running = 0;
  for (uint32_t i = 0; i + 1 < numForward; ++i) {
    running += delta[i];
    result.crossing[i] = running;
  }
  const uint32_t window = 8;
  uint64_t savedSince = 0;
  for (uint32_t i = 0; i + 1 < numForward; ++i) {
    savedSince += savedAt[i];
    uint64_t here = result.crossing[i];
    // A valley: the first point of a plateau (below its left neighbour)
    // that no point within the window either side undercuts. Equal
    // valleys close together (one per layer) all count.
    bool valley = i == 0 || result.crossing[i - 1] > here;
    for (uint32_t j = i > window ? i - window : 0;
         valley && j < std::min(numForward - 1, i + window + 1); ++j)
      valley = result.crossing[j] >= here;
    // Never cut where nothing has been saved since the last cut.
    if (valley && savedSince > 0 && savedSince >= 2 * here) {
      result.points.push_back(i);
      savedSince = 0;
    }
  }
  return result;
}

/// Records \p kept in \p plan in producer order, with their bytes.
void setKept(RecomputePlan &plan, const SavedActivations &analysis,
             const llvm::DenseSet<const Value *> &kept) {
  plan.kept.assign(kept.begin(), kept.end());
  llvm::sort(plan.kept, [&](const Value *a, const Value *b) {
    uint32_t pa = *analysis.getForwardPosition(a->getDefiningNode());
    uint32_t pb = *analysis.getForwardPosition(b->getDefiningNode());
    return pa < pb || (pa == pb && a->getResultIndex() < b->getResultIndex());
  });
  plan.savedBytesAfter = 0;
  for (const Value *value : plan.kept)
    plan.savedBytesAfter += analysis.getBytes(value);
}

/// Groups whose places are at most this many nodes apart and that clone
/// common nodes are merged.
constexpr uint32_t kMergeWindow = 32;

/// Adds to \p plan one group per key of \p groupOf, recomputing the dropped
/// values (saved activations not in \p kept). Values a region must keep
/// (made by nodes that cannot be recomputed) join \p kept and the regions
/// are found again, until nothing more must be kept. groupOf sees each
/// dropped activation and the first later-phase read of any dropped result
/// of the same node (so the results of one node, such as Dropout's output
/// and mask, can share one clone).
llvm::Error buildGroups(
    const SavedActivations &analysis, llvm::DenseSet<const Value *> &kept,
    llvm::function_ref<uint64_t(const SavedActivation &, uint32_t)> groupOf,
    llvm::function_ref<bool(const SavedActivation &, const RecomputeRegion &)>
        worthRecomputing,
    RecomputePlan &plan) {
  struct Pending {
    std::vector<const Value *> provides;
    llvm::DenseSet<uint32_t> nodes;
    uint32_t placeBefore = UINT32_MAX;
  };
  std::vector<std::pair<const SavedActivation *, RecomputeRegion>> dropped;
  for (bool again = true; again;) {
    again = false;
    dropped.clear();
    for (const SavedActivation &activation : analysis.getSaved()) {
      if (kept.contains(activation.value))
        continue;
      if (!analysis.isRecomputable(activation.producer)) {
        kept.insert(activation.value);
        again = true;
        continue;
      }
      llvm::Expected<RecomputeRegion> region =
          analysis.computeRegion(activation.value, kept);
      if (!region)
        return region.takeError();
      if (!region->mustKeep.empty()) {
        for (const Value *value : region->mustKeep)
          kept.insert(value);
        again = true;
        continue;
      }
      // Saved activations come in forward order and regions reach only
      // backwards, so keeping this one here shortens the later regions
      // that would have run through it.
      if (!worthRecomputing(activation, *region)) {
        kept.insert(activation.value);
        continue;
      }
      dropped.push_back({&activation, std::move(*region)});
    }
  }
  llvm::DenseMap<uint32_t, uint32_t> producerFirstUse;
  for (const auto &entry : dropped) {
    auto [it, inserted] = producerFirstUse.try_emplace(
        entry.first->producer, entry.first->firstLaterUse);
    if (!inserted)
      it->second = std::min(it->second, entry.first->firstLaterUse);
  }
  std::map<uint64_t, Pending> groups;
  for (const auto &[activation, region] : dropped) {
    Pending &group = groups[groupOf(
        *activation, producerFirstUse.lookup(activation->producer))];
    group.provides.push_back(activation->value);
    group.nodes.insert(region.nodes.begin(), region.nodes.end());
    group.placeBefore = std::min(group.placeBefore, activation->firstLaterUse);
  }
  // Groups placed close together that clone the same nodes (the attention
  // probabilities for the softmax gradient, and their dropout for the
  // context product's, a few nodes later) become one: the shared nodes
  // run once, and what the later group provides lives at most a few nodes
  // longer.
  std::vector<Pending> ordered;
  for (auto &entry : groups)
    ordered.push_back(std::move(entry.second));
  llvm::sort(ordered, [](const Pending &a, const Pending &b) {
    return a.placeBefore < b.placeBefore;
  });
  // The last node (graph order) defining a value the clones of \p nodes
  // read from outside them: the clones must go after it. Forward nodes may
  // sit after backward ones in the node order (an unscheduled import), so
  // a group's sources are not always defined before its first reader.
  auto latestSource = [&](const llvm::DenseSet<uint32_t> &nodes) {
    int64_t latest = -1;
    for (uint32_t position : nodes)
      for (const Value *operand :
           analysis.getForwardNodes()[position]->getOperands()) {
        if (!operand || !analysis.isForwardValue(operand))
          continue;
        uint32_t producer =
            *analysis.getForwardPosition(operand->getDefiningNode());
        if (!nodes.contains(producer))
          latest = std::max<int64_t>(latest, analysis.getNodeIndex(producer));
      }
    return latest;
  };
  std::vector<Pending> merged;
  for (Pending &group : ordered) {
    if (!merged.empty()) {
      Pending &last = merged.back();
      bool shares = llvm::any_of(group.nodes, [&](uint32_t position) {
        return last.nodes.contains(position);
      });
      if (shares && group.placeBefore - last.placeBefore <= kMergeWindow) {
        llvm::DenseSet<uint32_t> both = last.nodes;
        both.insert(group.nodes.begin(), group.nodes.end());
        if (latestSource(both) < int64_t(last.placeBefore)) {
          llvm::append_range(last.provides, group.provides);
          last.nodes = std::move(both);
          continue;
        }
      }
    }
    merged.push_back(std::move(group));
  }
  // A group whose sources are defined only after its first reader cannot
  // be placed: what it would provide stays kept.
  llvm::erase_if(merged, [&](const Pending &group) {
    if (latestSource(group.nodes) < int64_t(group.placeBefore))
      return false;
    kept.insert(group.provides.begin(), group.provides.end());
    return true;
  });
  for (Pending &pending : merged) {
    RecomputePlan::Group group;
    group.provides = std::move(pending.provides);
    group.nodes.assign(pending.nodes.begin(), pending.nodes.end());
    llvm::sort(group.nodes);
    group.placeBefore = pending.placeBefore;
    for (uint32_t position : group.nodes) {
      group.flops += analysis.getFlops(position);
      group.cost += analysis.getCost(position);
    }
    plan.recomputeFlops += group.flops;
    plan.recomputeCost += group.cost;
    plan.dropped += group.provides.size();
    plan.groups.push_back(std::move(group));
  }
  llvm::sort(plan.groups,
             [](const RecomputePlan::Group &a, const RecomputePlan::Group &b) {
               return a.placeBefore < b.placeBefore;
             });
  setKept(plan, analysis, kept);
  return llvm::Error::success();
}

} // namespace

uint32_t gmopt::countRecomputeSegments(const SavedActivations &analysis) {
  return findSegmentBoundaries(analysis).points.size();
}

llvm::Expected<RecomputePlan>
gmopt::planRecompute(const SavedActivations &analysis, RecomputeMode mode,
                     uint32_t fullPrefix, const RecomputeTuning &tuning,
                     const RecomputeAdjustment &adjust) {
  RecomputePlan plan;
  plan.savedBytesBefore = analysis.getSavedBytes();
  plan.stepFlops = analysis.getStepFlops();
  plan.stepCost = analysis.getStepCost();
  plan.savedBytesAfter = plan.savedBytesBefore;
  if (analysis.getSaved().empty())
    return plan;
  llvm::ArrayRef<const Node *> forward = analysis.getForwardNodes();

  // Segments: boundary points split the forward positions; segment s holds
  // positions (points[s-1], points[s]].
  SegmentBoundaries boundaries;
  std::vector<uint32_t> points;
  if (mode != RecomputeMode::Selective && mode != RecomputeMode::Explicit) {
    boundaries = findSegmentBoundaries(analysis);
    points = boundaries.points;
    if (mode == RecomputeMode::Sqrt && !points.empty()) {
      uint32_t step = std::ceil(std::sqrt(double(points.size() + 1)));
      std::vector<uint32_t> every;
      for (uint32_t i = 0; i != points.size(); ++i)
        if (i % step == step - 1)
          every.push_back(points[i]);
      points = std::move(every);
    }
  }
  for (uint32_t point : points)
    plan.boundaries.push_back({point, boundaries.crossing[point]});
  auto segmentOf = [&](uint32_t position) -> uint32_t {
    return std::lower_bound(points.begin(), points.end(), position) -
           points.begin();
  };
  const uint32_t lastSegment = points.size();
  // Which segments are recomputed whole: all but the last for sqrt and
  // full (the backward pass starts in the last one, so recomputing it
  // whole saves nothing: it is recomputed selectively); the first
  // fullPrefix for budget's hybrids.
  uint32_t wholeSegments =
      mode == RecomputeMode::Budget ? std::min(fullPrefix, lastSegment)
      : (mode == RecomputeMode::Sqrt || mode == RecomputeMode::Full)
          ? lastSegment
          : 0;
  auto isWhole = [&](uint32_t position) {
    return segmentOf(position) < wholeSegments;
  };

  auto attemptPlan = [&](llvm::ArrayRef<uint32_t> multiplicity)
      -> llvm::Expected<RecomputePlan> {
    RecomputePlan attempt = plan;
    llvm::DenseSet<const Value *> kept;
    // Outside whole segments (always in the last one, where the backward
    // pass starts), selective keeps what the minimum cut keeps.
    if (mode != RecomputeMode::Explicit) {
      llvm::DenseSet<const Value *> cut = selectiveKeptSet(
          analysis,
          [&](uint32_t position) {
            return analysis.isRecomputable(position) &&
                   (isCheapToRecompute(*forward[position]) ||
                    (tuning.attentionCore &&
                     isAttentionCoreProduct(*forward[position], analysis)));
          },
          tuning, multiplicity);
      for (const Value *value : cut)
        if (!isWhole(*analysis.getForwardPosition(value->getDefiningNode())))
          kept.insert(value);
    }
    // Whole segments keep the values crossing their boundaries: a value
    // defined at p and last read by the forward pass at q crosses every
    // boundary in [p, q).
    if (wholeSegments > 0) {
      auto firstWhole = points.begin();
      auto endWhole =
          points.begin() + std::min<size_t>(wholeSegments, points.size());
      for (uint32_t p = 0, e = forward.size(); p != e; ++p)
        for (const Value *result : forward[p]->getResults()) {
          if (!result || !analysis.isForwardValue(result) ||
              analysis.isParameterDerived(result))
            continue;
          uint32_t last = analysis.getLastForwardUse(result);
          auto it = std::lower_bound(firstWhole, endWhole, p);
          if (it != endWhole && *it < last)
            kept.insert(result);
        }
    }
    if (mode == RecomputeMode::Explicit) {
      // Everything saved stays but the named values.
      llvm::StringSet<> drop;
      for (const std::string &name : tuning.drop)
        drop.insert(name);
      kept.clear();
      llvm::StringSet<> found;
      for (const SavedActivation &activation : analysis.getSaved()) {
        if (drop.contains(activation.value->getName()))
          found.insert(activation.value->getName());
        else
          kept.insert(activation.value);
      }
      for (const std::string &name : tuning.drop)
        if (!found.contains(name))
          return llvm::createStringError(
              llvm::inconvertibleErrorCode(),
              "recompute: '%s' (in drop) is not a saved activation",
              name.c_str());
    }

    // The adjustment overrides the strategy, value by value.
    llvm::DenseSet<const Value *> forcedDrop(adjust.drop.begin(),
                                             adjust.drop.end());
    for (const Value *value : adjust.drop)
      kept.erase(value);
    for (const Value *value : adjust.keep)
      if (analysis.isForwardValue(value))
        kept.insert(value);

    if (llvm::Error err = buildGroups(
            analysis, kept,
            [&](const SavedActivation &activation,
                uint32_t producerFirstUse) -> uint64_t {
              // Whole segments group by segment; the rest by the first
              // reader of the node's dropped results (offset past every
              // segment number).
              if (isWhole(activation.producer))
                return segmentOf(activation.producer);
              return uint64_t(lastSegment) + 1 + producerFirstUse;
            },
            [&](const SavedActivation &activation,
                const RecomputeRegion &region) {
              // A whole segment is recomputed regardless. Elsewhere a value
              // whose region is priced above its own bytes is kept: the cut
              // prices each node once, but every group that needs a long
              // chain (the residual stream through all earlier layers)
              // clones it again.
              if (isWhole(activation.producer) ||
                  mode == RecomputeMode::Explicit ||
                  forcedDrop.contains(activation.value))
                return true;
              uint64_t price = 0;
              for (uint32_t position : region.nodes)
                price += recomputePrice(analysis, position, tuning);
              return price <= activation.bytes;
            },
            attempt))
      return err;
    return attempt;
  };

  // The cut prices each node once, but a node several groups need (the
  // residual stream's adds and dropouts, read by every later layer's
  // backward) is cloned once per group. So the cut runs again with each
  // node priced by how many groups cloned it, until no node is cloned more
  // often than priced (a few rounds).
  std::vector<uint32_t> multiplicity;
  constexpr unsigned kRepriceRounds = 3;
  for (unsigned round = 0;; ++round) {
    llvm::Expected<RecomputePlan> attempt = attemptPlan(multiplicity);
    if (!attempt)
      return attempt.takeError();
    if (mode == RecomputeMode::Explicit || round == kRepriceRounds)
      return attempt;
    std::vector<uint32_t> clones(forward.size(), 0);
    for (const RecomputePlan::Group &group : attempt->groups)
      for (uint32_t position : group.nodes)
        ++clones[position];
    bool repriced = false;
    if (multiplicity.empty())
      multiplicity.assign(forward.size(), 1);
    for (uint32_t position = 0; position != clones.size(); ++position)
      if (clones[position] > multiplicity[position]) {
        multiplicity[position] = clones[position];
        repriced = true;
      }
    if (!repriced)
      return attempt;
  }
}

void RecomputePlan::print(llvm::raw_ostream &os,
                          const SavedActivations &analysis) const {
  os << "recompute plan: " << groups.size() << " groups, " << dropped
     << " activations dropped\n";
  os << "  saved activation bytes: " << savedBytesBefore << " -> "
     << savedBytesAfter << "\n";
  os << "  recompute flops: " << recomputeFlops << " of " << stepFlops
     << " step flops\n";
  os << "  recompute cost: " << recomputeCost << " of " << stepCost
     << " step flop-equivalents\n";
  if (!boundaries.empty()) {
    os << "  segment boundaries (after forward node: bytes across):";
    for (const auto &[point, bytes] : boundaries)
      os << " " << point << ":" << bytes;
    os << "\n";
  }
  // What stays, by producing op: where the remaining bytes are.
  std::map<std::string, std::pair<uint64_t, uint64_t>> keptByOp;
  for (const Value *value : kept) {
    auto &entry = keptByOp[value->getDefiningNode()->getOp().str()];
    ++entry.first;
    entry.second += analysis.getBytes(value);
  }
  os << "  kept by producing op:";
  for (const auto &[op, entry] : keptByOp)
    os << " " << op << " " << entry.first << "x/" << entry.second;
  os << "\n";
  for (const Group &group : groups) {
    os << "  group before node " << group.placeBefore << ": "
       << group.nodes.size() << " nodes, " << group.flops << " flops, "
       << group.cost << " flop-equivalents, provides";
    for (const Value *value : group.provides)
      os << " " << value->getName();
    os << "\n    clones:";
    for (uint32_t position : group.nodes)
      os << " " << analysis.getForwardNodes()[position]->describe();
    os << "\n";
  }
}

RecomputePlan gmopt::takeMostEfficientGroups(const RecomputePlan &plan,
                                             const SavedActivations &analysis,
                                             size_t count) {
  auto freed = [&](const RecomputePlan::Group &group) {
    uint64_t bytes = 0;
    for (const Value *value : group.provides)
      bytes += analysis.getBytes(value);
    return bytes;
  };
  std::vector<size_t> order(plan.groups.size());
  for (size_t i = 0; i != order.size(); ++i)
    order[i] = i;
  // Most bytes per unit of cost first: a.bytes / a.cost > b.bytes /
  // b.cost, compared without division (the cost is zero for views).
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    const RecomputePlan::Group &ga = plan.groups[a], &gb = plan.groups[b];
    return static_cast<long double>(freed(ga)) * (gb.cost + 1) >
           static_cast<long double>(freed(gb)) * (ga.cost + 1);
  });
  order.resize(std::min(count, order.size()));
  llvm::sort(order);

  RecomputePlan part;
  part.savedBytesBefore = plan.savedBytesBefore;
  part.stepFlops = plan.stepFlops;
  part.stepCost = plan.stepCost;
  part.boundaries = plan.boundaries;
  llvm::DenseSet<const Value *> dropped, kept;
  for (size_t index : order) {
    const RecomputePlan::Group &group = plan.groups[index];
    part.groups.push_back(group);
    part.recomputeFlops += group.flops;
    part.recomputeCost += group.cost;
    part.dropped += group.provides.size();
    dropped.insert(group.provides.begin(), group.provides.end());
  }
  // What stays saved: every saved activation not dropped, and the forward
  // values the clones read (sources of their regions).
  for (const SavedActivation &activation : analysis.getSaved())
    if (!dropped.contains(activation.value))
      kept.insert(activation.value);
  for (const RecomputePlan::Group &group : part.groups) {
    llvm::DenseSet<const Node *> inGroup;
    for (uint32_t position : group.nodes)
      inGroup.insert(analysis.getForwardNodes()[position]);
    for (uint32_t position : group.nodes)
      for (const Value *operand :
           analysis.getForwardNodes()[position]->getOperands())
        if (operand && analysis.isForwardValue(operand) &&
            !inGroup.contains(operand->getDefiningNode()))
          kept.insert(operand);
  }
  setKept(part, analysis, kept);
  return part;
}
