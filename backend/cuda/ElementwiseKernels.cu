//===- ElementwiseKernels.cu - Elementwise CUDA kernels -------------------===//
//
// The n-ary broadcasting elementwise kernel of the unary, binary and
// gradient ops: one instantiation per storage type (fp32, f16, bf16), the
// op a runtime switch; unbroadcast, contiguous, 16-byte-aligned launches
// take its vector path, one 128-bit load per operand for 4 fp32 or 8
// f16/bf16 elements (VectorAccess.h). The arithmetic is ElementwiseMath.h's,
// which host tests check against the CPU kernels. The other per-element
// kernels live by family: copies, Pad, Where and fills (CopyKernels.cu),
// Cast and the comparisons (CastKernels.cu), dropout (DropoutKernels.cu),
// accumulators and optimizers (OptimizerKernels.cu). Grid-stride loops
// keep the grid small for any size.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/LaunchSupport.h"
#include "backend/cuda/VectorAccess.h"

using namespace gmopt::cuda;

namespace {

/// The storage type of a Storage tag.
template <Storage S> struct StorageType;
template <> struct StorageType<Storage::F32> { using type = float; };
template <> struct StorageType<Storage::F16> { using type = HalfBits; };
template <> struct StorageType<Storage::BF16> { using type = BFloat16Bits; };

template <typename T>
__global__ void elementwiseKernel(ElementwiseOp op, const T *a, const T *b,
                                  const T *c, T *out, int64_t elements,
                                  BroadcastIndexing ix, float param,
                                  float param2) {
  int operands = operandCount(op);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    applyElementwiseAt(op, operands, a, operandOffset(ix, 0, i), b,
                       operandOffset(ix, 1, i), c, operandOffset(ix, 2, i), out,
                       operandOffset(ix, BroadcastIndexing::kOutput, i), param,
                       param2);
}

/// The vector path of elementwiseKernel, for operands and an output that
/// are contiguous, unbroadcast and 16-byte aligned (canAccessAsVectors):
/// one 128-bit load per operand and one 128-bit store per vector, the same
/// per-element arithmetic on each lane, and the tail one element at a time.
template <typename T>
__global__ void vectorElementwiseKernel(ElementwiseOp op, const T *a,
                                        const T *b, const T *c, T *out,
                                        VectorPartition partition, float param,
                                        float param2) {
  int operands = operandCount(op);
  auto onVector = [&](int64_t first) {
    applyElementwiseVector(op, operands, a, b, c, out, first, param, param2);
  };
  auto onElement = [&](int64_t i) {
    applyElementwiseAt(op, operands, a, i, b, i, c, i, out, i, param, param2);
  };
  forEachOwned(partition, blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
               int64_t(gridDim.x) * blockDim.x, onVector, onElement);
}

template <Storage S>
cudaError_t elementwiseAs(ElementwiseOp op, const void *a, const void *b,
                          const void *c, void *out, int64_t elements,
                          const BroadcastIndexing &ix, cudaStream_t stream,
                          float param, float param2) {
  using T = typename StorageType<S>::type;
  const void *operandPointers[3] = {a, b, c};
  if (canAccessAsVectors(ix, operandCount(op), operandPointers, out)) {
    VectorPartition partition = partitionIntoVectors(elements, kVectorLanes<T>);
    // The tail (fewer than a vector's lanes) fits in the first block.
    vectorElementwiseKernel<T>
        <<<gridFor(partition.vectors), kThreads, 0, stream>>>(
            op, static_cast<const T *>(a), static_cast<const T *>(b),
            static_cast<const T *>(c), static_cast<T *>(out), partition, param,
            param2);
    return cudaGetLastError();
  }
  elementwiseKernel<T><<<gridFor(elements), kThreads, 0, stream>>>(
      op, static_cast<const T *>(a), static_cast<const T *>(b),
      static_cast<const T *>(c), static_cast<T *>(out), elements, ix, param,
      param2);
  return cudaGetLastError();
}

} // namespace

cudaError_t
gmopt::cuda::launchElementwise(ElementwiseOp op, Storage storage, const void *a,
                               const void *b, const void *c, void *out,
                               int64_t elements, const BroadcastIndexing &index,
                               cudaStream_t stream, float param, float param2) {
  if (elements == 0)
    return cudaSuccess;
  switch (storage) {
  case Storage::F32:
    return elementwiseAs<Storage::F32>(op, a, b, c, out, elements, index,
                                       stream, param, param2);
  case Storage::F16:
    return elementwiseAs<Storage::F16>(op, a, b, c, out, elements, index,
                                       stream, param, param2);
  case Storage::BF16:
    return elementwiseAs<Storage::BF16>(op, a, b, c, out, elements, index,
                                        stream, param, param2);
  default:
    return cudaErrorInvalidValue;
  }
}
