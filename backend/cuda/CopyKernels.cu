//===- CopyKernels.cu - Copy, Pad, Where and fill CUDA kernels --*- C++ -*-===//
//
// The CUDA kernels that move elements without arithmetic, keyed by element
// size (1, 2, 4 or 8 bytes) rather than type: the strided copy that
// materializes a broadcast or transposed view, Pad in every mode (PadMath.h),
// Where's broadcasting select and the fill of a repeated bit pattern
// (ConstantOfShape, zeroing). Grid-stride loops keep the grid small for any
// size.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/LaunchSupport.h"

using namespace gmopt::cuda;

namespace {

template <typename T>
__global__ void stridedCopyKernel(const T *in, T *out, int64_t elements,
                                  BroadcastIndexing ix) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    out[operandOffset(ix, BroadcastIndexing::kOutput, i)] =
        in[operandOffset(ix, 0, i)];
}

/// Pad in any mode: each output element reads its source element, or the
/// constant where constant mode pads (PadMath.h).
template <typename T>
__global__ void padKernel(const T *in, T *out, int64_t elements, PadIndexing ix,
                          T constant) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t source = padSourceOffset(ix, i);
    out[i] = source < 0 ? constant : in[source];
  }
}

template <typename T>
void launchPadAs(const void *in, void *out, int64_t elements,
                 const PadIndexing &ix, uint64_t pattern, cudaStream_t stream) {
  padKernel<<<gridFor(elements), kThreads, 0, stream>>>(
      static_cast<const T *>(in), static_cast<T *>(out), elements, ix,
      static_cast<T>(pattern));
}

template <typename T>
__global__ void whereKernel(const uint8_t *cond, const T *x, const T *y, T *out,
                            int64_t elements, BroadcastIndexing ix) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    out[operandOffset(ix, BroadcastIndexing::kOutput, i)] =
        cond[operandOffset(ix, 0, i)] ? x[operandOffset(ix, 1, i)]
                                      : y[operandOffset(ix, 2, i)];
}

template <typename T>
void launchWhereAs(const uint8_t *cond, const void *x, const void *y, void *out,
                   int64_t elements, const BroadcastIndexing &ix, unsigned grid,
                   cudaStream_t stream) {
  whereKernel<<<grid, kThreads, 0, stream>>>(
      cond, static_cast<const T *>(x), static_cast<const T *>(y),
      static_cast<T *>(out), elements, ix);
}

template <typename T>
__global__ void fillKernel(T value, T *out, int64_t elements) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

} // namespace

cudaError_t gmopt::cuda::launchStridedCopy(int64_t elementBytes, const void *in,
                                           void *out, int64_t elements,
                                           const BroadcastIndexing &index,
                                           cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  unsigned grid = gridFor(elements);
  switch (elementBytes) {
  case 1:
    stridedCopyKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const uint8_t *>(in), static_cast<uint8_t *>(out), elements,
        index);
    break;
  case 2:
    stridedCopyKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const uint16_t *>(in), static_cast<uint16_t *>(out),
        elements, index);
    break;
  case 4:
    stridedCopyKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const uint32_t *>(in), static_cast<uint32_t *>(out),
        elements, index);
    break;
  case 8:
    stridedCopyKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const uint64_t *>(in), static_cast<uint64_t *>(out),
        elements, index);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchPad(int64_t elementBytes, const void *in,
                                   void *out, int64_t elements,
                                   const PadIndexing &index, uint64_t pattern,
                                   cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  switch (elementBytes) {
  case 1:
    launchPadAs<uint8_t>(in, out, elements, index, pattern, stream);
    break;
  case 2:
    launchPadAs<uint16_t>(in, out, elements, index, pattern, stream);
    break;
  case 4:
    launchPadAs<uint32_t>(in, out, elements, index, pattern, stream);
    break;
  case 8:
    launchPadAs<uint64_t>(in, out, elements, index, pattern, stream);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchWhere(int64_t elementBytes, const uint8_t *cond,
                                     const void *x, const void *y, void *out,
                                     int64_t elements,
                                     const BroadcastIndexing &index,
                                     cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  unsigned grid = gridFor(elements);
  switch (elementBytes) {
  case 1:
    launchWhereAs<uint8_t>(cond, x, y, out, elements, index, grid, stream);
    break;
  case 2:
    launchWhereAs<uint16_t>(cond, x, y, out, elements, index, grid, stream);
    break;
  case 4:
    launchWhereAs<uint32_t>(cond, x, y, out, elements, index, grid, stream);
    break;
  case 8:
    launchWhereAs<uint64_t>(cond, x, y, out, elements, index, grid, stream);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchFill(int64_t elementBytes, uint64_t pattern,
                                    void *out, int64_t elements,
                                    cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  unsigned grid = gridFor(elements);
  switch (elementBytes) {
  case 1:
    fillKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<uint8_t>(pattern), static_cast<uint8_t *>(out), elements);
    break;
  case 2:
    fillKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<uint16_t>(pattern), static_cast<uint16_t *>(out), elements);
    break;
  case 4:
    fillKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<uint32_t>(pattern), static_cast<uint32_t *>(out), elements);
    break;
  case 8:
    fillKernel<<<grid, kThreads, 0, stream>>>(
        pattern, static_cast<uint64_t *>(out), elements);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
