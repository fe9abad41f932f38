//===- IR.h - Values, nodes and graphs ----------------------------*- C++ -*-===//
//
// The core of gmopt's IR. A Graph owns its Nodes (an intrusive list whose
// order *is* the schedule) and its Values (graph inputs, initializers and node
// results). Every use of a Value is an OpOperand threaded onto the Value's
// intrusive use list, as in MLIR's UseDefLists.h, so replaceAllUsesWith and
// erasure are O(uses). Graph outputs are uses too (OpOperands owned by the
// graph, with no owning node), so a rewrite can never forget them.
//
// ONNX names are kept as attributes of values and nodes for import/export;
// they are not identities: two values may share a name only transiently
// during a rewrite, and the exporter uniquifies. What a node *is* in the
// training step is data on the node instead: its phase (forward, backward,
// optimizer, recompute) and, for a random op, the id of its random stream.
// Importers set both once; clones and builders carry them.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_IR_H
#define GMOPT_IR_IR_H

#include "ir/Attribute.h"
#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/ilist.h"
#include "llvm/ADT/ilist_node.h"
#include "llvm/ADT/iterator_range.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gmopt {

class Graph;
class Module;
class Node;
class Value;

/// The ONNX domain of standard operators (stored as the empty string).
constexpr llvm::StringLiteral kOnnxDomain = "";
/// ONNX Runtime's contrib and training operators.
constexpr llvm::StringLiteral kMsDomain = "com.microsoft";

/// The phase of a training step that a node belongs to.
enum class Phase : uint8_t {
  /// The forward pass (the loss and what it reads).
  Forward,
  /// The backward pass (gradients).
  Backward,
  /// Gradient accumulation and parameter updates.
  Optimizer,
  /// A forward node cloned into the backward region to recompute an
  /// activation instead of keeping it.
  Recompute,
};
/// Lower-case name of \p phase: forward, backward, optimizer, recompute.
llvm::StringRef phaseName(Phase phase);
/// The phase named \p name (see phaseName), if any.
std::optional<Phase> parsePhaseName(llvm::StringRef name);

/// One use of a Value: operand \p index of node \p owner, or graph output
/// \p index when owner is null.
class OpOperand {
public:
  OpOperand(Node *owner, unsigned index) : owner(owner), index(index) {}
  OpOperand(const OpOperand &) = delete;
  OpOperand &operator=(const OpOperand &) = delete;
  ~OpOperand() { unlink(); }

  /// The used value; null for an absent optional operand.
  Value *get() const { return value; }
  /// Points this operand at \p newValue, updating both use lists.
  void set(Value *newValue);
  /// The node that uses the value, or null for a graph output.
  Node *getOwner() const { return owner; }
  /// Operand number within the owner (or output number for graph outputs).
  unsigned getIndex() const { return index; }
  bool isGraphOutput() const { return owner == nullptr; }
  /// Next use of the same value.
  OpOperand *getNextUse() const { return nextUse; }

private:
  friend class Value;
  friend class Node;
  friend class Graph;
  OpOperand() : owner(nullptr), index(0) {}
  void link(Value *v);
  void unlink();

  Value *value = nullptr;
  Node *owner;
  unsigned index;
  OpOperand *nextUse = nullptr;
  OpOperand **prevNext = nullptr;
};

/// Forward iterator over a value's uses.
class UseIterator
    : public llvm::iterator_facade_base<UseIterator, std::forward_iterator_tag,
                                        OpOperand> {
public:
  explicit UseIterator(OpOperand *use = nullptr) : use(use) {}
  OpOperand &operator*() const { return *use; }
  UseIterator &operator++() {
    use = use->getNextUse();
    return *this;
  }
  bool operator==(const UseIterator &other) const { return use == other.use; }

private:
  OpOperand *use;
};

/// An SSA value: a graph input, an initializer or a node result.
class Value {
public:
  enum class Kind {
    /// A graph input (data, parameter, accumulator...). May carry a default
    /// initializer, which ONNX lets the caller override.
    Input,
    /// A constant owned by the graph (ONNX initializer that is not an input).
    Initializer,
    /// Result \p getResultIndex() of \p getDefiningNode().
    Result,
  };

  Value(const Value &) = delete;
  Value &operator=(const Value &) = delete;
  ~Value() { assert(useEmpty() && "destroying a value that still has uses"); }

  Kind getKind() const { return kind; }
  bool isGraphInput() const { return kind == Kind::Input; }
  bool isInitializer() const { return kind == Kind::Initializer; }
  bool isNodeResult() const { return kind == Kind::Result; }
  /// The producing node, or null for inputs and initializers.
  Node *getDefiningNode() const { return definingNode; }
  unsigned getResultIndex() const { return resultIndex; }
  Graph *getGraph() const { return graph; }

  const TensorType &getType() const { return type; }
  void setType(TensorType newType) { type = std::move(newType); }
  llvm::StringRef getName() const { return name; }
  void setName(llvm::StringRef newName) { name = newName.str(); }

  /// Constant contents (initializers; inputs with a default). May be null.
  const TensorData &getData() const { return data; }
  bool hasData() const { return !data.isNull(); }
  void setData(TensorData newData) { data = std::move(newData); }

  /// True for an initializer that is a literal of the computation — a
  /// `Constant` node's value (canonicalize turns those into initializers) —
  /// rather than a tensor the model file lists as an initializer. A literal
  /// is never a parameter: autodiff gives it no gradient unless the user
  /// names it (a causal mask or a rotary table is not a weight). Printed
  /// as `constant literal`.
  bool isLiteral() const { return literal; }
  void setLiteral(bool isLiteral) { literal = isLiteral; }

  /// Uses, in no particular order.
  llvm::iterator_range<UseIterator> getUses() const {
    return {UseIterator(firstUse), UseIterator()};
  }
  bool useEmpty() const { return firstUse == nullptr; }
  bool hasOneUse() const { return firstUse && !firstUse->getNextUse(); }
  unsigned getNumUses() const;
  /// Distinct nodes using this value (graph outputs excluded).
  llvm::SmallVector<Node *, 4> getUsers() const;
  /// True if some use is a graph output.
  bool isGraphOutput() const;
  /// Redirects every use of this value to \p replacement.
  void replaceAllUsesWith(Value *replacement);

private:
  friend class Graph;
  friend class Node;
  friend class OpOperand;
  Value(Graph *graph, Kind kind, TensorType type, std::string name)
      : graph(graph), kind(kind), type(std::move(type)), name(std::move(name)) {
  }

  Graph *graph;
  Kind kind;
  Node *definingNode = nullptr;
  unsigned resultIndex = 0;
  TensorType type;
  std::string name;
  TensorData data;
  bool literal = false;
  OpOperand *firstUse = nullptr;
};

/// An operator's identity: ONNX domain ("" for the standard domain) and type.
struct OpName {
  std::string domain;
  std::string type;

  bool operator==(const OpName &o) const {
    return domain == o.domain && type == o.type;
  }
  bool is(llvm::StringRef d, llvm::StringRef t) const {
    return domain == d && type == t;
  }
  /// `Relu` for standard ops, `com.microsoft.ReluGrad` otherwise.
  std::string str() const;
};

/// An operation. Operands may be absent (null) for ONNX optional inputs;
/// results may be absent (null) for optional outputs the model does not use.
class Node : public llvm::ilist_node<Node> {
public:
  Node(const Node &) = delete;
  Node &operator=(const Node &) = delete;
  ~Node();

  const OpName &getOp() const { return op; }
  llvm::StringRef getDomain() const { return op.domain; }
  llvm::StringRef getOpType() const { return op.type; }
  bool isa(llvm::StringRef domain, llvm::StringRef type) const {
    return op.is(domain, type);
  }
  Graph *getGraph() const { return graph; }
  /// The opset version of this node's domain in the enclosing module.
  int64_t getOpsetVersion() const;

  llvm::StringRef getName() const { return name; }
  void setName(llvm::StringRef newName) { name = newName.str(); }

  /// The phase of the training step this node belongs to.
  Phase getPhase() const { return phase; }
  void setPhase(Phase newPhase) { phase = newPhase; }
  /// The id of this node's random stream (random ops only; see
  /// backend/cpu/Philox.h for how it keys the numbers). Clones of a random
  /// node share its stream, so they draw the same numbers.
  std::optional<uint64_t> getStreamId() const { return streamId; }
  void setStreamId(std::optional<uint64_t> id) { streamId = id; }

  // Operands.
  unsigned getNumOperands() const { return numOperands; }
  Value *getOperand(unsigned i) const { return getOpOperand(i).get(); }
  OpOperand &getOpOperand(unsigned i) const {
    assert(i < numOperands && "operand index out of range");
    return operands[i];
  }
  void setOperand(unsigned i, Value *v) { getOpOperand(i).set(v); }
  llvm::SmallVector<Value *, 4> getOperands() const;
  /// Replaces the whole operand list (the count may change).
  void setOperands(llvm::ArrayRef<Value *> newOperands);

  // Results.
  unsigned getNumResults() const { return results.size(); }
  /// Result \p i, or null when that optional output is absent.
  Value *getResult(unsigned i) const { return results[i].get(); }
  llvm::SmallVector<Value *, 2> getResults() const;
  /// True if no present result has a use.
  bool resultsUnused() const;

  // Attributes (kept in insertion order).
  llvm::ArrayRef<NamedAttribute> getAttrs() const { return attrs; }
  const Attribute *getAttr(llvm::StringRef attrName) const;
  bool hasAttr(llvm::StringRef attrName) const { return getAttr(attrName); }
  void setAttr(llvm::StringRef attrName, Attribute value);
  bool removeAttr(llvm::StringRef attrName);
  int64_t getIntAttr(llvm::StringRef attrName, int64_t defaultValue) const;
  float getFloatAttr(llvm::StringRef attrName, float defaultValue) const;
  llvm::StringRef getStringAttr(llvm::StringRef attrName,
                                llvm::StringRef defaultValue) const;
  std::vector<int64_t> getIntsAttr(llvm::StringRef attrName,
                                   llvm::ArrayRef<int64_t> defaultValue) const;

  /// A short description for error messages: the name, or the op type.
  std::string describe() const;

private:
  friend class Graph;
  Node(Graph *graph, OpName op, std::string name);
  void allocateOperands(unsigned count);

  Graph *graph;
  OpName op;
  std::string name;
  Phase phase = Phase::Forward;
  std::optional<uint64_t> streamId;
  std::unique_ptr<OpOperand[]> operands;
  unsigned numOperands = 0;
  llvm::SmallVector<std::unique_ptr<Value>, 1> results;
  llvm::SmallVector<NamedAttribute, 4> attrs;
};

/// Maps values of a source graph region to their clones.
using ValueMapping = llvm::DenseMap<const Value *, Value *>;

/// A dataflow graph in schedule order.
class Graph {
public:
  using NodeList = llvm::iplist<Node>;
  using iterator = NodeList::iterator;

  explicit Graph(Module *module = nullptr) : module(module) {}
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;
  ~Graph();

  Module *getModule() const { return module; }
  void setModule(Module *m) { module = m; }
  llvm::StringRef getName() const { return name; }
  void setName(llvm::StringRef newName) { name = newName.str(); }

  // Nodes, in schedule order.
  NodeList &getNodes() { return nodes; }
  const NodeList &getNodes() const { return nodes; }
  size_t getNumNodes() const { return nodes.size(); }
  iterator begin() { return nodes.begin(); }
  iterator end() { return nodes.end(); }

  /// Creates a node before \p before (end() appends) with the given operands
  /// and \p numResults results of unknown type. Prefer Builder.
  Node *createNode(iterator before, OpName op, llvm::ArrayRef<Value *> operands,
                   unsigned numResults, std::string name = {});
  /// Marks result \p i of \p node absent (it must be unused).
  void dropResult(Node *node, unsigned i);
  /// Gives \p node a present result \p i (appending results as needed).
  Value *ensureResult(Node *node, unsigned i);
  /// Erases \p node; its results must be unused.
  void eraseNode(Node *node);
  /// Moves \p node before \p before.
  void moveNode(Node *node, iterator before);

  // Graph inputs (in signature order) and initializers.
  llvm::ArrayRef<std::unique_ptr<Value>> getInputs() const { return inputs; }
  llvm::ArrayRef<std::unique_ptr<Value>> getInitializers() const {
    return initializers;
  }
  Value *addInput(TensorType type, std::string name);
  Value *addInitializer(TensorData data, std::string name);
  /// Removes an unused input or initializer. Linear in the number of
  /// inputs and initializers: use removeValues for many.
  void removeValue(Value *value);
  /// Removes every value of \p values (unused inputs or initializers) in
  /// one pass over the input and initializer lists.
  void removeValues(llvm::ArrayRef<Value *> values);

  // Graph outputs (uses owned by the graph).
  unsigned getNumOutputs() const { return outputs.size(); }
  Value *getOutput(unsigned i) const { return outputs[i]->get(); }
  llvm::SmallVector<Value *, 4> getOutputs() const;
  void addOutput(Value *value);
  void setOutput(unsigned i, Value *value) { outputs[i]->set(value); }
  void removeOutput(unsigned i);

  /// Finds a value (input, initializer or result) by its ONNX name; linear.
  Value *lookupValue(llvm::StringRef valueName) const;

  /// Clones \p nodes (in the given order) before \p before. Operands found in
  /// \p mapping are remapped, others are used as they are; each clone's
  /// results are recorded in \p mapping. A clone keeps its original's name,
  /// attributes, phase and random stream id (so a cloned Dropout draws the
  /// original's mask); a caller placing forward clones in the backward
  /// region marks them Phase::Recompute. Returns the clones in order.
  std::vector<Node *> cloneNodes(llvm::ArrayRef<Node *> nodes, iterator before,
                                 ValueMapping &mapping);

  /// Number of values of any kind (inputs + initializers + present results).
  size_t countValues() const;

private:
  friend class Node;
  Module *module;
  std::string name;
  NodeList nodes;
  std::vector<std::unique_ptr<Value>> inputs;
  std::vector<std::unique_ptr<Value>> initializers;
  std::vector<std::unique_ptr<OpOperand>> outputs;
};

/// The stream id an importer gives a random node that has none: FNV-1a
/// (64-bit) over the node's name bytes followed by the eight little-endian
/// bytes of \p position (its place in the imported schedule), so two
/// unnamed random nodes get different ids. Stable across processes and
/// builds (never llvm::hash_value).
uint64_t computeStreamId(llvm::StringRef nodeName, uint64_t position);

/// Gives every random node (registry trait TraitRandom) of \p graph that has
/// no stream id computeStreamId(name, position), bumped by one until it
/// differs from every stream id already in the graph. Run once by the
/// importers (ONNX, text) and test harnesses, never by passes.
void assignMissingStreamIds(Graph &graph);

/// Creates nodes at an insertion point, like mlir::OpBuilder. Created nodes
/// get the builder's current phase (Forward unless set): a pass that
/// replaces a node sets it to the replaced node's phase.
class Builder {
public:
  /// A builder that appends to \p graph.
  explicit Builder(Graph &graph) : graph(graph), insertPoint(graph.end()) {}

  /// The phase given to created nodes.
  Phase getPhase() const { return phase; }
  void setPhase(Phase newPhase) { phase = newPhase; }

  Graph &getGraph() const { return graph; }
  void setInsertionPoint(Node *before) { insertPoint = before->getIterator(); }
  void setInsertionPointAfter(Node *after) {
    insertPoint = std::next(after->getIterator());
  }
  void setInsertionPointToEnd() { insertPoint = graph.end(); }
  void setInsertionPointToStart() { insertPoint = graph.begin(); }
  Graph::iterator getInsertionPoint() const { return insertPoint; }

  /// Creates a node with explicitly typed results.
  Node *create(OpName op, llvm::ArrayRef<Value *> operands,
               llvm::ArrayRef<TensorType> resultTypes,
               llvm::ArrayRef<NamedAttribute> attrs = {},
               std::string name = {});
  /// Creates a node whose result types come from the op registry's
  /// inference. Fails (and creates nothing) if inference fails.
  llvm::Expected<Node *>
  createInferred(OpName op, llvm::ArrayRef<Value *> operands,
                 unsigned numResults, llvm::ArrayRef<NamedAttribute> attrs = {},
                 std::string name = {});
  /// Adds a constant initializer to the graph.
  Value *createConstant(TensorData data, std::string name = {});

private:
  Graph &graph;
  Graph::iterator insertPoint;
  Phase phase = Phase::Forward;
};

} // namespace gmopt

#endif // GMOPT_IR_IR_H
