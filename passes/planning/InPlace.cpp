//===- InPlace.cpp - Which results may overwrite an operand ---------------===//
//
// The semantic test reads the op registry (TraitElementwise or
// TraitRowwise, the schema's inPlaceOperand and inPlaceResult,
// TraitCommutative) and compares types; the schedule test
// reads the storage groups of a Liveness. Only operands 0 and 1 are ever
// offered: the CPU kernels of variadic ops (Sum, Mean...) read operands
// beyond the second after writing the output, and copy such an operand to
// scratch memory when it aliases the output, which would cost more than
// in-place saves.
//
//===----------------------------------------------------------------------===//

#include "passes/planning/InPlace.h"
#include "passes/DebugOutput.h"

#include "ir/IR.h"
#include "ir/OpRegistry.h"

#include "llvm/Support/raw_ostream.h"

#define DEBUG_TYPE "gmopt-in-place"

using namespace gmopt;

llvm::SmallVector<unsigned, 2>
gmopt::getInPlaceOperandCandidates(const Node &node) {
  return getInPlaceOperandCandidates(node, OpRegistry::instance().lookup(node));
}

llvm::SmallVector<unsigned, 2>
gmopt::getInPlaceOperandCandidates(const Node &node, const OpSchema *schema) {
  llvm::SmallVector<unsigned, 2> candidates;
  if (!schema || schema->inPlaceOperand < 0 ||
      !(schema->hasTrait(TraitElementwise) || schema->hasTrait(TraitRowwise)) ||
      schema->hasTrait(TraitSideEffect) || schema->hasTrait(TraitRandom) ||
      schema->hasTrait(TraitView))
    return candidates;
  const Value *result = getInPlaceResult(node, schema);
  if (!result)
    return candidates;
  const TensorType &resultType = result->getType();
  if (!resultType.hasStaticShape())
    return candidates;

  auto consider = [&](unsigned index) {
    if (index >= 2 || index >= node.getNumOperands() ||
        llvm::is_contained(candidates, index))
      return;
    const Value *operand = node.getOperand(index);
    if (operand && operand->getType() == resultType)
      candidates.push_back(index);
  };
  consider(unsigned(schema->inPlaceOperand));
  if (schema->hasTrait(TraitCommutative))
    for (unsigned index = 0; index != 2; ++index)
      consider(index);
  return candidates;
}

const Value *gmopt::getInPlaceResult(const Node &node, const OpSchema *schema) {
  if (!schema || schema->inPlaceOperand < 0 ||
      schema->inPlaceResult >= node.getNumResults())
    return nullptr;
  return node.getResult(schema->inPlaceResult);
}

std::vector<InPlaceReuse> gmopt::applyInPlaceReuse(Liveness &liveness) {
  using ValueId = Liveness::ValueId;
  std::vector<InPlaceReuse> decisions;
  for (uint32_t step = 0, e = liveness.getNumSteps(); step != e; ++step) {
    const OpSchema *schema = liveness.getSchema(step);
    // Cheap trait test first: most nodes are not in-place candidates.
    if (!schema || schema->inPlaceOperand < 0 ||
        !(schema->hasTrait(TraitElementwise) || schema->hasTrait(TraitRowwise)))
      continue;
    const Node &node = *liveness.getNode(step);
    llvm::SmallVector<unsigned, 2> candidates =
        getInPlaceOperandCandidates(node, schema);
    if (candidates.empty())
      continue;
    ValueId result = *liveness.lookup(getInPlaceResult(node, schema));
    if (!liveness.isArenaOwner(result) || liveness.isPinned(result) ||
        liveness.isView(result) || !liveness.getBytes(result))
      continue;

    llvm::ArrayRef<ValueId> operands = liveness.getOperands(step);
    llvm::SmallVector<ValueId, 4> operandOwners;
    for (ValueId operand : operands)
      operandOwners.push_back(operand == Liveness::kNoValue
                                  ? Liveness::kNoValue
                                  : liveness.getOwner(operand));
    for (unsigned index : candidates) {
      ValueId owner = operandOwners[index];
      if (owner == result || !liveness.isArenaOwner(owner) ||
          liveness.isPinned(owner) ||
          liveness.getStorageInterval(owner).lastStep != step)
        continue;
      bool readElsewhere = false;
      for (unsigned other = 0, n = operandOwners.size(); other != n; ++other)
        if (other != index && operandOwners[other] == owner)
          readElsewhere = true;
      if (readElsewhere)
        continue;
      liveness.shareStorage(result, operands[index]);
      decisions.push_back({&node, schema->inPlaceResult, index,
                           alignBuffer(liveness.getBytes(result))});
      GMOPT_DEBUG(dbgs() << "[" DEBUG_TYPE "] step " << step << ": "
                         << node.describe() << " writes result "
                         << schema->inPlaceResult << " into operand " << index
                         << "\n");
      break;
    }
  }
  return decisions;
}
