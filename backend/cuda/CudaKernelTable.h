//===- CudaKernelTable.h - The CUDA table without the toolkit --*- C++ -*-===//
//
// What the CUDA kernel table (CudaDispatch.cpp, built with the toolkit)
// shows to code that must build without it: its scratch column and a
// device-free look at a node's prepared kernel.
//
// The scratch column holds, for each op whose CUDA kernel asks for planned
// scratch (a GEMM's cuBLASLt workspace, a convolution's cuDNN workspace and
// padded copies, batch norm's unreturned statistics, a 16-bit scatter's fp32
// accumulator, a ZeRO collective's staging buffer, the fused attention
// gradient's row sums and the fused cross entropy's logits tile), its rule,
// keyed by op identity like the kernels. It is the planner's workspace model
// (getCudaKernelWorkspaceBytes), which a CPU-only machine needs to plan for
// a GPU; the kernel table copies each rule into its entry
// (dispatch::KernelEntry::scratch) and a prepared kernel carries its size.
// An op that is not listed needs no scratch.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDAKERNELTABLE_H
#define GMOPT_BACKEND_CUDA_CUDAKERNELTABLE_H

#include "ir/IR.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gmopt {
namespace cuda {

/// The planned scratch bytes one op's kernel needs for a node (0 where the
/// node needs none, or its shapes are not static).
using ScratchFn = uint64_t (*)(const Node &node);

/// The scratch rule of (\p domain, \p opType)'s CUDA kernel, or null when
/// the kernel needs no scratch.
ScratchFn getKernelScratchRule(llvm::StringRef domain, llvm::StringRef opType);

/// Every op with a scratch rule, as "domain::op" (the kernel table's key).
std::vector<std::string> listKernelScratchOps();

/// What preparing a node's CUDA kernel gives, seen without a device.
struct HostPreparedKernel {
  /// The entry decodes the node once, at prepare: its launches read the
  /// descriptor and decode nothing.
  bool decodedAtPrepare = false;
  /// The entry's decode needs the device (a cuBLASLt heuristic, cuDNN):
  /// only the check ran here.
  bool needsDevice = false;
  /// The scratch the entry's rule sizes (the prepared kernel's).
  uint64_t scratchBytes = 0;
};

/// True where (\p domain, \p opType)'s CUDA kernel-table entry decodes its
/// nodes once, at prepare; false where its launches still decode, where it
/// has no entry, or where the CUDA backend is not built.
bool isCudaKernelDecodedAtPrepare(llvm::StringRef domain,
                                  llvm::StringRef opType);

/// Prepares \p node's CUDA kernel without a device, as the device would
/// (entry found by schema, arity checked, the entry's decode run unless it
/// needs the device, where its check runs instead): the node's error, or
/// what the prepared kernel holds. Fails where the CUDA backend is not
/// built.
llvm::Expected<HostPreparedKernel> prepareCudaKernelOnHost(const Node &node);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDAKERNELTABLE_H
