//===- CudaKernels.h - Launchers of gmopt's own CUDA kernels ----*- C++ -*-===//
//
// The boundary between the host code that decodes a node (CudaDispatch.cpp,
// compiled by the host compiler with LLVM) and the kernels (*.cu, compiled
// by nvcc without LLVM). Launchers take raw device pointers, sizes and
// plain parameter structs, enqueue on the given stream and return the
// launch status; they never allocate and never synchronize. Only built
// with the CUDA toolkit (GMOPT_HAVE_CUDA).
//
// Bad data that only the device sees (a label or index out of range)
// cannot fail a launch: the kernel records a fault code and the launch id
// in a device word, the result element becomes NaN or zero, and the
// device reports the fault, naming the node, when it next synchronizes
// (readKernelFault).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDAKERNELS_H
#define GMOPT_BACKEND_CUDA_CUDAKERNELS_H

#include "backend/cuda/BroadcastIndexing.h"
#include "backend/cuda/ElementwiseMath.h"
#include "backend/cuda/PadMath.h"
#include "backend/cuda/PoolMath.h"
#include "backend/cuda/ReduceMath.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gmopt {
namespace cuda {

/// Element storage the kernels read and write.
enum class Storage : int32_t { F32, F16, BF16, F64, I64, I32, Bool };

/// Fault codes a kernel records.
enum class KernelFault : int32_t {
  None = 0,
  LabelOutOfRange = 1,
  IndexOutOfRange = 2,
  /// Operand values give another output shape than the planned one
  /// (NonZero's count, Range's length, OneHot's depth, BroadcastGradientArgs'
  /// axes; ShapeKernels.cu).
  OutputShapeMismatch = 3,
  /// An operand value the op rejects (Range's zero delta, shapes that do not
  /// broadcast; ShapeKernels.cu).
  InvalidOperandValue = 4,
};

/// A recorded fault: the code and the launch id that raised it first.
struct KernelFaultRecord {
  int32_t code = 0;
  int32_t launchId = 0;
};

/// Sets, in stream order, the launch id that kernels which can fault
/// record (the device numbers its launches within a step and calls this
/// only before those kernels).
cudaError_t setKernelLaunchId(int32_t launchId, cudaStream_t stream);
/// Reads and clears the fault word (call after a synchronization).
cudaError_t readKernelFault(KernelFaultRecord &record, cudaStream_t stream);
/// The address of the device's step counter (a __device__ word, no
/// allocation): a CUDA graph copies the step into it from page-locked host
/// memory as its first node, and its random kernels read it
/// (DropoutParams::stepOnDevice).
cudaError_t getStepCounter(uint64_t **counter);
/// The device addresses of the fault word and the launch id, for kernels
/// compiled in other .cu files (IndexKernels.cu) to raise faults into.
cudaError_t getKernelFaultWord(KernelFaultRecord **record,
                               const int32_t **launchId);

/// out = op(a, b, c) elementwise with broadcasting; every operand and the
/// output share \p storage (a float type); \p param is the op's scalar
/// attribute where it has one.
cudaError_t launchElementwise(ElementwiseOp op, Storage storage, const void *a,
                              const void *b, const void *c, void *out,
                              int64_t elements, const BroadcastIndexing &index,
                              cudaStream_t stream, float param = 0.0f,
                              float param2 = 0.0f);

/// out[offset] = in[offset] over any element type of \p elementBytes (1, 2,
/// 4 or 8): the strides make it a copy, a transpose, an expand, a slice or
/// one piece of a concat / split.
cudaError_t launchStridedCopy(int64_t elementBytes, const void *in, void *out,
                              int64_t elements, const BroadcastIndexing &index,
                              cudaStream_t stream);

/// Pad of any mode over any element type of \p elementBytes (1, 2, 4 or
/// 8): out[i] = in[padSourceOffset(index, i)], or the low bytes of \p
/// pattern where constant mode pads.
cudaError_t launchPad(int64_t elementBytes, const void *in, void *out,
                      int64_t elements, const PadIndexing &index,
                      uint64_t pattern, cudaStream_t stream);

/// Where: out = cond ? x : y with broadcasting (slots 0, 1, 2 of \p index
/// are cond, x and y), over any element type of \p elementBytes.
cudaError_t launchWhere(int64_t elementBytes, const uint8_t *cond,
                        const void *x, const void *y, void *out,
                        int64_t elements, const BroadcastIndexing &index,
                        cudaStream_t stream);

/// Predicates producing bool with broadcasting: the comparisons (Equal,
/// Less, Greater, LessOrEqual, GreaterOrEqual; both operands of \p
/// storage, int64 compared exactly), the logical ops on bool (And, Or,
/// Xor), and the one-operand tests (IsNaN, IsInf by sign, Not), which read
/// operand a only.
enum class CompareOp : int32_t {
  Equal,
  Less,
  Greater,
  LessOrEqual,
  GreaterOrEqual,
  And,
  Or,
  Xor,
  IsNaN,
  IsInf,
  IsPositiveInf,
  IsNegativeInf,
  Not,
};
cudaError_t launchCompare(CompareOp op, Storage storage, const void *a,
                          const void *b, uint8_t *out, int64_t elements,
                          const BroadcastIndexing &index, cudaStream_t stream);

/// Fills \p elements of \p elementBytes (1, 2, 4 or 8) with the low bytes
/// of \p pattern (ConstantOfShape).
cudaError_t launchFill(int64_t elementBytes, uint64_t pattern, void *out,
                       int64_t elements, cudaStream_t stream);

/// Element-by-element conversion (Cast): floats round to nearest even,
/// floats to integers truncate, anything to bool is `!= 0`.
cudaError_t launchCast(Storage from, Storage to, const void *in, void *out,
                       int64_t elements, cudaStream_t stream);

/// Dropout of \p elements with gmopt's Philox stream: out = keep ? x *
/// scale : 0, mask (bool, may be null) = keep. \p ratio and \p training
/// are read on the device (fp32 / bool, either may be null: 0.5 / false)
/// unless \p ratioValue >= 0 says the ratio is a known constant.
struct DropoutParams {
  uint64_t seed = 0, streamId = 0, step = 0;
  /// When set, the step is read here on the device instead of from `step`:
  /// a step captured in a CUDA graph is replayed with the counter updated
  /// (getStepCounter), never with the step of the capture baked in.
  const uint64_t *stepOnDevice = nullptr;
  const float *ratio = nullptr;
  const uint8_t *training = nullptr;
  float ratioValue = -1;
  /// True: no training input and no way to be training (identity).
  bool inference = false;
};
#ifdef __CUDACC__
/// The step a random kernel keys its Philox stream with: the device
/// counter's when the launch was captured for a CUDA graph.
__device__ __forceinline__ uint64_t dropoutStep(const DropoutParams &params) {
  return params.stepOnDevice ? *params.stepOnDevice : params.step;
}
#endif
cudaError_t launchDropout(Storage storage, const void *x, void *out,
                          uint8_t *mask, int64_t elements,
                          const DropoutParams &params, cudaStream_t stream);
/// BitmaskDropout: Dropout's decisions with the mask packed 32 elements a
/// uint32 word (element i in bit i % 32 of word i / 32; may be null).
cudaError_t launchBitmaskDropout(Storage storage, const void *x, void *out,
                                 uint32_t *mask, int64_t elements,
                                 const DropoutParams &params,
                                 cudaStream_t stream);
/// DropoutGrad: dx = mask ? dy * scale : 0 (mask bool; null: dx = dy);
/// with \p bitmask, mask holds BitmaskDropout's words (BitmaskDropoutGrad).
cudaError_t launchDropoutGrad(Storage storage, const void *dy, const void *mask,
                              bool bitmask, void *dx, int64_t elements,
                              const DropoutParams &params, cudaStream_t stream);

/// InPlaceAccumulatorV2: buffer = overwrite ? value : buffer + value (the
/// flag read on the device, null: false); updated = true; bufferOut, when
/// not null and elsewhere, receives a copy.
cudaError_t launchAccumulate(Storage bufferStorage, void *buffer,
                             Storage valueStorage, const void *value,
                             const uint8_t *overwrite, uint8_t *updated,
                             void *bufferOut, int64_t elements,
                             cudaStream_t stream);
/// InPlaceAccumulator: newSum = update ? oldSum + value : oldSum (the
/// signal read on the device, null: true); newSum may be oldSum.
cudaError_t launchSumIf(Storage sumStorage, const void *oldSum,
                        Storage valueStorage, const void *value,
                        const uint8_t *updateSignal, void *newSum,
                        int64_t elements, cudaStream_t stream);

/// One parameter group of a fused optimizer launch (fp32 tensors).
struct OptimizerTensor {
  float *weight = nullptr;
  const float *grad = nullptr;
  float *m1 = nullptr;
  float *m2 = nullptr;
  int64_t elements = 0;
};
/// Tensors per fused launch (the table travels as a kernel parameter, so
/// nothing is allocated).
constexpr int kOptimizerTensorsPerLaunch = 24;
/// The hyper-parameters of AdamWOptimizer; lr, step and updateSignal are
/// device scalars (updateSignal may be null: update).
struct AdamWParams {
  float alpha, beta, epsilon, weightDecay;
  int32_t mode;
  bool correctBias;
  const float *lr;
  const int64_t *step;
  const uint8_t *updateSignal;
};
/// Updates up to kOptimizerTensorsPerLaunch groups in one launch.
cudaError_t launchAdamW(const OptimizerTensor *tensors, int count,
                        const AdamWParams &params, cudaStream_t stream);
/// SGD: w += -lr * g over up to kOptimizerTensorsPerLaunch groups.
cudaError_t launchSgd(const OptimizerTensor *tensors, int count,
                      const float *lr, const uint8_t *updateSignal,
                      cudaStream_t stream);
/// Writes the optimizer's flag output: \p value where the update signal is
/// true (or absent), else 0, into \p elements of int64 or bool storage.
cudaError_t launchOptimizerFlag(Storage storage, void *flag, int64_t elements,
                                const uint8_t *updateSignal,
                                cudaStream_t stream);

/// A tensor seen as [outer, n, inner]: a reduction or normalization runs
/// along the middle axis for each of the outer * inner rows.
struct RowShape {
  int64_t outer = 1, n = 1, inner = 1;
};
/// Softmax or LogSoftmax along the middle axis of \p shape.
cudaError_t launchSoftmax(Storage storage, const void *x, void *y,
                          RowShape shape, bool log, cudaStream_t stream);
/// SoftmaxGrad / LogSoftmaxGrad: dx from dy and the forward output y.
cudaError_t launchSoftmaxGrad(Storage storage, const void *dy, const void *y,
                              void *dx, RowShape shape, bool log,
                              cudaStream_t stream);
/// LayerNormalization over rows of \p width: y, and the fp32 mean and
/// inverse standard deviation per row when not null. \p simplified: RMS
/// norm (no mean subtraction, no bias). Column j reads scale element
/// j % \p scalePeriod and bias element j % \p biasPeriod (each period
/// divides \p width; \p width itself for a full-row parameter).
cudaError_t launchLayerNorm(Storage storage, const void *x, const void *scale,
                            const void *bias, void *y, float *mean,
                            float *invStd, int64_t rows, int64_t width,
                            int64_t scalePeriod, int64_t biasPeriod,
                            float epsilon, bool simplified,
                            cudaStream_t stream);
/// LayerNormalizationGrad: dx per row, and dscale / dbias (may be null)
/// summed over rows in row order.
cudaError_t launchLayerNormGrad(Storage storage, const void *dy, const void *x,
                                const void *scale, const float *mean,
                                const float *invStd, void *dx, void *dscale,
                                void *dbias, int64_t rows, int64_t width,
                                bool simplified, cudaStream_t stream);

/// Reductions along the middle axis of \p shape (out has outer * inner
/// elements), accumulated as ReduceMath.h says (ReduceKernels.cu).
cudaError_t launchReduce(ReduceKind kind, Storage storage, const void *x,
                         void *out, RowShape shape, cudaStream_t stream);

// The losses are launched through LossKernels.h.

/// Gather along \p axis seen as [outer, axisExtent, inner] with \p indices
/// (int64 or int32, negative counted from the end): out is [outer,
/// indexCount, inner], any element type of \p elementBytes.
cudaError_t launchGather(const void *data, const void *indices, bool indices32,
                         void *out, int64_t outer, int64_t axisExtent,
                         int64_t indexCount, int64_t inner,
                         int64_t elementBytes, cudaStream_t stream);
/// GatherGrad: dx (fp32, [outer, axisExtent, inner]) = 0, then the rows of
/// dy scattered back with atomic adds.
cudaError_t launchGatherGrad(const float *dy, const void *indices,
                             bool indices32, float *dx, int64_t outer,
                             int64_t axisExtent, int64_t indexCount,
                             int64_t inner, cudaStream_t stream);

// The pools and the convolution pad / crop kernels: CnnKernels.h.

/// Batch norm's per-channel outputs besides Y, each written when not null.
/// Training: running = input * momentum + batch statistic * (1 -
/// momentum), from the batch mean and inverse std cuDNN saved (the variance
/// recovered as 1 / invStd^2 - epsilon: the biased variance, as ONNX and
/// the CPU kernel use, not cuDNN's unbiased running variance). Inference:
/// running = input, saved mean = input mean, saved inverse std =
/// 1 / sqrt(input var + epsilon).
struct BatchNormStatsParams {
  const float *inputMean = nullptr, *inputVar = nullptr;
  /// Training: cuDNN's saved batch statistics.
  const float *batchMean = nullptr, *batchInvStd = nullptr;
  float *runningMean = nullptr, *runningVar = nullptr;
  /// Inference only: the saved outputs.
  float *savedMean = nullptr, *savedInvStd = nullptr;
  int64_t channels = 0;
  float momentum = 0.9f;
  double epsilon = 1e-5;
  bool training = false;
};
cudaError_t launchBatchNormStats(const BatchNormStatsParams &params,
                                 cudaStream_t stream);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDAKERNELS_H
