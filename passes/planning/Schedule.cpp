//===- Schedule.cpp - Memory-aware topological order ----------------------===//
//
// Every candidate order is built over node indices of one DependenceGraph
// and judged by evaluateScheduleLoad, which runs the very Liveness and
// in-place code plan-buffers runs, so the LOAD the pass minimises is the
// LOAD the plan reports. The list scheduler keeps, per transient storage
// group, the number and the index sum of its unscheduled readers: when one
// reader is left, the sum names it, and that node's priority rises by the
// group's bytes - O((nodes + edges) log nodes) in all.
//
//===----------------------------------------------------------------------===//

#include "passes/planning/Schedule.h"
#include "passes/DebugOutput.h"
#include "passes/planning/InPlace.h"
#include "passes/planning/Liveness.h"

#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/SizeLimits.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <set>

#define DEBUG_TYPE "gmopt-schedule"

using namespace gmopt;

//===----------------------------------------------------------------------===//
// DependenceGraph
//===----------------------------------------------------------------------===//

DependenceGraph DependenceGraph::build(const Liveness &liveness,
                                       bool keepSideEffectOrder) {
  using ValueId = Liveness::ValueId;
  DependenceGraph graph;
  const uint32_t numNodes = liveness.getNumSteps();
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  auto addEdge = [&](uint32_t from, uint32_t to) {
    assert(from < to && "constraints follow the order the graph was built in");
    edges.push_back({from, to});
  };

  // Data edges, operands in order (the depth-first order relies on it).
  std::vector<bool> sideEffect(numNodes, false);
  // The storage behind each value: views traced to the value they view.
  std::vector<ValueId> root(liveness.getNumValues());
  for (ValueId id = 0, e = root.size(); id != e; ++id)
    root[id] = id;
  graph.nodes.reserve(numNodes);
  for (uint32_t i = 0; i != numNodes; ++i) {
    assert(liveness.getNodeIndex(i) == i && "liveness of another order");
    const Node &node = *liveness.getNode(i);
    graph.nodes.push_back(&node);
    const OpSchema *schema = liveness.getSchema(i);
    sideEffect[i] = schema && schema->hasTrait(TraitSideEffect);
    llvm::ArrayRef<ValueId> operands = liveness.getOperands(i);
    for (ValueId operand : operands)
      if (operand != Liveness::kNoValue) {
        uint32_t def = liveness.getDefNodeIndex(operand);
        if (def != Liveness::kNoNode)
          addEdge(def, i);
      }
    if (getViewSource(node) && !operands.empty() &&
        operands[0] != Liveness::kNoValue)
      root[*liveness.lookup(node.getResult(0))] = root[operands[0]];
  }

  // Recompute clones stay where the recompute pass put them, in the
  // backward region: each runs after the nearest node before it that is not
  // a clone itself (an anchor edge). Data edges alone would let a scheduler
  // hoist a clone up to its forward operands, bringing back the live range
  // the clone was made to end.
  {
    std::optional<uint32_t> anchor;
    for (uint32_t i = 0; i != numNodes; ++i) {
      if (graph.nodes[i]->getPhase() != Phase::Recompute)
        anchor = i;
      else if (anchor)
        addEdge(*anchor, i);
    }
  }

  if (keepSideEffectOrder) {
    std::optional<uint32_t> previous;
    for (uint32_t i = 0; i != numNodes; ++i) {
      if (!sideEffect[i])
        continue;
      if (previous)
        addEdge(*previous, i);
      previous = i;
    }
  }

  // The storage each node writes, and every storage anything writes.
  llvm::DenseMap<uint32_t, llvm::SmallVector<ValueId, 1>> writes;
  std::vector<bool> written(liveness.getNumValues(), false);
  for (uint32_t i = 0; i != numNodes; ++i) {
    if (!sideEffect[i])
      continue;
    llvm::ArrayRef<ValueId> operands = liveness.getOperands(i);
    for (unsigned k :
         getWrittenOperands(*graph.nodes[i], liveness.getSchema(i)))
      if (operands[k] != Liveness::kNoValue) {
        writes[i].push_back(root[operands[k]]);
        written[root[operands[k]]] = true;
      }
  }

  // Per written storage, its accesses in order: each write stays after the
  // previous write and every read since, each read after the last write.
  struct AccessState {
    std::optional<uint32_t> lastWrite;
    std::vector<uint32_t> readsSinceWrite;
  };
  llvm::DenseMap<ValueId, AccessState> states;
  if (!writes.empty()) {
    // Sorted, so that membership is a binary search: one node (the merged
    // optimizer) can write every parameter and optimizer state.
    for (auto &[node, storages] : writes)
      llvm::sort(storages);
    // The node that last listed each storage among its roots (each root
    // once per node, in O(1), however many operands the node has).
    std::vector<uint32_t> listedBy(liveness.getNumValues(), numNodes);
    for (uint32_t i = 0; i != numNodes; ++i) {
      llvm::SmallVector<ValueId, 4> roots;
      for (ValueId operand : liveness.getOperands(i))
        if (operand != Liveness::kNoValue && written[root[operand]] &&
            listedBy[root[operand]] != i) {
          listedBy[root[operand]] = i;
          roots.push_back(root[operand]);
        }
      auto nodeWrites = writes.find(i);
      for (ValueId storage : roots) {
        AccessState &state = states[storage];
        if (state.lastWrite && *state.lastWrite != i)
          addEdge(*state.lastWrite, i);
        if (nodeWrites != writes.end() &&
            std::binary_search(nodeWrites->second.begin(),
                               nodeWrites->second.end(), storage)) {
          for (uint32_t reader : state.readsSinceWrite)
            addEdge(reader, i);
          state.readsSinceWrite.clear();
          state.lastWrite = i;
        } else {
          state.readsSinceWrite.push_back(i);
        }
      }
    }
  }

  // Compressed adjacency (a counting sort of the edges both ways).
  auto compress = [&](bool forward, std::vector<uint32_t> &begin,
                      std::vector<uint32_t> &targets) {
    begin.assign(numNodes + 1, 0);
    for (const auto &[from, to] : edges)
      ++begin[(forward ? from : to) + 1];
    for (uint32_t i = 0; i != numNodes; ++i)
      begin[i + 1] += begin[i];
    targets.resize(edges.size());
    std::vector<uint32_t> next(begin.begin(), begin.end() - 1);
    for (const auto &[from, to] : edges)
      targets[next[forward ? from : to]++] = forward ? to : from;
  };
  compress(true, graph.succBegin, graph.succs);
  compress(false, graph.predBegin, graph.preds);
  return graph;
}

bool DependenceGraph::isValidOrder(llvm::ArrayRef<uint32_t> order) const {
  if (order.size() != nodes.size())
    return false;
  std::vector<uint32_t> position(nodes.size(), UINT32_MAX);
  for (uint32_t pos = 0, e = order.size(); pos != e; ++pos) {
    if (order[pos] >= nodes.size() || position[order[pos]] != UINT32_MAX)
      return false;
    position[order[pos]] = pos;
  }
  for (uint32_t node = 0, e = nodes.size(); node != e; ++node)
    for (uint32_t succ : getSuccessors(node))
      if (position[node] >= position[succ])
        return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Candidate orders
//===----------------------------------------------------------------------===//

unsigned gmopt::countOverlappedCollectives(const DependenceGraph &graph,
                                           llvm::ArrayRef<uint32_t> order) {
  llvm::DenseMap<const Node *, size_t> position;
  for (size_t k = 0, e = order.size(); k != e; ++k)
    position[graph.getNode(order[k])] = k;
  unsigned overlapped = 0;
  for (uint32_t index : order) {
    const Node &wait = *graph.getNode(index);
    if (!wait.isa(kGmoptDomain, kAllReduceWaitOp) || !wait.getOperand(0))
      continue;
    const Node *start = wait.getOperand(0)->getDefiningNode();
    auto at = start ? position.find(start) : position.end();
    if (at != position.end() && position.lookup(&wait) > at->second + 1)
      ++overlapped;
  }
  return overlapped;
}

std::vector<uint32_t> gmopt::scheduleDepthFirst(const DependenceGraph &graph) {
  const uint32_t numNodes = graph.size();
  std::vector<uint32_t> order;
  order.reserve(numNodes);
  std::vector<bool> visited(numNodes, false);
  // (node, next predecessor to visit); iterative, since chains of 100,000
  // nodes would overflow the call stack.
  std::vector<std::pair<uint32_t, uint32_t>> stack;
  for (uint32_t sink = 0; sink != numNodes; ++sink) {
    if (!graph.getSuccessors(sink).empty() || visited[sink])
      continue;
    visited[sink] = true;
    stack.push_back({sink, 0});
    while (!stack.empty()) {
      auto &[node, next] = stack.back();
      llvm::ArrayRef<uint32_t> preds = graph.getPredecessors(node);
      if (next < preds.size()) {
        uint32_t pred = preds[next++];
        if (!visited[pred]) {
          visited[pred] = true;
          stack.push_back({pred, 0});
        }
        continue;
      }
      order.push_back(node);
      stack.pop_back();
    }
  }
  assert(order.size() == numNodes && "every node reaches a sink");
  return order;
}

std::vector<uint32_t> gmopt::scheduleByFreedBytes(const Liveness &liveness,
                                                  const DependenceGraph &graph,
                                                  ListPriority priority) {
  using ValueId = Liveness::ValueId;
  const uint32_t numNodes = graph.size();
  assert(liveness.getNumSteps() == numNodes &&
         "the dependence graph and the liveness disagree");

  // The transient storage groups each node reads, and what it allocates.
  // Node index i is step i of a liveness of the current order.
  std::vector<llvm::SmallVector<ValueId, 4>> groupsRead(numNodes);
  std::vector<int64_t> allocated(numNodes, 0), freed(numNodes, 0);
  std::vector<std::pair<uint32_t, uint64_t>> readers(liveness.getNumValues(),
                                                     {0, 0});
  auto groupBytes = [&](ValueId owner) -> int64_t {
    return alignBuffer(liveness.getBytes(owner));
  };
  // The node that last recorded each group (each group once per node, in
  // O(1), however many operands the node has).
  std::vector<uint32_t> recordedBy(liveness.getNumValues(), numNodes);
  for (uint32_t i = 0; i != numNodes; ++i) {
    assert(liveness.getNodeIndex(i) == i && "liveness of another order");
    for (ValueId operand : liveness.getOperands(i)) {
      if (operand == Liveness::kNoValue)
        continue;
      ValueId owner = liveness.getOwner(operand);
      if (!liveness.isArenaOwner(owner) || recordedBy[owner] == i)
        continue;
      recordedBy[owner] = i;
      groupsRead[i].push_back(owner);
      ++readers[owner].first;
      readers[owner].second += i;
    }
    const Node &node = *graph.getNode(i);
    for (unsigned k = 0, e = node.getNumResults(); k != e; ++k)
      if (const Value *result = node.getResult(k)) {
        ValueId id = *liveness.lookup(result);
        if (liveness.isArenaOwner(id))
          allocated[i] += groupBytes(id);
      }
  }
  for (ValueId owner = 0, e = readers.size(); owner != e; ++owner)
    if (readers[owner].first == 1)
      freed[readers[owner].second] += groupBytes(owner);

  // A split collective overlaps the nodes between its start and its wait:
  // starts go first and waits last among the ready nodes, whatever memory
  // they free (the order's LOAD still decides between candidate orders).
  std::vector<int64_t> overlapBias(numNodes, 0);
  constexpr int64_t kOverlapBias = int64_t(1) << 60;
  for (uint32_t i = 0; i != numNodes; ++i) {
    const Node &node = *graph.getNode(i);
    if (node.isa(kGmoptDomain, kAllReduceStartOp))
      overlapBias[i] = kOverlapBias;
    else if (node.isa(kGmoptDomain, kAllReduceWaitOp))
      overlapBias[i] = -kOverlapBias;
  }
  auto score = [&](uint32_t node) -> int64_t {
    return overlapBias[node] + (priority == ListPriority::NetFreedBytes
                                    ? freed[node] - allocated[node]
                                    : freed[node]);
  };
  // Highest score first, then the earliest index.
  std::set<std::pair<int64_t, uint32_t>> ready;
  std::vector<uint32_t> pending(numNodes);
  std::vector<bool> isReady(numNodes, false);
  for (uint32_t i = 0; i != numNodes; ++i) {
    pending[i] = graph.getPredecessors(i).size();
    if (!pending[i]) {
      ready.insert({-score(i), i});
      isReady[i] = true;
    }
  }
  std::vector<uint32_t> order;
  order.reserve(numNodes);
  while (!ready.empty()) {
    uint32_t node = ready.begin()->second;
    ready.erase(ready.begin());
    isReady[node] = false;
    order.push_back(node);
    for (ValueId owner : groupsRead[node]) {
      auto &[count, indexSum] = readers[owner];
      --count;
      indexSum -= node;
      if (count != 1)
        continue;
      uint32_t last = indexSum;
      if (isReady[last])
        ready.erase({-score(last), last});
      freed[last] += groupBytes(owner);
      if (isReady[last])
        ready.insert({-score(last), last});
    }
    for (uint32_t succ : graph.getSuccessors(node))
      if (--pending[succ] == 0) {
        ready.insert({-score(succ), succ});
        isReady[succ] = true;
      }
  }
  assert(order.size() == numNodes && "the dependence graph has a cycle");
  return order;
}

uint64_t gmopt::evaluateScheduleLoad(const Liveness &liveness,
                                     llvm::ArrayRef<uint32_t> order,
                                     bool inPlace) {
  Liveness scheduled = liveness.reschedule(order);
  if (inPlace)
    applyInPlaceReuse(scheduled);
  return scheduled.computePeak().bytes;
}

//===----------------------------------------------------------------------===//
// SchedulePass
//===----------------------------------------------------------------------===//

SchedulePass::SchedulePass() : SchedulePass(Options()) {}

SchedulePass::SchedulePass(Options initial) : options(initial) {
  declareOption("dfs", options.dfs, "try the depth-first order");
  declareOption("list", options.list,
                "try the list schedulers that prefer freeing bytes");
  declareOption("in-place", options.inPlace,
                "judge orders with in-place reuse, as plan-buffers will");
  declareOption("keep-side-effect-order", options.keepSideEffectOrder,
                "keep every side-effecting op in its relative order (else "
                "only those on the same storage)");
  declareStatistic("load-before", "LOAD of the input order (bytes)");
  declareStatistic("load-after", "LOAD of the chosen order (bytes)");
  declareStatistic("orders-tried", "Candidate orders evaluated");
}

llvm::Expected<bool> SchedulePass::run(Module &module, PassContext &context) {
  auto liveness = Liveness::compute(module);
  if (!liveness)
    return liveness.takeError();
  // Judge orders by the LOAD plan-buffers will see, kernel scratch included.
  if (llvm::Error err =
          checkWorkspaceSizes(module, context.getWorkspaceModel()))
    return err;
  liveness->setWorkspace(context.getWorkspaceModel());
  DependenceGraph graph =
      DependenceGraph::build(*liveness, options.keepSideEffectOrder);
  const uint32_t numNodes = graph.size();

  struct Candidate {
    llvm::StringRef name;
    std::vector<uint32_t> order;
  };
  std::vector<Candidate> candidates;
  std::vector<uint32_t> inputOrder(numNodes);
  for (uint32_t i = 0; i != numNodes; ++i)
    inputOrder[i] = i;
  candidates.push_back({"input", std::move(inputOrder)});
  if (options.dfs)
    candidates.push_back({"depth-first", scheduleDepthFirst(graph)});
  if (options.list) {
    for (auto [name, priority] :
         {std::pair{llvm::StringRef("list-net-freed"),
                    ListPriority::NetFreedBytes},
          std::pair{llvm::StringRef("list-freed"), ListPriority::FreedBytes}}) {
      candidates.push_back(
          {name, scheduleByFreedBytes(*liveness, graph, priority)});
    }
  }

  size_t best = 0;
  uint64_t inputLoad = 0, bestLoad = 0;
  unsigned inputOverlapped = 0;
  for (size_t i = 0; i != candidates.size(); ++i) {
    assert(graph.isValidOrder(candidates[i].order) &&
           "a candidate schedule breaks a dependence");
    // An order that serialises a split collective the input overlapped
    // (its wait right after its start) is no candidate, however little
    // memory it needs: the data-parallel pass traded that memory for time.
    unsigned overlapped =
        countOverlappedCollectives(graph, candidates[i].order);
    if (i == 0)
      inputOverlapped = overlapped;
    else if (overlapped < inputOverlapped) {
      GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] " << candidates[i].name
                         << ": overlaps " << overlapped << " of "
                         << inputOverlapped << " collectives, skipped\n");
      continue;
    }
    uint64_t load =
        evaluateScheduleLoad(*liveness, candidates[i].order, options.inPlace);
    GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] " << candidates[i].name << ": LOAD "
                       << load << "\n");
    if (i == 0) {
      inputLoad = bestLoad = load;
    } else if (load < bestLoad) {
      bestLoad = load;
      best = i;
    }
  }
  GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] keeping the " << candidates[best].name
                     << " order\n");
  addStatistic(context, "load-before", inputLoad);
  addStatistic(context, "load-after", bestLoad);
  addStatistic(context, "orders-tried", candidates.size());
  if (best == 0)
    return false;

  // Apply: move every node to the end, in the chosen order.
  std::vector<Node *> nodes;
  nodes.reserve(numNodes);
  Graph &ir = module.getGraph();
  for (Node &node : ir.getNodes())
    nodes.push_back(&node);
  for (uint32_t index : candidates[best].order)
    ir.moveNode(nodes[index], ir.end());
  return true;
}
