//===- MemorySpaces.cpp - Where planned buffers live, and the copy ops ----===//
//
// The derivation of a value's memory space from the graph and the rules the
// verifier holds every copy op to (see MemorySpaces.h). The rules are what
// lets the planner, the plan validator and the plan interpreter trust the
// derivation: a host tensor is never read by a kernel, and every copy start
// has the one wait that finishes it.
//
//===----------------------------------------------------------------------===//

#include "ir/MemorySpaces.h"
#include "ir/Collectives.h"
#include "ir/IR.h"

#include "llvm/Support/FormatVariadic.h"

using namespace gmopt;

namespace {

llvm::Error failAt(const Node &node, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "node " + node.describe() + ": " + message);
}

bool isOp(const Node &node, llvm::StringRef op) {
  return node.getDomain() == kGmoptDomain && node.getOpType() == op;
}

std::string label(const Value *value) {
  if (!value->getName().empty())
    return "%" + value->getName().str();
  return "a value";
}

} // namespace

llvm::StringRef gmopt::memorySpaceName(MemorySpace space) {
  switch (space) {
  case MemorySpace::Device:
    return "device";
  case MemorySpace::Host:
    return "host";
  }
  llvm_unreachable("unknown memory space");
}

std::optional<MemorySpace> gmopt::parseMemorySpace(llvm::StringRef name) {
  if (name == "device")
    return MemorySpace::Device;
  if (name == "host")
    return MemorySpace::Host;
  return std::nullopt;
}

bool gmopt::isCopyStart(const Node &node) {
  return isOp(node, kCopyToHostStartOp) || isOp(node, kCopyToDeviceStartOp);
}

bool gmopt::isCopyWait(const Node &node) { return isOp(node, kCopyWaitOp); }

bool gmopt::isCopyOp(llvm::StringRef domain, llvm::StringRef opType) {
  return domain == kGmoptDomain &&
         (opType == kCopyToHostStartOp || opType == kCopyToDeviceStartOp ||
          opType == kCopyWaitOp);
}

MemorySpace gmopt::getMemorySpace(const Value &value) {
  const Node *def = value.getDefiningNode();
  if (!def || def->getDomain() != kGmoptDomain)
    return MemorySpace::Device;
  // A wait's result shares the bytes of the copy start it waits for.
  if (isCopyWait(*def) && def->getNumOperands() && def->getOperand(0))
    def = def->getOperand(0)->getDefiningNode();
  return def && isOp(*def, kCopyToHostStartOp) ? MemorySpace::Host
                                               : MemorySpace::Device;
}

llvm::Error gmopt::checkMemorySpaceRules(const Node &node) {
  bool start = isCopyStart(node), wait = isCopyWait(node);
  // Host memory is read only by the copies (kernels cannot address it); a
  // start's source is checked below, with a message of its own.
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
    const Value *operand = node.getOperand(i);
    if (!operand || getMemorySpace(*operand) != MemorySpace::Host)
      continue;
    if (wait || (start && i == 0))
      continue;
    return failAt(node, llvm::formatv("operand {0} ({1}) is in host memory; "
                                      "only CopyToDeviceStart and CopyWait "
                                      "read host memory",
                                      i, label(operand)));
  }
  if (!start && !wait)
    return llvm::Error::success();
  if (node.getNumOperands() == 0 || !node.getOperand(0) ||
      node.getNumResults() != 1 || !node.getResult(0))
    return failAt(node, "a copy op has its operands and one result");
  const Value *result = node.getResult(0);
  if (start) {
    const Value *source = node.getOperand(0);
    MemorySpace from = getMemorySpace(*source);
    if (isOp(node, kCopyToHostStartOp) && from != MemorySpace::Device)
      return failAt(node, label(source) + " is already in host memory");
    if (isOp(node, kCopyToDeviceStartOp) && from != MemorySpace::Host)
      return failAt(node, label(source) +
                              " is in device memory; CopyToDeviceStart "
                              "copies a CopyToHostStart's waited result");
    // One reader, the wait: nothing may read bytes still in flight, and the
    // wait finishes exactly one copy.
    const Node *waiter = nullptr;
    for (OpOperand &use : result->getUses()) {
      const Node *user = use.getOwner();
      if (!user)
        return failAt(node, "a copy start's result cannot be a graph output");
      if (!isCopyWait(*user) || use.getIndex() != 0 || waiter)
        return failAt(node, "a copy start's result is read only by its "
                            "CopyWait, as operand 0 (used by " +
                                user->describe() + ")");
      waiter = user;
    }
    if (!waiter)
      return failAt(node, "the copy is never waited for (no CopyWait reads "
                          "its result)");
    return llvm::Error::success();
  }
  if (node.getNumOperands() != 2 || !node.getOperand(1))
    return failAt(node, "CopyWait takes the copy's target and its source");
  const Node *copy = node.getOperand(0)->getDefiningNode();
  if (!copy || !isCopyStart(*copy))
    return failAt(node, "operand 0 (" + label(node.getOperand(0)) +
                            ") is not the result of a CopyToHostStart or "
                            "CopyToDeviceStart");
  if (copy->getOperand(0) != node.getOperand(1))
    return failAt(node, "operand 1 (" + label(node.getOperand(1)) +
                            ") is not the source of the copy it waits for (" +
                            label(copy->getOperand(0)) + ")");
  if (result->isGraphOutput())
    return failAt(node, "a CopyWait's result cannot be a graph output (it "
                        "shares the bytes of the copy)");
  return llvm::Error::success();
}
