//===- Naming.cpp - Unique ONNX names for values and nodes ----------------===//
//
// One deterministic uniquifier shared by the ONNX exporter and the `.gm`
// writer. Names are claimed in a fixed order (export order for values,
// schedule order for nodes); an invented name skips every name that occurs
// anywhere in the graph, so inventing never renames a value met later.
//
//===----------------------------------------------------------------------===//

#include "ir/Naming.h"

#include "ir/IR.h"
#include "ir/Module.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSet.h"

using namespace gmopt;

namespace {

/// Gives each entry of \p items (in order) a unique non-empty name: its own
/// (from \p nameOf) when still free, else `PREFIX<N>` for the smallest N
/// not used by any item.
template <typename T, typename NameOf>
llvm::DenseMap<const T *, std::string>
assignUniqueNames(llvm::ArrayRef<const T *> items, NameOf nameOf,
                  llvm::StringRef prefix) {
  llvm::StringSet<> existing;
  for (const T *item : items)
    if (!nameOf(item).empty())
      existing.insert(nameOf(item));

  llvm::DenseMap<const T *, std::string> names;
  names.reserve(items.size());
  llvm::StringSet<> used;
  unsigned counter = 0;
  for (const T *item : items) {
    llvm::StringRef name = nameOf(item);
    if (!name.empty() && used.insert(name).second) {
      names[item] = name.str();
      continue;
    }
    std::string invented;
    do
      invented = prefix.str() + std::to_string(counter++);
    while (existing.count(invented) || used.count(invented));
    used.insert(invented);
    names[item] = std::move(invented);
  }
  return names;
}

} // namespace

llvm::DenseMap<const Value *, std::string>
gmopt::computeUniqueValueNames(const Graph &graph) {
  llvm::SmallVector<const Value *, 0> order;
  for (const std::unique_ptr<Value> &input : graph.getInputs())
    order.push_back(input.get());
  for (const std::unique_ptr<Value> &init : graph.getInitializers())
    order.push_back(init.get());
  for (const Node &node : graph.getNodes())
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
      if (const Value *result = node.getResult(i))
        order.push_back(result);
  return assignUniqueNames<Value>(
      order, [](const Value *value) { return value->getName(); }, "gmopt_");
}

void gmopt::uniquifyValueNames(Module &module) {
  Graph &graph = module.getGraph();
  llvm::DenseMap<const Value *, std::string> names =
      computeUniqueValueNames(graph);
  auto rename = [&](Value *value) {
    const std::string &name = names.find(value)->second;
    if (value->getName() != name)
      value->setName(name);
  };
  for (const std::unique_ptr<Value> &input : graph.getInputs())
    rename(input.get());
  for (const std::unique_ptr<Value> &init : graph.getInitializers())
    rename(init.get());
  for (Node &node : graph)
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
      if (Value *result = node.getResult(i))
        rename(result);
}

llvm::DenseMap<const Node *, std::string>
gmopt::computeUniqueNodeNames(const Graph &graph) {
  llvm::SmallVector<const Node *, 0> order;
  for (const Node &node : graph.getNodes())
    order.push_back(&node);
  return assignUniqueNames<Node>(
      order, [](const Node *node) { return node->getName(); }, "gmopt_node_");
}

void gmopt::uniquifyNodeNames(Module &module) {
  Graph &graph = module.getGraph();
  llvm::DenseMap<const Node *, std::string> names =
      computeUniqueNodeNames(graph);
  for (Node &node : graph) {
    const std::string &name = names.find(&node)->second;
    if (node.getName() != name)
      node.setName(name);
  }
}
