//===- StepCost.cpp - Predicted time of one training step -----------------===//

#include "passes/planning/StepCost.h"

#include "ir/Collectives.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/StringSwitch.h"

#include <algorithm>
#include <cmath>

using namespace gmopt;

// Fields: name; matrix fp32, fp16, bf16 and vector FLOP/s; bytes/s; seconds
// per kernel; network bytes/s.

StepThroughput StepThroughput::cpu() {
  // Two cores: OpenBLAS sgemm sustains about 90 GFLOP/s on the shapes of
  // the testdata graphs; elementwise kernels are bandwidth-bound. Checked
  // against measured steps by bench/cost_model.py (within 0.6-2.4x).
  // The network: 10 GbE-class, about 1 GB/s per rank.
  return {"cpu", 90e9, 30e9, 30e9, 8e9, 20e9, 2e-6, 1e9};
}

StepThroughput StepThroughput::cuda() {
  // H200: dense tensor-core throughput as sustained by large GEMMs (about
  // 70% of the data sheet's 989 TFLOP/s fp16/bf16, 67 TFLOP/s fp32 without
  // TF32), HBM3e at about 4 TB/s sustained, a few microseconds per launch.
  // The network: one 400 Gb/s NIC per GPU, about 45 GB/s sustained.
  return {"cuda", 50e12, 650e12, 650e12, 30e12, 4.0e12, 5e-6, 45e9};
}

double StepThroughput::balance() const {
  return bandwidth > 0 ? matrixFp32 / bandwidth : 0;
}

llvm::Expected<StepThroughput> StepThroughput::lookup(llvm::StringRef name) {
  if (name == "cpu")
    return cpu();
  if (name == "cuda")
    return cuda();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "unknown cost model '%s' (expected cpu or "
                                 "cuda)",
                                 name.str().c_str());
}

uint64_t StepCost::totalFlops() const {
  uint64_t sum = 0;
  for (uint64_t f : flops)
    sum += f;
  return sum;
}

double StepCost::totalSeconds() const {
  double sum = 0;
  for (double s : seconds)
    sum += s;
  return sum;
}

uint64_t StepCost::accumulatedFlops(unsigned accumulate) const {
  const unsigned optimizer = unsigned(Phase::Optimizer);
  return (totalFlops() - flops[optimizer]) * accumulate + flops[optimizer];
}

double StepCost::accumulatedSeconds(unsigned accumulate) const {
  const unsigned optimizer = unsigned(Phase::Optimizer);
  return (totalSeconds() - seconds[optimizer]) * accumulate +
         seconds[optimizer];
}

namespace {

bool isMatrixOp(const Node &node) {
  return llvm::StringSwitch<bool>(node.getOpType())
      .Cases("MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul", true)
      .Cases("ConvGrad", "FusedGemm", "TransposeMatMul", true)
      .Cases("FusedAttention", "FusedAttentionGrad", true)
      .Cases("FusedLinearCrossEntropy", "FusedLinearCrossEntropyGrad", true)
      .Default(false);
}

bool isView(const Node &node) {
  const OpSchema *schema = OpRegistry::instance().lookup(node);
  return schema && schema->hasTrait(TraitView);
}

} // namespace

double gmopt::predictNodeSeconds(const Node &node,
                                 const StepThroughput &throughput) {
  if (isView(node))
    return 0;
  OpCost cost = estimateCost(node);
  double rate = throughput.vector;
  if (isMatrixOp(node)) {
    DType type = node.getNumResults() && node.getResult(0)
                     ? node.getResult(0)->getType().getDType()
                     : DType::F32;
    rate = type == DType::F16    ? throughput.matrixFp16
           : type == DType::BF16 ? throughput.matrixBf16
                                 : throughput.matrixFp32;
  }
  double compute = rate > 0 ? double(cost.flops) / rate : 0;
  // The collectives' ring traffic goes over the network, not memory.
  uint64_t network = collectiveNetworkBytes(node);
  uint64_t local = cost.bytesRead + cost.bytesWritten;
  local -= std::min(local, 2 * network);
  double traffic =
      throughput.bandwidth > 0 ? double(local) / throughput.bandwidth : 0;
  double sending =
      throughput.network > 0 ? double(network) / throughput.network : 0;
  return throughput.nodeOverhead + std::max(compute, traffic) + sending;
}

uint64_t gmopt::recomputeCostFlops(const Node &node,
                                   const StepThroughput &throughput) {
  if (isView(node))
    return 0;
  OpCost cost = estimateCost(node);
  double moved = double(cost.bytesRead + cost.bytesWritten);
  return std::max(cost.flops,
                  uint64_t(std::llround(moved * throughput.balance())));
}

StepCost gmopt::estimateStepCost(const Module &module,
                                 const StepThroughput &throughput) {
  StepCost result;
  for (const Node &node : module.getGraph().getNodes()) {
    // Gradient accumulation runs with every micro-step, so it is priced
    // with the backward pass; only the update is the optimizer's.
    Phase nodePhase = node.getPhase();
    if (nodePhase == Phase::Optimizer &&
        module.getSignature().references(&node))
      nodePhase = Phase::Backward;
    unsigned phase = unsigned(nodePhase);
    OpCost cost = estimateCost(node);
    result.flops[phase] += cost.flops;
    result.bytes[phase] += cost.bytesRead + cost.bytesWritten;
    double seconds = predictNodeSeconds(node, throughput);
    result.seconds[phase] += seconds;
    if (seconds > 0)
      ++result.kernels;
    result.communicationBytes += collectiveNetworkBytes(node);
  }
  return result;
}
