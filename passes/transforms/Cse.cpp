//===- Cse.cpp - Common subexpression elimination -------------------------===//

#include "passes/transforms/Cse.h"

#include "ir/Module.h"
#include "passes/transforms/DeadCode.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <vector>

using namespace gmopt;

namespace {

/// True if \p value is a graph output.
bool isGraphOutput(const Value *value,
                   const llvm::SmallPtrSetImpl<const Value *> &outputs) {
  return outputs.count(value) != 0;
}

/// Merges identical initializers. A frozen parameter may merge into another
/// frozen parameter or a plain constant's twin only when both are of the
/// same kind (frozen with frozen, constant with constant), so the signature
/// keeps describing the same roles.
llvm::Error
mergeConstants(Module &module, CseResult &result,
               const llvm::SmallPtrSetImpl<const Value *> &outputs) {
  Graph &graph = module.getGraph();
  const TrainingSignature &signature = module.getSignature();
  // Candidates by (frozen?, type, size, content hash).
  llvm::DenseMap<llvm::hash_code, llvm::SmallVector<Value *, 2>> buckets;
  std::vector<std::pair<Value *, Value *>> merges; // (copy, kept)
  for (const std::unique_ptr<Value> &owned : graph.getInitializers()) {
    Value *value = owned.get();
    if (isGraphOutput(value, outputs))
      continue;
    const ParamInfo *param = signature.lookup(value);
    bool frozen = param && !param->trainable;
    if (param && !frozen)
      continue; // trainable: never merged
    if (!param && signature.references(value))
      continue; // plays another role (the loss-gradient seed, ...)
    const TensorData &data = value->getData();
    if (data.isNull() || data.failedToLoad())
      continue;
    llvm::ArrayRef<uint8_t> bytes = data.getBytes();
    if (bytes.size() != data.getSizeInBytes())
      continue; // contents not available here
    llvm::hash_code key = llvm::hash_combine(
        frozen, value->getType().str(),
        llvm::hash_combine_range(bytes.begin(), bytes.end()));
    Value *kept = nullptr;
    for (Value *candidate : buckets[key])
      if (candidate->getData() == data) {
        kept = candidate;
        break;
      }
    if (kept)
      merges.push_back({value, kept});
    else
      buckets[key].push_back(value);
  }
  std::vector<Value *> unusedConstants;
  for (auto [copy, kept] : merges) {
    uint64_t bytes = copy->getData().getSizeInBytes();
    copy->replaceAllUsesWith(kept);
    if (signature.lookup(copy)) {
      if (llvm::Error err = module.removeParameter(copy))
        return err;
      ++result.frozenParamsMerged;
    } else {
      unusedConstants.push_back(copy);
    }
    ++result.constantsMerged;
    result.constantBytesMerged += bytes;
  }
  graph.removeValues(unusedConstants);
  return llvm::Error::success();
}

/// Hash of what sameNode compares (attribute values excepted).
llvm::hash_code hashNode(const Node &node) {
  llvm::hash_code hash = llvm::hash_combine(
      node.getDomain(), node.getOpType(), node.getOpsetVersion(),
      static_cast<unsigned>(node.getPhase()), node.getNumResults(),
      node.getAttrs().size());
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i)
    hash = llvm::hash_combine(hash, node.getOperand(i));
  for (const NamedAttribute &attr : node.getAttrs())
    hash = llvm::hash_combine(hash, attr.name);
  return hash;
}

bool sameNode(const Node &a, const Node &b) {
  if (a.getDomain() != b.getDomain() || a.getOpType() != b.getOpType() ||
      a.getOpsetVersion() != b.getOpsetVersion() ||
      a.getPhase() != b.getPhase() ||
      a.getNumOperands() != b.getNumOperands() ||
      a.getNumResults() != b.getNumResults() ||
      a.getAttrs().size() != b.getAttrs().size())
    return false;
  for (unsigned i = 0, e = a.getNumOperands(); i != e; ++i)
    if (a.getOperand(i) != b.getOperand(i))
      return false;
  for (unsigned i = 0, e = a.getNumResults(); i != e; ++i) {
    const Value *ra = a.getResult(i), *rb = b.getResult(i);
    if (!ra != !rb || (ra && ra->getType() != rb->getType()))
      return false;
  }
  // Attributes are kept in insertion order, which importers and builders
  // do not fix: compare them by name.
  for (const NamedAttribute &attr : a.getAttrs()) {
    const Attribute *other = b.getAttr(attr.name);
    if (!other || !(*other == attr.value))
      return false;
  }
  return true;
}

/// True if \p node may be merged into an identical earlier node.
bool isMergeable(const Node &node, const Module &module,
                 const llvm::SmallPtrSetImpl<const Value *> &outputs) {
  if (hasSideEffects(node) || node.getStreamId())
    return false;
  const TrainingSignature &signature = module.getSignature();
  if (signature.references(&node))
    return false;
  for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
    if (const Value *result = node.getResult(i))
      if (signature.references(result) || isGraphOutput(result, outputs))
        return false;
  return node.getNumResults() != 0;
}

uint64_t mergeNodes(Module &module,
                    const llvm::SmallPtrSetImpl<const Value *> &outputs) {
  Graph &graph = module.getGraph();
  llvm::DenseMap<llvm::hash_code, llvm::SmallVector<Node *, 1>> seen;
  uint64_t merged = 0;
  for (auto it = graph.begin(), end = graph.end(); it != end;) {
    Node &node = *it++;
    if (!isMergeable(node, module, outputs))
      continue;
    llvm::SmallVector<Node *, 1> &bucket = seen[hashNode(node)];
    Node *kept = nullptr;
    for (Node *candidate : bucket)
      if (sameNode(*candidate, node)) {
        kept = candidate;
        break;
      }
    if (!kept) {
      bucket.push_back(&node);
      continue;
    }
    for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
      if (Value *value = node.getResult(i))
        value->replaceAllUsesWith(kept->getResult(i));
    graph.eraseNode(&node);
    ++merged;
  }
  return merged;
}

} // namespace

llvm::Expected<CseResult> gmopt::eliminateCommonSubexpressions(Module &module) {
  CseResult result;
  llvm::SmallPtrSet<const Value *, 16> outputs;
  for (Value *value : module.getGraph().getOutputs())
    outputs.insert(value);
  if (llvm::Error err = mergeConstants(module, result, outputs))
    return err;
  result.nodesMerged = mergeNodes(module, outputs);
  return result;
}

CsePass::CsePass() {
  declareStatistic("constants-merged",
                   "Initializers replaced by an identical one");
  declareStatistic("frozen-params-merged",
                   "Of which frozen parameters, gone from the signature");
  declareStatistic("constant-bytes-merged",
                   "Bytes of the initializers removed");
  declareStatistic("nodes-merged",
                   "Nodes erased: an earlier identical node computes them");
}

llvm::Expected<bool> CsePass::run(Module &module, PassContext &context) {
  auto result = eliminateCommonSubexpressions(module);
  if (!result)
    return result.takeError();
  addStatistic(context, "constants-merged", result->constantsMerged);
  addStatistic(context, "frozen-params-merged", result->frozenParamsMerged);
  addStatistic(context, "constant-bytes-merged", result->constantBytesMerged);
  addStatistic(context, "nodes-merged", result->nodesMerged);
  return result->constantsMerged + result->nodesMerged != 0;
}
