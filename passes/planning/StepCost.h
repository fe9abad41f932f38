//===- StepCost.h - Predicted time of one training step ---------*- C++ -*-===//
//
// The cost model the memory-limit search (tools/driver/FitMemory.h) ranks
// its candidates by, stated so that it can be checked. Each node costs a
// fixed dispatch overhead plus a roofline: the larger of its FLOPs over
// the backend's throughput and its bytes moved over the backend's memory
// bandwidth. FLOPs and bytes are the op registry's (estimateCost). Matrix
// products and convolutions run at the backend's matrix throughput for
// the node's element type (fp32, fp16, bf16); every other op at its vector
// throughput. View nodes cost nothing (no kernel runs). A data-parallel
// collective's ring traffic (ir/Collectives.h) is priced at the network
// bandwidth instead of the memory bandwidth, added to its local roofline. A
// step of K accumulation micro-steps runs the forward, backward and recompute
// nodes (and the gradient accumulation) K times, the optimizer's update once.
//
// The throughputs are per backend and stated in StepThroughput's presets;
// bench/cost_model.py compares the CPU preset's predictions with measured
// step times on the testdata graphs. The fused attention and linear
// cross-entropy ops are matrix work (their FLOPs are their products).
//
// Recompute is priced in FLOP-equivalents (recomputeCostFlops): a node
// whose FLOPs take longer at the matrix throughput than its bytes take at
// the memory bandwidth (products, convolutions, the fused ops) costs its
// FLOPs; any other (pointwise, normalisation, softmax, dropout, casts)
// costs the bytes it reads and writes times the backend's balance, the
// FLOPs its matrix units do in the time memory moves one byte (fp32 matrix
// throughput over bandwidth: 4.5 on the CPU preset, 12.5 on CUDA). A
// pointwise op that does one FLOP per 8 bytes is priced as what it costs
// in time, not as free. Views cost nothing.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PLANNING_STEPCOST_H
#define GMOPT_PASSES_PLANNING_STEPCOST_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <string>

namespace gmopt {

class Module;
class Node;

/// What one backend sustains.
struct StepThroughput {
  std::string name;
  /// Matrix products and convolutions, FLOP/s, by element type.
  double matrixFp32 = 0, matrixFp16 = 0, matrixBf16 = 0;
  /// Every other op, FLOP/s.
  double vector = 0;
  /// Memory bandwidth, bytes/s.
  double bandwidth = 0;
  /// Fixed cost of dispatching one kernel, seconds.
  double nodeOverhead = 0;
  /// Network bandwidth of the data-parallel collectives, bytes/s per rank
  /// (each sends its ring traffic, ir/Collectives.h, at this rate).
  double network = 0;

  /// The CPU backend on this project's 2-core machines (OpenBLAS sgemm; the
  /// CPU kernels convert 16-bit operands to fp32, so 16-bit products are
  /// slower there, not faster).
  static StepThroughput cpu();
  /// The CUDA backend on an H100/H200-class device (cuBLASLt tensor cores).
  static StepThroughput cuda();
  /// FLOPs the fp32 matrix units do in the time memory moves one byte:
  /// the rate at which recomputeCostFlops prices moved bytes.
  double balance() const;
  /// A preset by name (cpu, cuda), or an error listing them.
  static llvm::Expected<StepThroughput> lookup(llvm::StringRef name);
};

/// The predicted cost of one step.
struct StepCost {
  /// Indexed by Phase (forward, backward, optimizer, recompute); gradient
  /// accumulation nodes count as backward.
  std::array<uint64_t, 4> flops{};
  std::array<uint64_t, 4> bytes{};
  std::array<double, 4> seconds{};
  /// Kernels dispatched (non-view nodes).
  uint32_t kernels = 0;
  /// Bytes one rank sends to the others through the module's collectives
  /// (their ring traffic, ir/Collectives.h), once each.
  uint64_t communicationBytes = 0;

  uint64_t totalFlops() const;
  double totalSeconds() const;
  /// FLOPs and seconds of a step of \p accumulate micro-steps, each the
  /// step this cost describes minus its optimizer update.
  uint64_t accumulatedFlops(unsigned accumulate) const;
  double accumulatedSeconds(unsigned accumulate) const;
};

/// Predicted seconds of \p node on \p throughput.
double predictNodeSeconds(const Node &node, const StepThroughput &throughput);

/// What recomputing \p node costs on \p throughput, in FLOP-equivalents:
/// the larger of its FLOPs and its bytes read and written times
/// StepThroughput::balance() (0 for views).
uint64_t recomputeCostFlops(const Node &node, const StepThroughput &throughput);

/// The predicted cost of one step of \p module.
StepCost estimateStepCost(const Module &module,
                          const StepThroughput &throughput);

} // namespace gmopt

#endif // GMOPT_PASSES_PLANNING_STEPCOST_H
