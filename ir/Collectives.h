//===- Collectives.h - Names of gmopt's collective graph ops ----*- C++ -*-===//
//
// Data-parallel training exchanges gradients between ranks with collective
// operations that are ordinary graph nodes, so that every pass sees them
// and the planner counts their buffers. They live in gmopt's own domain
// `gmopt` rather than in com.microsoft: ONNX Runtime's NcclAllReduce names
// one transport (NCCL), only sums and carries no rank count, while gmopt's
// op is transport-neutral (MPI on the CPU backend, NCCL on CUDA), can average
// and records the world size it was placed for, which its cost model and the
// per-rank planning of `gmopt-compile --ranks N` read without any machines.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_COLLECTIVES_H
#define GMOPT_IR_COLLECTIVES_H

#include "ir/IR.h"

#include <cstdint>

namespace gmopt {

/// gmopt's own op domain (collectives).
constexpr llvm::StringLiteral kGmoptDomain = "gmopt";

/// `gmopt.AllReduce(x1, ..., xk) {reduction = "mean"|"sum", ranks = N}`:
/// result i is the element-wise sum (or mean) of operand i over all N ranks.
/// The k operands form one bucket that moves in a single collective call.
constexpr llvm::StringLiteral kAllReduceOp = "AllReduce";

/// Bytes that one rank sends (and receives) in a ring all-reduce of
/// \p bucketBytes over \p ranks ranks: 2 (N - 1) / N of the bucket; 0 for
/// a single rank.
uint64_t ringAllReduceTraffic(uint64_t bucketBytes, int64_t ranks);

} // namespace gmopt

#endif // GMOPT_IR_COLLECTIVES_H
