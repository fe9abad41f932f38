//===- ShapeKernels.cu - Range, Trilu, OneHot, NonZero, Einsum ------------===//
//
// The kernels of ShapeKernels.h; the element arithmetic is ShapeMath.h's.
// Range, Trilu, OneHot and Einsum run one thread per output element; Trilu
// and OneHot move elements as unsigned words of their size. NonZero runs
// one block that walks the input in tiles, ranking each tile's nonzero
// elements with warp ballots, so coordinates come out in row-major order
// without scratch memory. BroadcastGradientArgs is one thread. Operand
// values that contradict the plan raise the shared device fault
// (RowKernels.cu's word, reached through getKernelFaultWord).
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/LaunchSupport.h"
#include "backend/cuda/ShapeKernels.h"

#include <type_traits>

using namespace gmopt::cuda;

namespace {

constexpr int kNonZeroThreads = 1024;
constexpr int kWarp = 32;

/// Where a faulting kernel records its fault.
struct FaultSink {
  KernelFaultRecord *record;
  const int32_t *launchId;
};

cudaError_t faultSink(FaultSink &sink) {
  return getKernelFaultWord(&sink.record, &sink.launchId);
}

__device__ void raiseFault(const FaultSink &sink, KernelFault code) {
  if (atomicCAS(&sink.record->code, 0, static_cast<int32_t>(code)) == 0)
    sink.record->launchId = *sink.launchId;
}

#define FOR_EACH(i, n)                                                         \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

__device__ __forceinline__ bool isFirstThread() {
  return blockIdx.x == 0 && threadIdx.x == 0;
}

/// Calls \p f with a typed null pointer of the unsigned word of
/// \p elementBytes.
template <typename F> cudaError_t withWord(int64_t elementBytes, F &&f) {
  switch (elementBytes) {
  case 1:
    return f(static_cast<uint8_t *>(nullptr));
  case 2:
    return f(static_cast<uint16_t *>(nullptr));
  case 4:
    return f(static_cast<uint32_t *>(nullptr));
  case 8:
    return f(static_cast<uint64_t *>(nullptr));
  default:
    return cudaErrorInvalidValue;
  }
}

//===----------------------------------------------------------------------===//
// Range
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void rangeKernel(const T *start, const T *limit, const T *delta,
                            T *out, int64_t planned, FaultSink sink) {
  T first = *start, step = *delta;
  if (step == T(0)) {
    if (isFirstThread())
      raiseFault(sink, KernelFault::InvalidOperandValue);
    return;
  }
  if (rangeCount(first, *limit, step) != planned) {
    if (isFirstThread())
      raiseFault(sink, KernelFault::OutputShapeMismatch);
    return;
  }
  FOR_EACH(i, planned)
  out[i] = rangeElement(first, step, i);
}

//===----------------------------------------------------------------------===//
// Trilu and OneHot
//===----------------------------------------------------------------------===//

template <typename W>
__global__ void triluKernel(const W *in, W *out, int64_t elements, int64_t rows,
                            int64_t cols, bool upper, const void *k,
                            ScalarType kType) {
  int64_t diagonal =
      k ? static_cast<int64_t>(loadAsDouble(kType, k, 0)) : int64_t(0);
  FOR_EACH(e, elements) {
    int64_t col = e % cols, row = (e / cols) % rows;
    out[e] = triluKeeps(upper, diagonal, row, col) ? in[e] : W(0);
  }
}

template <typename W>
__global__ void oneHotKernel(const void *indices, ScalarType indexType,
                             const void *depth, ScalarType depthType,
                             const W *values, W *out, OneHotShape shape,
                             FaultSink sink) {
  if (static_cast<int64_t>(loadAsDouble(depthType, depth, 0)) != shape.depth) {
    if (isFirstThread())
      raiseFault(sink, KernelFault::OutputShapeMismatch);
    return;
  }
  W off = values[0], on = values[1];
  FOR_EACH(e, shape.outer * shape.depth * shape.inner)
  out[e] = oneHotIsOn(shape, indexType, indices, e) ? on : off;
}

//===----------------------------------------------------------------------===//
// NonZero
//===----------------------------------------------------------------------===//

__global__ void __launch_bounds__(kNonZeroThreads)
    nonZeroKernel(const void *x, int64_t elements, int elementBytes,
                  bool isFloat, NonZeroShape shape, int64_t *coords,
                  int64_t planned, FaultSink sink) {
  constexpr int kWarps = kNonZeroThreads / kWarp;
  __shared__ int warpCounts[kWarps];
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int64_t found = 0; // Nonzero elements before the tile (uniform).
  for (int64_t tile = 0; tile < elements; tile += kNonZeroThreads) {
    int64_t i = tile + threadIdx.x;
    bool nonZero = i < elements && isNonZeroBits(loadBits(x, i, elementBytes),
                                                 elementBytes, isFloat);
    unsigned ballot = __ballot_sync(0xffffffffu, nonZero);
    if (lane == 0)
      warpCounts[warp] = __popc(ballot);
    __syncthreads();
    int64_t rank = found + __popc(ballot & ((1u << lane) - 1u));
    int tileCount = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w == warp)
        rank += tileCount;
      tileCount += warpCounts[w];
    }
    if (nonZero && rank < planned)
      writeNonZeroCoordinates(shape, i, coords, planned, rank);
    found += tileCount;
    __syncthreads(); // warpCounts is rewritten by the next tile.
  }
  if (threadIdx.x == 0 && found != planned)
    raiseFault(sink, KernelFault::OutputShapeMismatch);
}

//===----------------------------------------------------------------------===//
// BroadcastGradientArgs and Einsum
//===----------------------------------------------------------------------===//

__global__ void broadcastGradientArgsKernel(const int64_t *a, int64_t aRank,
                                            const int64_t *b, int64_t bRank,
                                            int64_t *aAxes, int64_t aCount,
                                            int64_t *bAxes, int64_t bCount,
                                            FaultSink sink) {
  GradientAxesCount count =
      broadcastGradientAxes(a, aRank, b, bRank, aCount > 0 ? aAxes : nullptr,
                            aCount, bCount > 0 ? bAxes : nullptr, bCount);
  if (!count.broadcastable)
    raiseFault(sink, KernelFault::InvalidOperandValue);
  else if ((aCount >= 0 && count.a != aCount) ||
           (bCount >= 0 && count.b != bCount))
    raiseFault(sink, KernelFault::OutputShapeMismatch);
}

template <typename T, typename Acc>
__global__ void einsumKernel(EinsumOperands operands, T *out,
                             EinsumGeometry g) {
  const T *data[kMaxEinsumOperands];
  for (int p = 0; p < kMaxEinsumOperands; ++p)
    data[p] = static_cast<const T *>(operands.data[p]);
  FOR_EACH(e, g.outElements)
  out[e] = static_cast<T>(einsumElement<Acc>(g, data, e));
}

} // namespace

cudaError_t gmopt::cuda::launchRange(ScalarType type, const void *start,
                                     const void *limit, const void *delta,
                                     void *out, int64_t planned,
                                     cudaStream_t stream) {
  FaultSink sink;
  if (cudaError_t status = faultSink(sink); status != cudaSuccess)
    return status;
  auto launch = [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    rangeKernel<<<gridFor(planned), kThreads, 0, stream>>>(
        static_cast<const T *>(start), static_cast<const T *>(limit),
        static_cast<const T *>(delta), static_cast<T *>(out), planned, sink);
    return cudaGetLastError();
  };
  switch (type) {
  case ScalarType::F32:
    return launch(static_cast<float *>(nullptr));
  case ScalarType::F64:
    return launch(static_cast<double *>(nullptr));
  case ScalarType::I64:
    return launch(static_cast<int64_t *>(nullptr));
  case ScalarType::I32:
    return launch(static_cast<int32_t *>(nullptr));
  case ScalarType::I16:
    return launch(static_cast<int16_t *>(nullptr));
  default:
    return cudaErrorInvalidValue;
  }
}

cudaError_t gmopt::cuda::launchTrilu(const void *in, void *out,
                                     int64_t elementBytes, int64_t elements,
                                     int64_t rows, int64_t cols, bool upper,
                                     const void *k, ScalarType kType,
                                     cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  return withWord(elementBytes, [&](auto *tag) {
    using W = std::remove_pointer_t<decltype(tag)>;
    triluKernel<<<gridFor(elements), kThreads, 0, stream>>>(
        static_cast<const W *>(in), static_cast<W *>(out), elements, rows, cols,
        upper, k, kType);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchOneHot(const void *indices, ScalarType indexType,
                                      const void *depth, ScalarType depthType,
                                      const void *values, void *out,
                                      int64_t elementBytes,
                                      const OneHotShape &shape,
                                      cudaStream_t stream) {
  FaultSink sink;
  if (cudaError_t status = faultSink(sink); status != cudaSuccess)
    return status;
  int64_t elements = shape.outer * shape.depth * shape.inner;
  return withWord(elementBytes, [&](auto *tag) {
    using W = std::remove_pointer_t<decltype(tag)>;
    oneHotKernel<<<gridFor(elements), kThreads, 0, stream>>>(
        indices, indexType, depth, depthType, static_cast<const W *>(values),
        static_cast<W *>(out), shape, sink);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchNonZero(const void *x, int64_t elements,
                                       int elementBytes, bool isFloat,
                                       const NonZeroShape &shape,
                                       int64_t *coords, int64_t plannedCount,
                                       cudaStream_t stream) {
  if (elementBytes != 1 && elementBytes != 2 && elementBytes != 4 &&
      elementBytes != 8)
    return cudaErrorInvalidValue;
  FaultSink sink;
  if (cudaError_t status = faultSink(sink); status != cudaSuccess)
    return status;
  nonZeroKernel<<<1, kNonZeroThreads, 0, stream>>>(
      x, elements, elementBytes, isFloat, shape, coords, plannedCount, sink);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchBroadcastGradientArgs(
    const int64_t *a, int64_t aRank, const int64_t *b, int64_t bRank,
    int64_t *aAxes, int64_t aCount, int64_t *bAxes, int64_t bCount,
    cudaStream_t stream) {
  FaultSink sink;
  if (cudaError_t status = faultSink(sink); status != cudaSuccess)
    return status;
  broadcastGradientArgsKernel<<<1, 1, 0, stream>>>(a, aRank, b, bRank, aAxes,
                                                   aCount, bAxes, bCount, sink);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchEinsum(Storage storage,
                                      const EinsumOperands &operands, void *out,
                                      const EinsumGeometry &g,
                                      cudaStream_t stream) {
  if (g.outElements == 0)
    return cudaSuccess;
  unsigned grid = gridFor(g.outElements);
  switch (storage) {
  case Storage::F32:
    einsumKernel<float, float>
        <<<grid, kThreads, 0, stream>>>(operands, static_cast<float *>(out), g);
    break;
  case Storage::F64:
    einsumKernel<double, double><<<grid, kThreads, 0, stream>>>(
        operands, static_cast<double *>(out), g);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
