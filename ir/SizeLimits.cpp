//===- SizeLimits.cpp - The largest tensors and plans gmopt accepts -------===//
//
// The size checks of SizeLimits.h: the product of a shape's extents is
// built one extent at a time against the limit (never multiplied first and
// compared after), allocations go through malloc so that failure is a
// null pointer, not an exception, and a message that names a limit is
// recognised as a size-limit error after it has become text.
//
//===----------------------------------------------------------------------===//

#include "ir/SizeLimits.h"

#include "ir/Module.h"
#include "ir/Plan.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <memory>

using namespace gmopt;

bool gmopt::fitsSizeLimit(const TensorType &type) {
  if (!type.hasRank())
    return true;
  // Zero extents are skipped: kernels multiply subsets of the extents, and
  // those products must be bounded even for an empty tensor.
  uint64_t bytes = std::max(1u, dtypeSize(type.getDType()));
  for (const Dim &d : type.getDims()) {
    if (!d.isStatic())
      continue;
    uint64_t extent = static_cast<uint64_t>(d.getExtent());
    if (extent == 0)
      continue;
    if (extent > kMaxTensorBytes || bytes > kMaxTensorBytes / extent)
      return false;
    bytes *= extent;
  }
  return true;
}

llvm::Error gmopt::checkTensorSize(const TensorType &type,
                                   const llvm::Twine &what) {
  if (fitsSizeLimit(type))
    return llvm::Error::success();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 what + " has type " + type.str() +
                                     ", larger than gmopt's limit of " +
                                     kMaxTensorBytesText + " per tensor");
}

llvm::Error gmopt::checkWorkspaceSizes(const Module &module,
                                       const WorkspaceModel &workspace) {
  if (!workspace)
    return llvm::Error::success();
  for (const Node &node : module.getGraph().getNodes()) {
    uint64_t requested = workspace(node);
    if (requested > kMaxTensorBytes)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "the kernel workspace of node " + node.describe() + " (" +
              llvm::Twine(requested) +
              " bytes) is larger than gmopt's limit of " + kMaxTensorBytesText);
  }
  return llvm::Error::success();
}

llvm::Expected<TensorData> gmopt::allocateTensorData(
    const TensorType &type,
    llvm::function_ref<void(llvm::MutableArrayRef<uint8_t>)> fill) {
  assert(type.hasStaticShape() && "allocating a tensor of a dynamic type");
  if (llvm::Error err = checkTensorSize(type, "a tensor"))
    return err;
  uint64_t size = type.getSizeInBytes();
  // malloc(0) may return null; a zero-size tensor still gets a pointer.
  void *memory = std::malloc(size ? size : 1);
  if (!memory)
    return llvm::createStringError(std::errc::not_enough_memory,
                                   "out of memory allocating %llu bytes for %s",
                                   static_cast<unsigned long long>(size),
                                   type.str().c_str());
  std::shared_ptr<void> owner(memory, std::free);
  llvm::MutableArrayRef<uint8_t> bytes(static_cast<uint8_t *>(memory), size);
  fill(bytes);
  return TensorData(type, std::move(owner), bytes);
}

bool gmopt::isSizeLimitMessage(llvm::StringRef message) {
  return message.contains(kMaxTensorBytesText) ||
         message.contains(kMaxTotalBytesText);
}

llvm::Error gmopt::addToPlanTotal(uint64_t &total, uint64_t bytes) {
  total += alignBuffer(bytes);
  if (total > kMaxTotalBytes)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "cannot plan memory: the graph's values add up to more than " +
            kMaxTotalBytesText);
  return llvm::Error::success();
}
