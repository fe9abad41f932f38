//===- Liveness.cpp - Live ranges and storage groups of a schedule --------===//
//
// compute() walks the IR once: it numbers nodes and values, looks every
// op up in the registry, and turns use lists into flat arrays of reader
// indices. analyseOrder() then works on those arrays alone (each value's
// last use is the latest step of its readers), which is what makes
// reschedule() cheap. Storage groups are a union-find forest whose roots
// carry the group's last use, so joining a view or an in-place result is
// near O(1). The live-byte profile is a difference array over steps.
//
//===----------------------------------------------------------------------===//

#include "passes/planning/Liveness.h"

#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/SizeLimits.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;

namespace {

std::string label(const Value *value) {
  if (!value->getName().empty())
    return "%" + value->getName().str();
  if (Node *def = value->getDefiningNode())
    return llvm::formatv("%<result {0} of {1}>", value->getResultIndex(),
                         def->describe())
        .str();
  return "%<unnamed>";
}

} // namespace

llvm::StringRef gmopt::storageClassName(StorageClass storageClass) {
  switch (storageClass) {
  case StorageClass::Constant:
    return "constant";
  case StorageClass::Persistent:
    return "persistent";
  case StorageClass::Transient:
    return "transient";
  }
  llvm_unreachable("unknown storage class");
}

llvm::Expected<Liveness> Liveness::compute(const Module &module,
                                           llvm::ArrayRef<const Node *> order) {
  const Graph &ir = module.getGraph();
  auto info = std::make_shared<GraphInfo>();
  const OpRegistry &registry = OpRegistry::instance();
  // (Graph::getNumNodes() walks the node list, so it is not used here.)
  size_t maxValues = ir.getInputs().size() + ir.getInitializers().size();
  for (const Node &node : ir.getNodes()) {
    info->nodes.push_back(&node);
    maxValues += node.getNumResults();
  }
  const uint32_t numNodes = info->nodes.size();
  info->schemas.reserve(numNodes);
  info->indexOf.reserve(numNodes);
  // One registry lookup per distinct op: the module's opsets are fixed.
  llvm::DenseMap<std::pair<llvm::StringRef, llvm::StringRef>, const OpSchema *>
      schemaOf;
  for (uint32_t index = 0; index != numNodes; ++index) {
    const Node &node = *info->nodes[index];
    info->indexOf[&node] = index;
    auto [it, inserted] =
        schemaOf.try_emplace({node.getDomain(), node.getOpType()}, nullptr);
    if (inserted)
      it->second = registry.lookup(node);
    info->schemas.push_back(it->second);
  }

  std::vector<ValueInfo> &values = info->values;
  values.reserve(maxValues);
  info->idOf.reserve(maxValues);
  llvm::Error error = llvm::Error::success();
  uint64_t totalBytes = 0;
  auto addValue = [&](const Value *value, StorageClass storage, bool pinned,
                      uint32_t defNode) {
    if (error)
      return;
    if (!value->getType().hasStaticShape()) {
      error = llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "cannot plan memory: " + label(value) + " has type " +
              value->getType().str() +
              ", which is not static; bind its dimensions with --dim");
      return;
    }
    // Bounded sizes keep every sum below (live bytes, offsets, peaks) far
    // from overflow: each value is at most kMaxTensorBytes, all of them
    // together at most kMaxTotalBytes.
    // (The label is built only for the message.)
    if (!fitsSizeLimit(value->getType())) {
      error = checkTensorSize(value->getType(),
                              "cannot plan memory: " + label(value));
      return;
    }
    ValueInfo entry;
    entry.value = value;
    entry.storage = storage;
    entry.pinned = pinned;
    entry.bytes = value->getType().getSizeInBytes();
    entry.space = getMemorySpace(*value);
    if (llvm::Error err = addToPlanTotal(totalBytes, entry.bytes)) {
      error = std::move(err);
      return;
    }
    entry.defNode = defNode;
    ValueId id = values.size();
    entry.viewSource = id;
    info->idOf[value] = id;
    values.push_back(entry);
  };
  for (const auto &input : ir.getInputs())
    addValue(input.get(), StorageClass::Persistent, false, kNoNode);
  for (const auto &init : ir.getInitializers())
    addValue(init.get(), StorageClass::Constant, false, kNoNode);
  for (uint32_t index = 0; index != numNodes; ++index) {
    const Node &node = *info->nodes[index];
    const OpSchema *schema = info->schemas[index];
    // A copy writes plain storage that its wait's result shares (the
    // copies are side effects only so that no pass drops or merges them).
    bool pinned =
        schema && schema->hasTrait(TraitSideEffect) && !isCopyOp(node);
    for (unsigned i = 0, n = node.getNumResults(); i != n; ++i)
      if (const Value *result = node.getResult(i))
        addValue(result, StorageClass::Transient, pinned, index);
  }
  if (error)
    return error;
  // Graph outputs live to the end; a node result that is one is
  // persistent.
  for (unsigned i = 0, e = ir.getNumOutputs(); i != e; ++i)
    if (const Value *output = ir.getOutput(i)) {
      ValueInfo &entry = values[info->idOf.lookup(output)];
      entry.output = true;
      if (entry.storage == StorageClass::Transient)
        entry.storage = StorageClass::Persistent;
    }

  // Operands as value ids, and their transpose: the readers of each value
  // (a counting sort, so no use list is walked and nothing is hashed).
  info->operandBegin.reserve(numNodes + 1);
  std::vector<uint32_t> readerCount(values.size() + 1, 0);
  for (uint32_t index = 0; index != numNodes; ++index) {
    info->operandBegin.push_back(info->operands.size());
    const Node &node = *info->nodes[index];
    for (unsigned k = 0, e = node.getNumOperands(); k != e; ++k) {
      const Value *operand = node.getOperand(k);
      ValueId id = operand ? info->idOf.lookup(operand) : kNoValue;
      info->operands.push_back(id);
      if (id != kNoValue)
        ++readerCount[id];
    }
  }
  info->operandBegin.push_back(info->operands.size());
  uint32_t offset = 0;
  for (ValueId id = 0, e = values.size(); id != e; ++id) {
    values[id].usersBegin = values[id].usersEnd = offset;
    offset += readerCount[id];
  }
  info->users.resize(offset);
  for (uint32_t index = 0; index != numNodes; ++index)
    for (uint32_t k = info->operandBegin[index],
                  e = info->operandBegin[index + 1];
         k != e; ++k)
      if (ValueId id = info->operands[k]; id != kNoValue)
        info->users[values[id].usersEnd++] = index;

  // Views share their source's group. Graph order is topological, so a
  // chain of views is linked source first.
  auto viewRoot = [&](ValueId id) {
    while (values[id].viewSource != id)
      id = values[id].viewSource;
    return id;
  };
  for (uint32_t index = 0; index != numNodes; ++index) {
    const Node &node = *info->nodes[index];
    if (!getViewSource(node))
      continue;
    ValueId view = info->idOf.lookup(node.getResult(0));
    ValueId source = info->idOf.lookup(node.getOperand(0));
    ValueInfo &entry = values[view];
    if (entry.storage != StorageClass::Transient || entry.pinned ||
        values[viewRoot(source)].pinned ||
        entry.bytes != values[source].bytes ||
        entry.space != values[source].space)
      continue;
    entry.viewSource = source;
  }

  Liveness liveness;
  liveness.graph = std::move(info);
  liveness.indexOfStep.reserve(numNodes);
  if (order.empty()) {
    for (uint32_t index = 0; index != numNodes; ++index)
      liveness.indexOfStep.push_back(index);
  } else {
    assert(order.size() == numNodes && "a schedule must list every node once");
    for (const Node *node : order)
      liveness.indexOfStep.push_back(liveness.graph->indexOf.lookup(node));
  }
  liveness.analyseOrder();
  return liveness;
}

Liveness Liveness::reschedule(llvm::ArrayRef<uint32_t> order) const {
  assert(order.size() == indexOfStep.size() &&
         "a schedule must list every node once");
  Liveness other;
  other.graph = graph;
  other.workspace = workspace;
  other.indexOfStep.assign(order.begin(), order.end());
  other.analyseOrder();
  return other;
}

void Liveness::analyseOrder() {
  const GraphInfo &info = *graph;
  const uint32_t numSteps = indexOfStep.size();
  const uint32_t lastStep = numSteps ? numSteps - 1 : 0;
  stepOfIndex.assign(numSteps, kNoNode);
  for (uint32_t step = 0; step != numSteps; ++step) {
    assert(stepOfIndex[indexOfStep[step]] == kNoNode &&
           "a schedule must not repeat a node");
    stepOfIndex[indexOfStep[step]] = step;
  }

  const uint32_t numValues = info.values.size();
  state.assign(numValues, ValueState());
  for (ValueId id = 0; id != numValues; ++id) {
    const ValueInfo &entry = info.values[id];
    ValueState &value = state[id];
    value.defStep = entry.defNode == kNoNode ? 0 : stepOfIndex[entry.defNode];
    value.lastUse = entry.output ? lastStep : value.defStep;
    for (uint32_t i = entry.usersBegin; i != entry.usersEnd; ++i)
      value.lastUse = std::max(value.lastUse, stepOfIndex[info.users[i]]);
    assert(value.lastUse >= value.defStep && "the schedule is not topological");
    value.aliasSource = entry.viewSource;
    value.parent = entry.viewSource;
    value.groupLastUse = value.lastUse;
  }
  // A view keeps its group's storage alive until the view's last use.
  for (ValueId id = 0; id != numValues; ++id)
    if (state[id].parent != id) {
      ValueId owner = getOwner(id);
      state[owner].groupLastUse =
          std::max(state[owner].groupLastUse, state[id].lastUse);
    }
}

uint32_t Liveness::getStep(const Node *node) const {
  auto it = graph->indexOf.find(node);
  assert(it != graph->indexOf.end() && "node is not in this graph");
  return stepOfIndex[it->second];
}

llvm::ArrayRef<Liveness::ValueId> Liveness::getOperands(uint32_t step) const {
  uint32_t index = indexOfStep[step];
  return llvm::ArrayRef<ValueId>(graph->operands)
      .slice(graph->operandBegin[index],
             graph->operandBegin[index + 1] - graph->operandBegin[index]);
}

std::optional<Liveness::ValueId> Liveness::lookup(const Value *value) const {
  auto it = graph->idOf.find(value);
  if (it == graph->idOf.end())
    return std::nullopt;
  return it->second;
}

Liveness::ValueId Liveness::getOwner(ValueId id) const {
  ValueId root = id;
  while (state[root].parent != root)
    root = state[root].parent;
  while (state[id].parent != root) {
    ValueId next = state[id].parent;
    state[id].parent = root;
    id = next;
  }
  return root;
}

LiveInterval Liveness::getStorageInterval(ValueId owner) const {
  assert(getOwner(owner) == owner && "storage intervals belong to owners");
  return {state[owner].defStep, state[owner].groupLastUse};
}

void Liveness::shareStorage(ValueId value, ValueId source) {
  ValueId owner = getOwner(source);
  assert(getOwner(value) == value && "only a group owner can join a group");
  assert(value != owner && "a group cannot join itself");
  assert(getStorageClass(value) == StorageClass::Transient &&
         getStorageClass(owner) == StorageClass::Transient &&
         "only transient storage is shared in place");
  state[value].aliasSource = source;
  state[value].parent = owner;
  state[owner].groupLastUse =
      std::max(state[owner].groupLastUse, state[value].groupLastUse);
}

std::vector<uint64_t> Liveness::computeLiveBytes() const {
  const uint32_t numSteps = getNumSteps();
  std::vector<int64_t> delta(numSteps + 1, 0);
  for (ValueId id = 0, e = getNumValues(); id != e; ++id) {
    if (!isArenaOwner(id) || !getBytes(id) ||
        getSpace(id) != MemorySpace::Device)
      continue;
    LiveInterval interval = getStorageInterval(id);
    int64_t bytes = alignBuffer(getBytes(id));
    delta[interval.firstStep] += bytes;
    delta[interval.lastStep + 1] -= bytes;
  }
  std::vector<uint64_t> live(numSteps, 0);
  int64_t running = 0;
  for (uint32_t step = 0; step != numSteps; ++step) {
    running += delta[step];
    live[step] = running + getWorkspaceBytes(step);
  }
  return live;
}

void Liveness::setWorkspace(const WorkspaceModel &model) {
  if (!model) {
    workspace.reset();
    return;
  }
  auto bytes = std::make_shared<std::vector<uint64_t>>(graph->nodes.size());
  for (size_t i = 0, e = graph->nodes.size(); i != e; ++i)
    (*bytes)[i] = alignBuffer(model(*graph->nodes[i]));
  workspace = std::move(bytes);
}

LivePeak Liveness::computePeak() const {
  LivePeak peak;
  std::vector<uint64_t> live = computeLiveBytes();
  for (uint32_t step = 0, e = live.size(); step != e; ++step)
    if (live[step] > peak.bytes) {
      peak.bytes = live[step];
      peak.step = step;
    }
  return peak;
}

void Liveness::print(llvm::raw_ostream &os) const {
  os << "liveness {\n";
  for (ValueId id = 0, e = getNumValues(); id != e; ++id) {
    const ValueState &value = state[id];
    os << "  " << label(getValue(id)) << " "
       << storageClassName(getStorageClass(id))
       << (isPinned(id) ? " pinned" : "")
       << (getSpace(id) == MemorySpace::Host ? " host" : "") << " size "
       << getBytes(id) << " steps " << value.defStep << ".." << value.lastUse;
    if (value.aliasSource != id)
      os << " shares " << label(getValue(value.aliasSource))
         << (isView(id) ? " (view)" : " (in-place)");
    else if (isArenaOwner(id))
      os << " storage " << value.defStep << ".." << value.groupLastUse;
    os << "\n";
  }
  LivePeak peak = computePeak();
  os << "  peak " << peak.bytes << " at step " << peak.step;
  if (peak.step < getNumSteps())
    os << " (" << getNode(peak.step)->describe() << ")";
  os << "\n}\n";
}
