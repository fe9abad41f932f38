//===- PatternRewriter.h - Peephole patterns and their driver ---*- C++ -*-===//
//
// Peephole rewrites are RewritePattern objects (the shape of
// mlir/examples/toy/Ch3/mlir/ToyCombine.cpp) applied by a greedy worklist
// driver until nothing matches. Patterns change the IR only through the
// PatternRewriter, which keeps the training signature valid on
// replacements, queues the users of replaced values so their types are
// re-inferred (a Reshape whose shape became a constant gets a static
// result), and defers erasure: an erased node loses its operands at once,
// so use counts stay exact, but leaves the node list only after the walk
// (as mlir/lib/Transforms/CSE.cpp collects, then erases). The rewriter
// keeps an index of the values the signature names, so that replacing a
// value and asking whether the signature names it cost O(1) rather than a
// walk over the signature (whose entries grow with the graph).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PATTERNREWRITER_H
#define GMOPT_PASSES_PATTERNREWRITER_H

#include "ir/IR.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace gmopt {

class Module;

/// Mutates the IR on behalf of patterns and records what changed.
class PatternRewriter {
public:
  explicit PatternRewriter(Module &module);
  PatternRewriter(const PatternRewriter &) = delete;
  PatternRewriter &operator=(const PatternRewriter &) = delete;
  virtual ~PatternRewriter();

  Module &getModule() const { return module; }
  Graph &getGraph() const;
  /// A builder; the driver points it before the node being rewritten.
  Builder &getBuilder() { return builder; }

  /// Redirects every use of \p from (graph outputs included) to \p to and
  /// updates the training signature. The users are revisited.
  void replaceAllUsesWith(Value *from, Value *to);
  /// True if the training signature names \p value in any role, as
  /// TrainingSignature::references answers it, in O(1): the index is built
  /// on first use (one walk over the signature) and kept current by
  /// replaceAllUsesWith, the only way patterns change the signature.
  bool isInSignature(const Value *value);
  /// True if \p node is some parameter's accumulation node, in O(1) (the
  /// same index).
  bool isInSignature(const Node *node);
  /// Replaces \p node, whose result \p output equals its operand \p input
  /// (Identity, a cast to the operand's own type), by \p input and erases
  /// it. ONNX names are the model's interface for graph outputs, so when
  /// \p output is a graph output or named by the signature, \p input takes
  /// its name if it can (a node result that is neither an output nor in the
  /// signature); a graph output whose name cannot move keeps its node
  /// (returns false, nothing changed).
  bool forwardOperand(Node &node, Value *input, Value *output);
  /// Marks \p node erased. Its results must be unused. Its operands are
  /// dropped now; the node leaves the graph in finalizeErasures().
  void eraseNode(Node *node);
  /// True if \p node was erased by this rewriter.
  bool isErased(const Node *node) const { return erased.count(node); }
  /// Creates a node with the builder (at its insertion point, with its
  /// phase) and queues it, so the driver tries the patterns on what
  /// patterns build (a Cast a fold creates may fold again).
  Node *createNode(OpName op, llvm::ArrayRef<Value *> operands,
                   llvm::ArrayRef<TensorType> resultTypes,
                   llvm::ArrayRef<NamedAttribute> attrs = {},
                   std::string name = {});
  /// Like createNode, with result types from the registry's inference.
  llvm::Expected<Node *> createInferredNode(
      OpName op, llvm::ArrayRef<Value *> operands, unsigned numResults,
      llvm::ArrayRef<NamedAttribute> attrs = {}, std::string name = {});
  /// Adds a constant initializer named \p name.
  Value *createConstant(TensorData data, std::string name);
  /// Tells the driver that \p node changed in place (attributes, operands).
  void notifyNodeChanged(Node *node) { notifyNodeModified(node); }
  /// Removes every erased node from the graph; returns how many.
  size_t finalizeErasures();
  /// Number of nodes erased so far (including not yet finalized ones).
  size_t getNumErased() const { return erasedOrder.size(); }

protected:
  /// Hook: \p node must be looked at again (its operands changed).
  virtual void notifyNodeModified(Node *node) {}
  /// Hook: \p node was created through createNode/createInferredNode.
  virtual void notifyNodeCreated(Node *node) {}

private:
  /// Fills signatureValues on first use.
  void indexSignature();

  Module &module;
  Builder builder;
  /// Every value the training signature names (once indexSignature ran).
  llvm::DenseSet<const Value *> signatureValues;
  /// Every node the training signature names (accumulation nodes).
  llvm::DenseSet<const Node *> signatureNodes;
  bool signatureIndexed = false;
  llvm::DenseSet<const Node *> erased;
  std::vector<Node *> erasedOrder;
};

/// A peephole rewrite rooted at one node.
class RewritePattern {
public:
  /// \p name identifies the pattern in traces and counts.
  explicit RewritePattern(llvm::StringRef name) : name(name.str()) {}
  virtual ~RewritePattern();

  llvm::StringRef getName() const { return name; }
  /// Rewrites around \p node if it matches. Returns true if the IR changed,
  /// false if the pattern did not apply (leaving the IR untouched), or an
  /// error for malformed input.
  virtual llvm::Expected<bool>
  matchAndRewrite(Node &node, PatternRewriter &rewriter) const = 0;

private:
  std::string name;
};

/// Tuning of applyPatternsGreedily.
struct GreedyRewriteConfig {
  /// Re-run type inference on nodes whose operands were replaced, and on
  /// their users when their result types got more precise.
  bool refineTypes = true;
  /// Fail rather than loop when more than this many rewrites succeed
  /// (patterns that undo each other); 0 picks 64 per node plus 1024.
  uint64_t maxRewrites = 0;
};

/// What applyPatternsGreedily did.
struct GreedyRewriteResult {
  /// True if any pattern applied or any type was refined.
  bool changed = false;
  /// Successful rewrites per pattern name.
  llvm::StringMap<uint64_t> rewritesByPattern;
  /// Nodes removed from the graph.
  uint64_t nodesErased = 0;
  /// Nodes whose result types became more precise.
  uint64_t typesRefined = 0;
};

/// Applies \p patterns (tried in order on each node) to \p module until no
/// pattern matches. Visits nodes in schedule order first, then whatever the
/// rewrites touched.
llvm::Expected<GreedyRewriteResult>
applyPatternsGreedily(Module &module,
                      llvm::ArrayRef<const RewritePattern *> patterns,
                      const GreedyRewriteConfig &config = {});

} // namespace gmopt

#endif // GMOPT_PASSES_PATTERNREWRITER_H
