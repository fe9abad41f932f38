//===- IR.cpp - Values, nodes and graphs ----------------------------------===//
//
// Use-list maintenance, node creation/erasure/cloning and the Builder. Every
// mutation keeps use lists exact: an OpOperand is linked onto its value's
// list whenever it points at a value, and unlinked when it is destroyed or
// re-pointed, so replaceAllUsesWith and erasure never scan the graph.
//
//===----------------------------------------------------------------------===//

#include "ir/IR.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cassert>

using namespace gmopt;

//===----------------------------------------------------------------------===//
// OpOperand and Value
//===----------------------------------------------------------------------===//

void OpOperand::link(Value *v) {
  assert(!value && "linking an operand that is already linked");
  value = v;
  if (!v)
    return;
  nextUse = v->firstUse;
  if (nextUse)
    nextUse->prevNext = &nextUse;
  prevNext = &v->firstUse;
  v->firstUse = this;
}

void OpOperand::unlink() {
  if (!value)
    return;
  *prevNext = nextUse;
  if (nextUse)
    nextUse->prevNext = prevNext;
  value = nullptr;
  nextUse = nullptr;
  prevNext = nullptr;
}

void OpOperand::set(Value *newValue) {
  if (newValue == value)
    return;
  unlink();
  link(newValue);
}

unsigned Value::getNumUses() const {
  unsigned count = 0;
  for (OpOperand *use = firstUse; use; use = use->getNextUse())
    ++count;
  return count;
}

llvm::SmallVector<Node *, 4> Value::getUsers() const {
  llvm::SmallVector<Node *, 4> users;
  llvm::SmallPtrSet<Node *, 8> seen;
  for (OpOperand &use : getUses())
    if (Node *owner = use.getOwner())
      if (seen.insert(owner).second)
        users.push_back(owner);
  return users;
}

bool Value::isGraphOutput() const {
  for (OpOperand &use : getUses())
    if (use.isGraphOutput())
      return true;
  return false;
}

void Value::replaceAllUsesWith(Value *replacement) {
  assert(replacement != this && "replacing a value with itself");
  while (firstUse)
    firstUse->set(replacement);
}

llvm::StringRef gmopt::phaseName(Phase phase) {
  switch (phase) {
  case Phase::Forward:
    return "forward";
  case Phase::Backward:
    return "backward";
  case Phase::Optimizer:
    return "optimizer";
  case Phase::Recompute:
    return "recompute";
  }
  llvm_unreachable("unknown phase");
}

std::optional<Phase> gmopt::parsePhaseName(llvm::StringRef name) {
  for (Phase phase :
       {Phase::Forward, Phase::Backward, Phase::Optimizer, Phase::Recompute})
    if (phaseName(phase) == name)
      return phase;
  return std::nullopt;
}

uint64_t gmopt::computeStreamId(llvm::StringRef nodeName, uint64_t position) {
  uint64_t hash = 14695981039346656037ull;
  auto mix = [&](uint8_t byte) {
    hash ^= byte;
    hash *= 1099511628211ull;
  };
  for (char c : nodeName)
    mix(static_cast<uint8_t>(c));
  for (unsigned i = 0; i != 8; ++i)
    mix(static_cast<uint8_t>(position >> (8 * i)));
  return hash;
}

void gmopt::assignMissingStreamIds(Graph &graph) {
  llvm::DenseSet<uint64_t> used;
  for (const Node &node : graph.getNodes())
    if (std::optional<uint64_t> id = node.getStreamId())
      used.insert(*id);
  uint64_t position = 0;
  for (Node &node : graph.getNodes()) {
    uint64_t here = position++;
    if (node.getStreamId())
      continue;
    const OpSchema *schema = OpRegistry::instance().lookup(node);
    if (!schema || !schema->hasTrait(TraitRandom))
      continue;
    uint64_t id = computeStreamId(node.getName(), here);
    while (!used.insert(id).second)
      ++id;
    node.setStreamId(id);
  }
}

std::string OpName::str() const {
  if (domain.empty())
    return type;
  return domain + "." + type;
}

//===----------------------------------------------------------------------===//
// Node
//===----------------------------------------------------------------------===//

Node::Node(Graph *graph, OpName op, std::string name)
    : graph(graph), op(std::move(op)), name(std::move(name)) {}

Node::~Node() {
  // Operands unlink themselves as the array is destroyed; results must be
  // dead by now (Graph::eraseNode checks, ~Value asserts).
  operands.reset();
  results.clear();
}

void Node::allocateOperands(unsigned count) {
  operands.reset(count ? new OpOperand[count] : nullptr);
  numOperands = count;
  for (unsigned i = 0; i != count; ++i) {
    operands[i].owner = this;
    operands[i].index = i;
  }
}

int64_t Node::getOpsetVersion() const {
  if (!graph || !graph->getModule())
    return 0;
  return graph->getModule()->getOpsetVersion(op.domain);
}

llvm::SmallVector<Value *, 4> Node::getOperands() const {
  llvm::SmallVector<Value *, 4> values;
  for (unsigned i = 0; i != numOperands; ++i)
    values.push_back(operands[i].get());
  return values;
}

void Node::setOperands(llvm::ArrayRef<Value *> newOperands) {
  // Copy first: newOperands may alias our own operand values.
  llvm::SmallVector<Value *, 4> values(newOperands.begin(), newOperands.end());
  allocateOperands(values.size());
  for (unsigned i = 0, e = values.size(); i != e; ++i)
    operands[i].set(values[i]);
}

llvm::SmallVector<Value *, 2> Node::getResults() const {
  llvm::SmallVector<Value *, 2> values;
  for (const auto &result : results)
    values.push_back(result.get());
  return values;
}

bool Node::resultsUnused() const {
  for (const auto &result : results)
    if (result && !result->useEmpty())
      return false;
  return true;
}

const Attribute *Node::getAttr(llvm::StringRef attrName) const {
  for (const NamedAttribute &attr : attrs)
    if (attr.name == attrName)
      return &attr.value;
  return nullptr;
}

void Node::setAttr(llvm::StringRef attrName, Attribute value) {
  for (NamedAttribute &attr : attrs) {
    if (attr.name == attrName) {
      attr.value = std::move(value);
      return;
    }
  }
  attrs.push_back({attrName.str(), std::move(value)});
}

bool Node::removeAttr(llvm::StringRef attrName) {
  auto it = llvm::find_if(
      attrs, [&](const NamedAttribute &attr) { return attr.name == attrName; });
  if (it == attrs.end())
    return false;
  attrs.erase(it);
  return true;
}

int64_t Node::getIntAttr(llvm::StringRef attrName, int64_t defaultValue) const {
  const Attribute *attr = getAttr(attrName);
  if (!attr || attr->getKind() != Attribute::Kind::Int)
    return defaultValue;
  return attr->getInt();
}

float Node::getFloatAttr(llvm::StringRef attrName, float defaultValue) const {
  const Attribute *attr = getAttr(attrName);
  if (!attr || attr->getKind() != Attribute::Kind::Float)
    return defaultValue;
  return attr->getFloat();
}

llvm::StringRef Node::getStringAttr(llvm::StringRef attrName,
                                    llvm::StringRef defaultValue) const {
  const Attribute *attr = getAttr(attrName);
  if (!attr || attr->getKind() != Attribute::Kind::String)
    return defaultValue;
  return attr->getString();
}

std::vector<int64_t>
Node::getIntsAttr(llvm::StringRef attrName,
                  llvm::ArrayRef<int64_t> defaultValue) const {
  const Attribute *attr = getAttr(attrName);
  if (!attr || attr->getKind() != Attribute::Kind::Ints)
    return std::vector<int64_t>(defaultValue.begin(), defaultValue.end());
  return attr->getInts();
}

std::string Node::describe() const {
  if (!name.empty())
    return name;
  return op.str();
}

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

Graph::~Graph() {
  // Drop every use before any value dies, so destruction order is free.
  outputs.clear();
  for (Node &node : nodes)
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i)
      node.setOperand(i, nullptr);
  nodes.clear();
  inputs.clear();
  initializers.clear();
}

Node *Graph::createNode(iterator before, OpName op,
                        llvm::ArrayRef<Value *> operandValues,
                        unsigned numResults, std::string nodeName) {
  Node *node = new Node(this, std::move(op), std::move(nodeName));
  node->allocateOperands(operandValues.size());
  for (unsigned i = 0, e = operandValues.size(); i != e; ++i)
    node->operands[i].set(operandValues[i]);
  for (unsigned i = 0; i != numResults; ++i)
    ensureResult(node, i);
  nodes.insert(before, node);
  return node;
}

[[maybe_unused]] static bool isInSignature(const Graph &graph,
                                           const Value *value);

void Graph::dropResult(Node *node, unsigned i) {
  assert(i < node->results.size() && "result index out of range");
  assert((!node->results[i] || node->results[i]->useEmpty()) &&
         "dropping a result that still has uses");
  assert(!isInSignature(*this, node->results[i].get()) &&
         "dropping a result the training signature refers to");
  node->results[i].reset();
}

Value *Graph::ensureResult(Node *node, unsigned i) {
  if (node->results.size() <= i)
    node->results.resize(i + 1);
  if (!node->results[i]) {
    node->results[i].reset(
        new Value(this, Value::Kind::Result, TensorType(), ""));
    node->results[i]->definingNode = node;
    node->results[i]->resultIndex = i;
  }
  return node->results[i].get();
}

/// True if \p graph's module signature names \p value (checked by the
/// debug assertions of erasure: a signature entry must never dangle).
[[maybe_unused]] static bool isInSignature(const Graph &graph,
                                           const Value *value) {
  return graph.getModule() &&
         graph.getModule()->getSignature().references(value);
}

void Graph::eraseNode(Node *node) {
  assert(node->getGraph() == this && "erasing a node of another graph");
  assert(node->resultsUnused() && "erasing a node whose results are used");
  assert(!(module && module->getSignature().references(node)) &&
         "erasing a node the training signature refers to");
  assert(llvm::none_of(node->getResults(),
                       [&](const Value *result) {
                         return isInSignature(*this, result);
                       }) &&
         "erasing a node whose result the training signature refers to");
  nodes.erase(node->getIterator());
}

void Graph::moveNode(Node *node, iterator before) {
  if (before != end() && &*before == node)
    return;
  nodes.remove(node);
  nodes.insert(before, node);
}

Value *Graph::addInput(TensorType type, std::string valueName) {
  inputs.emplace_back(new Value(this, Value::Kind::Input, std::move(type),
                                std::move(valueName)));
  return inputs.back().get();
}

Value *Graph::addInitializer(TensorData data, std::string valueName) {
  TensorType type = data.getType();
  initializers.emplace_back(new Value(this, Value::Kind::Initializer,
                                      std::move(type), std::move(valueName)));
  initializers.back()->setData(std::move(data));
  return initializers.back().get();
}

void Graph::removeValue(Value *value) {
  assert(value->useEmpty() && "removing a value that still has uses");
  assert(!isInSignature(*this, value) &&
         "removing a value the training signature refers to");
  auto &list = value->isGraphInput() ? inputs : initializers;
  assert(!value->isNodeResult() && "results die with their node");
  auto it = llvm::find_if(list, [&](const std::unique_ptr<Value> &owned) {
    return owned.get() == value;
  });
  assert(it != list.end() && "value not owned by this graph");
  list.erase(it);
}

void Graph::removeValues(llvm::ArrayRef<Value *> values) {
  llvm::SmallPtrSet<const Value *, 16> doomed;
  for (Value *value : values) {
    assert(value->useEmpty() && "removing a value that still has uses");
    assert(!value->isNodeResult() && "results die with their node");
    assert(!isInSignature(*this, value) &&
           "removing a value the training signature refers to");
    doomed.insert(value);
  }
  size_t removed = 0;
  for (auto *list : {&inputs, &initializers}) {
    auto end = std::remove_if(list->begin(), list->end(),
                              [&](const std::unique_ptr<Value> &owned) {
                                return doomed.count(owned.get()) != 0;
                              });
    removed += list->end() - end;
    list->erase(end, list->end());
  }
  (void)removed;
  assert(removed == doomed.size() && "value not owned by this graph");
}

llvm::SmallVector<Value *, 4> Graph::getOutputs() const {
  llvm::SmallVector<Value *, 4> values;
  for (const auto &output : outputs)
    values.push_back(output->get());
  return values;
}

void Graph::addOutput(Value *value) {
  outputs.emplace_back(new OpOperand(nullptr, outputs.size()));
  outputs.back()->set(value);
}

void Graph::removeOutput(unsigned i) {
  assert(i < outputs.size() && "output index out of range");
  outputs.erase(outputs.begin() + i);
  for (unsigned j = i, e = outputs.size(); j != e; ++j)
    outputs[j]->index = j;
}

Value *Graph::lookupValue(llvm::StringRef valueName) const {
  for (const auto &value : inputs)
    if (value->getName() == valueName)
      return value.get();
  for (const auto &value : initializers)
    if (value->getName() == valueName)
      return value.get();
  for (const Node &node : nodes)
    for (const auto &result : node.results)
      if (result && result->getName() == valueName)
        return result.get();
  return nullptr;
}

std::vector<Node *> Graph::cloneNodes(llvm::ArrayRef<Node *> toClone,
                                      iterator before, ValueMapping &mapping) {
  std::vector<Node *> clones;
  clones.reserve(toClone.size());
  for (Node *original : toClone) {
    llvm::SmallVector<Value *, 4> operandValues;
    for (Value *operand : original->getOperands()) {
      auto it = operand ? mapping.find(operand) : mapping.end();
      operandValues.push_back(it != mapping.end() ? it->second : operand);
    }
    Node *clone = createNode(before, original->getOp(), operandValues, 0,
                             original->getName().str());
    for (const NamedAttribute &attr : original->getAttrs())
      clone->setAttr(attr.name, attr.value);
    clone->setPhase(original->getPhase());
    clone->setStreamId(original->getStreamId());
    clone->results.resize(original->getNumResults());
    for (unsigned i = 0, e = original->getNumResults(); i != e; ++i) {
      Value *result = original->getResult(i);
      if (!result)
        continue;
      Value *copy = ensureResult(clone, i);
      copy->setType(result->getType());
      copy->setName(result->getName());
      mapping[result] = copy;
    }
    clones.push_back(clone);
  }
  return clones;
}

size_t Graph::countValues() const {
  size_t count = inputs.size() + initializers.size();
  for (const Node &node : nodes)
    for (const auto &result : node.results)
      count += result != nullptr;
  return count;
}

//===----------------------------------------------------------------------===//
// Builder
//===----------------------------------------------------------------------===//

Node *Builder::create(OpName op, llvm::ArrayRef<Value *> operands,
                      llvm::ArrayRef<TensorType> resultTypes,
                      llvm::ArrayRef<NamedAttribute> attrs, std::string name) {
  Node *node = graph.createNode(insertPoint, std::move(op), operands,
                                resultTypes.size(), std::move(name));
  node->setPhase(phase);
  for (const NamedAttribute &attr : attrs)
    node->setAttr(attr.name, attr.value);
  for (unsigned i = 0, e = resultTypes.size(); i != e; ++i)
    node->getResult(i)->setType(resultTypes[i]);
  return node;
}

llvm::Expected<Node *> Builder::createInferred(
    OpName op, llvm::ArrayRef<Value *> operands, unsigned numResults,
    llvm::ArrayRef<NamedAttribute> attrs, std::string name) {
  Node *node = graph.createNode(insertPoint, std::move(op), operands,
                                numResults, std::move(name));
  node->setPhase(phase);
  for (const NamedAttribute &attr : attrs)
    node->setAttr(attr.name, attr.value);
  auto types = inferNodeTypes(*node);
  if (!types) {
    graph.eraseNode(node);
    return types.takeError();
  }
  for (unsigned i = 0; i != numResults && i < types->size(); ++i)
    node->getResult(i)->setType((*types)[i]);
  return node;
}

Value *Builder::createConstant(TensorData data, std::string name) {
  return graph.addInitializer(std::move(data), std::move(name));
}
