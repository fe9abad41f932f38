//===- PatternRewriter.cpp - Peephole patterns and their driver -----------===//
//
// The greedy driver keeps a FIFO worklist seeded with every node in
// schedule order. Replacing a value queues its users (and marks them for
// type re-inference); a node whose result types got more precise queues its
// own users in turn, so static shapes flow forward until a fixed point.
// Erased nodes are skipped and removed from the graph at the end.
//
//===----------------------------------------------------------------------===//

#include "passes/PatternRewriter.h"
#include "passes/DebugOutput.h"
#include "passes/SignatureUtils.h"

#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/Support/raw_ostream.h"

#include <deque>

#define DEBUG_TYPE "gmopt-pattern-rewriter"

using namespace gmopt;

//===----------------------------------------------------------------------===//
// PatternRewriter
//===----------------------------------------------------------------------===//

PatternRewriter::PatternRewriter(Module &module)
    : module(module), builder(module.getGraph()) {}

PatternRewriter::~PatternRewriter() = default;

Graph &PatternRewriter::getGraph() const { return module.getGraph(); }

void PatternRewriter::indexSignature() {
  if (signatureIndexed)
    return;
  signatureIndexed = true;
  const TrainingSignature &signature = module.getSignature();
  auto add = [&](const Value *value) {
    if (value)
      signatureValues.insert(value);
  };
  for (const ParamInfo &param : signature.getParams()) {
    add(param.param);
    add(param.grad);
    add(param.accumulator);
    if (param.accumulateNode)
      signatureNodes.insert(param.accumulateNode);
    for (const Value *state : param.optimizerState)
      add(state);
  }
  for (const Value *data : signature.getDataInputs())
    add(data);
  add(signature.getLoss());
  add(signature.getLossGradSeed());
  add(signature.getLazyResetGrad());
  for (unsigned slot = 0; slot != kNumStepSlots; ++slot)
    add(signature.getStepSlot(static_cast<StepSlot>(slot)));
}

bool PatternRewriter::isInSignature(const Value *value) {
  indexSignature();
  bool indexed = value && signatureValues.count(value);
  assert(indexed == isReferencedBySignature(module.getSignature(), value) &&
         "the signature index disagrees with the signature");
  return indexed;
}

bool PatternRewriter::isInSignature(const Node *node) {
  indexSignature();
  bool indexed = node && signatureNodes.count(node);
  assert(indexed == isReferencedBySignature(module.getSignature(), node) &&
         "the signature index disagrees with the signature");
  return indexed;
}

void PatternRewriter::replaceAllUsesWith(Value *from, Value *to) {
  assert(from && to && from != to && "bad replacement");
  llvm::SmallVector<Node *, 4> users = from->getUsers();
  from->replaceAllUsesWith(to);
  // Only a value the signature names costs a walk over the signature.
  if (isInSignature(from)) {
    replaceValueInSignature(module.getSignature(), from, to);
    signatureValues.erase(from);
    signatureValues.insert(to);
  }
  for (Node *user : users)
    notifyNodeModified(user);
}

void PatternRewriter::eraseNode(Node *node) {
  assert(node->resultsUnused() && "erasing a node whose results are used");
  assert(!isInSignature(node) &&
         "erasing a node the training signature refers to");
  if (!erased.insert(node).second)
    return;
  for (unsigned i = 0, e = node->getNumOperands(); i != e; ++i)
    node->setOperand(i, nullptr);
  erasedOrder.push_back(node);
}

bool PatternRewriter::forwardOperand(Node &node, Value *input, Value *output) {
  bool canTakeName =
      input->isNodeResult() && !input->isGraphOutput() && !isInSignature(input);
  if (output->isGraphOutput() && !canTakeName)
    return false;
  if (canTakeName && (output->isGraphOutput() || isInSignature(output)))
    input->setName(output->getName());
  // Also when unused: the training signature may still name the output.
  replaceAllUsesWith(output, input);
  eraseNode(&node);
  return true;
}

Node *PatternRewriter::createNode(OpName op, llvm::ArrayRef<Value *> operands,
                                  llvm::ArrayRef<TensorType> resultTypes,
                                  llvm::ArrayRef<NamedAttribute> attrs,
                                  std::string name) {
  Node *node = builder.create(std::move(op), operands, resultTypes, attrs,
                              std::move(name));
  notifyNodeCreated(node);
  return node;
}

llvm::Expected<Node *> PatternRewriter::createInferredNode(
    OpName op, llvm::ArrayRef<Value *> operands, unsigned numResults,
    llvm::ArrayRef<NamedAttribute> attrs, std::string name) {
  llvm::Expected<Node *> node = builder.createInferred(
      std::move(op), operands, numResults, attrs, std::move(name));
  if (node)
    notifyNodeCreated(*node);
  return node;
}

Value *PatternRewriter::createConstant(TensorData data, std::string name) {
  return builder.createConstant(std::move(data), std::move(name));
}

size_t PatternRewriter::finalizeErasures() {
  size_t count = erasedOrder.size();
  for (Node *node : erasedOrder)
    getGraph().eraseNode(node);
  erasedOrder.clear();
  erased.clear();
  return count;
}

RewritePattern::~RewritePattern() = default;

//===----------------------------------------------------------------------===//
// Greedy driver
//===----------------------------------------------------------------------===//

namespace {

class GreedyDriver : public PatternRewriter {
public:
  GreedyDriver(Module &module, llvm::ArrayRef<const RewritePattern *> patterns,
               const GreedyRewriteConfig &config)
      : PatternRewriter(module), patterns(patterns), config(config) {}

  llvm::Expected<GreedyRewriteResult> run() {
    uint64_t maxRewrites = config.maxRewrites;
    if (maxRewrites == 0)
      maxRewrites = 64 * getGraph().getNumNodes() + 1024;
    for (Node &node : getGraph())
      push(&node);

    uint64_t rewrites = 0;
    while (!worklist.empty()) {
      Node *node = worklist.front();
      worklist.pop_front();
      inWorklist.erase(node);
      if (isErased(node))
        continue;
      if (needsRefinement.erase(node))
        if (llvm::Error err = refineTypes(*node))
          return finish(std::move(err));
      for (const RewritePattern *pattern : patterns) {
        getBuilder().setInsertionPoint(node);
        // What a pattern builds replaces (part of) this node: same phase.
        getBuilder().setPhase(node->getPhase());
        llvm::Expected<bool> applied = pattern->matchAndRewrite(*node, *this);
        if (!applied)
          return finish(applied.takeError());
        if (!*applied)
          continue;
        GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] " << pattern->getName()
                           << " rewrote " << node->describe() << "\n");
        result.changed = true;
        ++result.rewritesByPattern[pattern->getName()];
        if (++rewrites > maxRewrites)
          return finish(llvm::createStringError(
              llvm::inconvertibleErrorCode(),
              "pattern rewriting did not converge after " +
                  llvm::Twine(maxRewrites) +
                  " rewrites (last: " + pattern->getName() + ")"));
        if (!isErased(node))
          push(node);
        break;
      }
    }
    if (llvm::Error err = finish(llvm::Error::success()))
      return err;
    return std::move(result);
  }

protected:
  void notifyNodeModified(Node *node) override {
    if (config.refineTypes)
      needsRefinement.insert(node);
    push(node);
  }
  void notifyNodeCreated(Node *node) override { push(node); }

private:
  void push(Node *node) {
    if (inWorklist.insert(node).second)
      worklist.push_back(node);
  }

  /// Re-infers \p node's result types; queues its users if they changed.
  llvm::Error refineTypes(Node &node) {
    if (!OpRegistry::instance().lookup(node))
      return llvm::Error::success();
    llvm::SmallVector<TensorType, 2> before;
    for (Value *resultValue : node.getResults())
      before.push_back(resultValue ? resultValue->getType() : TensorType());
    if (llvm::Error err = inferAndSetTypes(node))
      return err;
    bool refined = false;
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i) {
      Value *resultValue = node.getResult(i);
      if (!resultValue || resultValue->getType() == before[i])
        continue;
      refined = true;
      GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] refined result " << i << " of "
                         << node.describe() << ": " << before[i] << " -> "
                         << resultValue->getType() << "\n");
      for (Node *user : resultValue->getUsers())
        notifyNodeModified(user);
    }
    if (refined) {
      result.changed = true;
      ++result.typesRefined;
    }
    return llvm::Error::success();
  }

  /// Removes erased nodes so the graph is consistent, then returns \p err.
  llvm::Error finish(llvm::Error err) {
    result.nodesErased += finalizeErasures();
    return err;
  }

  llvm::ArrayRef<const RewritePattern *> patterns;
  const GreedyRewriteConfig &config;
  std::deque<Node *> worklist;
  llvm::DenseSet<Node *> inWorklist;
  llvm::DenseSet<Node *> needsRefinement;
  GreedyRewriteResult result;
};

} // namespace

llvm::Expected<GreedyRewriteResult>
gmopt::applyPatternsGreedily(Module &module,
                             llvm::ArrayRef<const RewritePattern *> patterns,
                             const GreedyRewriteConfig &config) {
  return GreedyDriver(module, patterns, config).run();
}
