//===- DeadCode.cpp - Side effects and dead-node elimination --------------===//
//
// Dead nodes are found in one reverse walk. A node found dead has its
// operands dropped on the spot, so the producers it used see exact use
// counts when the walk reaches them; the nodes are collected and erased
// after the walk.
//
//===----------------------------------------------------------------------===//

#include "passes/transforms/DeadCode.h"
#include "passes/DebugOutput.h"
#include "passes/SignatureUtils.h"

#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/Support/raw_ostream.h"

#include <vector>

#define DEBUG_TYPE "gmopt-dce"

using namespace gmopt;

bool gmopt::isTriviallyDead(const Node &node, const Module &module) {
  if (!node.resultsUnused() || hasSideEffects(node))
    return false;
  const TrainingSignature &signature = module.getSignature();
  if (signature.references(&node))
    return false;
  for (Value *result : node.getResults())
    if (signature.references(result))
      return false;
  return true;
}

uint64_t gmopt::eraseDeadNodes(Module &module) {
  Graph &graph = module.getGraph();
  std::vector<Node *> dead;
  for (auto it = graph.getNodes().rbegin(), end = graph.getNodes().rend();
       it != end; ++it) {
    Node &node = *it;
    if (!isTriviallyDead(node, module))
      continue;
    GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] erasing dead " << node.getOp().str()
                       << (node.getName().empty()
                               ? std::string()
                               : " '" + node.getName().str() + "'")
                       << "\n");
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i)
      node.setOperand(i, nullptr);
    dead.push_back(&node);
  }
  for (Node *node : dead)
    graph.eraseNode(node);
  return dead.size();
}

uint64_t gmopt::eraseDeadInitializers(Module &module) {
  Graph &graph = module.getGraph();
  std::vector<Value *> unused;
  for (const auto &initializer : graph.getInitializers())
    if (initializer->useEmpty() &&
        !module.getSignature().references(initializer.get()))
      unused.push_back(initializer.get());
  GMOPT_DEBUG(for (Value *value
                   : unused) dbgs()
              << "[" DEBUG_TYPE "] removing unused initializer '"
              << value->getName() << "'\n");
  graph.removeValues(unused);
  return unused.size();
}
