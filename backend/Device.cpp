//===- Device.cpp - What every Device shares ------------------------------===//
//
// The Device interface's defaults (a host arena in ordinary memory, copies
// that complete before they return, events that are always complete) and
// getKernelSchema, which every device's prepare starts with: a node's schema
// among its op's registered versions, its arity checked against it.
//
//===----------------------------------------------------------------------===//

#include "backend/Device.h"

#include "ir/OpRegistry.h"
#include "ir/Plan.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <memory>
#include <string>

using namespace gmopt;

Device::~Device() = default;
PreparedKernel::~PreparedKernel() = default;
DeviceEvent::~DeviceEvent() = default;

llvm::Expected<void *> Device::allocateHost(uint64_t bytes) {
  // aligned_alloc needs a multiple of the alignment; a zero-size request
  // still gets a distinct address.
  uint64_t rounded = alignBuffer(bytes);
  if (rounded < bytes)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "cannot allocate %llu host-arena bytes: the size overflows",
        static_cast<unsigned long long>(bytes));
  void *address = std::aligned_alloc(kBufferAlignment,
                                     rounded ? rounded : kBufferAlignment);
  if (!address)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "out of host memory allocating %llu bytes for the host arena",
        static_cast<unsigned long long>(bytes));
  return address;
}

void Device::deallocateHost(void *address) { std::free(address); }

llvm::Expected<std::unique_ptr<DeviceEvent>>
Device::startCopyToHost(void *target, const void *source, uint64_t bytes) {
  if (auto err = synchronize())
    return err;
  if (auto err = copyToHost(target, source, bytes))
    return err;
  return std::make_unique<CompletedEvent>();
}

llvm::Expected<std::unique_ptr<DeviceEvent>>
Device::startCopyToDevice(void *target, const void *source, uint64_t bytes) {
  if (auto err = synchronize())
    return err;
  if (auto err = copyToDevice(target, source, bytes))
    return err;
  return std::make_unique<CompletedEvent>();
}

llvm::Error Device::waitEvent(const DeviceEvent &) {
  return llvm::Error::success();
}

namespace {

/// The node's arity against \p schema: an error message, or empty.
std::string checkArity(const Node &node, const OpSchema &schema) {
  auto range = [](unsigned min, unsigned max, llvm::StringRef noun) {
    std::string plural = noun.str() + (min == 1 && max == 1 ? "" : "s");
    if (min == max)
      return std::to_string(min) + " " + plural;
    if (max == UINT_MAX)
      return "at least " + std::to_string(min) + " " + plural;
    return std::to_string(min) + " to " + std::to_string(max) + " " + plural;
  };
  unsigned operands = node.getNumOperands();
  if (operands < schema.minInputs || operands > schema.maxInputs)
    return "its schema takes " +
           range(schema.minInputs, schema.maxInputs, "input") +
           ", the node has " + std::to_string(operands);
  for (unsigned i = 0, e = std::min(operands, schema.minInputs); i != e; ++i)
    if (!node.getOperand(i))
      return "required input " + std::to_string(i) + " is missing";
  unsigned results = node.getNumResults();
  if (results < schema.minOutputs || results > schema.maxOutputs)
    return "its schema gives " +
           range(schema.minOutputs, schema.maxOutputs, "output") +
           ", the node has " + std::to_string(results);
  return std::string();
}

/// Every registered version of each op, newest first, by "domain::type".
const llvm::StringMap<llvm::SmallVector<const OpSchema *, 2>> &
getSchemaVersions() {
  static const llvm::StringMap<llvm::SmallVector<const OpSchema *, 2>>
      versions = [] {
        llvm::StringMap<llvm::SmallVector<const OpSchema *, 2>> byOp;
        // all() is ordered by domain, name and version.
        for (const OpSchema *schema : OpRegistry::instance().all()) {
          auto &list = byOp[schema->domain + "::" + schema->name];
          list.insert(list.begin(), schema);
        }
        return byOp;
      }();
  return versions;
}

} // namespace

llvm::Expected<const OpSchema *>
gmopt::getKernelSchema(const Node &node, llvm::StringRef deviceName) {
  auto fail = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  // A kernel serves every version of its op (the verifier holds a module to
  // its opset imports): the node's own version first, then any other whose
  // arity the node has (ReduceMean's axes input of opset 18 at opset 17).
  const OpSchema *own = OpRegistry::instance().lookup(node);
  std::string ownError = own ? checkArity(node, *own) : std::string();
  if (own && ownError.empty())
    return own;
  auto versions = getSchemaVersions().find(
      (node.getDomain() + "::" + node.getOpType()).str());
  if (versions == getSchemaVersions().end())
    return fail("no " + deviceName + " kernel for '" + node.getOp().str() +
                "' (node " + node.describe() + "): the op is not registered");
  for (const OpSchema *schema : versions->second)
    if (schema != own && checkArity(node, *schema).empty())
      return schema;
  if (!own)
    ownError = checkArity(node, *versions->second.front());
  return fail(node.getOp().str() + ": " + ownError + " (node " +
              node.describe() + ")");
}
