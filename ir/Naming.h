//===- Naming.h - Unique ONNX names for values and nodes --------*- C++ -*-===//
//
// ONNX names are import/export attributes in gmopt, not identities: a pass
// may leave values or nodes unnamed or with the same name. Anything that
// refers to values by name across a serialization boundary (the ONNX
// exporter, the `.gm` container) first needs every name to be unique and
// non-empty. These functions compute such names deterministically - a value
// or node keeps its own name if no earlier one has it, otherwise it gets an
// invented `gmopt_N` (values) or `gmopt_node_N` (nodes) that no name in the
// graph uses - and optionally apply them, renaming only the duplicates and
// the unnamed.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_NAMING_H
#define GMOPT_IR_NAMING_H

#include "llvm/ADT/DenseMap.h"

#include <string>

namespace gmopt {

class Graph;
class Module;
class Node;
class Value;

/// The unique, non-empty name of every present value of \p graph, visited
/// in export order (graph inputs, initializers, then node results in
/// schedule order): a value keeps its name when no earlier value has it,
/// else gets the first free `gmopt_N`. The ONNX exporter names values this
/// way, so after uniquifyValueNames the exported names are the values' own.
llvm::DenseMap<const Value *, std::string>
computeUniqueValueNames(const Graph &graph);

/// Renames the duplicate and unnamed values of \p module's graph to their
/// computeUniqueValueNames name; every other value keeps its name.
void uniquifyValueNames(Module &module);

/// The unique, non-empty name of every node of \p graph in schedule order:
/// a node keeps its name when no earlier node has it, else gets the first
/// free `gmopt_node_N`.
llvm::DenseMap<const Node *, std::string>
computeUniqueNodeNames(const Graph &graph);

/// Renames the duplicate and unnamed nodes of \p module's graph to their
/// computeUniqueNodeNames name; every other node keeps its name.
void uniquifyNodeNames(Module &module);

} // namespace gmopt

#endif // GMOPT_IR_NAMING_H
