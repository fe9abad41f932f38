//===- MemorySpaces.h - Where planned buffers live, and the copy ops -*- C++ -*-===//
//
// gmopt plans every buffer in one of two memory spaces: the device's memory
// (the GPU's on CUDA) and host memory (page-locked on CUDA) that holds
// tensors offloaded between a copy to the host and the copy back. Each space
// has an arena of its own, planned, validated and accounted apart, so the
// device peak a plan promises excludes the host arena.
//
// Moving a tensor is three ops of the `gmopt` domain, split like the
// overlapped all-reduce so the schedule and liveness see every step:
//   %h  = gmopt.CopyToHostStart(%x)      start copying %x to host memory
//   %h1 = gmopt.CopyWait(%h, %x)         wait for it (%h1 aliases %h)
//   ...
//   %y  = gmopt.CopyToDeviceStart(%h1)   start copying back
//   %y1 = gmopt.CopyWait(%y, %h1)        wait for it (%y1 aliases %y)
// A wait names the copy's source as its second operand, so the source stays
// live (and unwritten) until the asynchronous copy that reads it is done. A
// value's space is derived from the graph, never stored on the value: the
// result of a CopyToHostStart, and its wait's alias of it, live in host
// memory; everything else on the device.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_MEMORYSPACES_H
#define GMOPT_IR_MEMORYSPACES_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace gmopt {

class Graph;
class Node;
class Value;

/// Where a planned buffer lives. Each space has an arena of its own, planned,
/// validated and accounted apart: the device peak excludes the host arena.
enum class MemorySpace : uint8_t {
  /// The device's memory (the GPU's on CUDA; the CPU device's own heap).
  Device,
  /// Host memory that holds offloaded tensors between a copy-start and its
  /// copy-wait: page-locked on CUDA, so copies overlap compute.
  Host,
};

/// Number of MemorySpace enumerators.
constexpr unsigned kNumMemorySpaces = 2;

/// `device`, `host`.
llvm::StringRef memorySpaceName(MemorySpace space);
/// Inverse of memorySpaceName.
std::optional<MemorySpace> parseMemorySpace(llvm::StringRef name);

/// `gmopt.CopyToHostStart(x) -> h`: starts copying device tensor x into h,
/// a host-memory tensor of x's type; h may be read only by its CopyWait.
constexpr llvm::StringLiteral kCopyToHostStartOp = "CopyToHostStart";
/// `gmopt.CopyToDeviceStart(h) -> x`: starts copying host tensor h into x,
/// a device tensor of h's type; x may be read only by its CopyWait.
constexpr llvm::StringLiteral kCopyToDeviceStartOp = "CopyToDeviceStart";
/// `gmopt.CopyWait(dst, src) -> dst'`: waits for the copy of src into dst
/// (dst the result of a copy start whose operand is src); dst' shares dst's
/// bytes and is what later nodes read.
constexpr llvm::StringLiteral kCopyWaitOp = "CopyWait";

/// True for CopyToHostStart and CopyToDeviceStart.
bool isCopyStart(const Node &node);
/// True for CopyWait.
bool isCopyWait(const Node &node);
/// True for any of the three copy ops.
inline bool isCopyOp(const Node &node) {
  return isCopyStart(node) || isCopyWait(node);
}
/// True if \p domain and \p opType name a copy op: the plan interpreter
/// runs those itself, on every device, through the Device's asynchronous
/// copies, so no device's kernel table has them.
bool isCopyOp(llvm::StringRef domain, llvm::StringRef opType);

/// The space of \p value: Host for a CopyToHostStart result and for a
/// CopyWait of one; Device for everything else. O(1).
MemorySpace getMemorySpace(const Value &value);

/// Checks the memory-space rules at \p node: only a CopyToDeviceStart
/// (operand 0) and a CopyWait read host memory; a CopyToHostStart copies a
/// device tensor and a CopyToDeviceStart a host one; a copy start's result
/// is read by exactly one node, its CopyWait, as operand 0, and is no graph
/// output; a CopyWait waits on a copy start's result and names that start's
/// operand as its own operand 1; a CopyWait's result is no graph output (it
/// shares the bytes of the copy it waits for). The error names the rule.
llvm::Error checkMemorySpaceRules(const Node &node);

} // namespace gmopt

#endif // GMOPT_IR_MEMORYSPACES_H
