//===- CastKernels.cu - Cast and comparison CUDA kernels --------*- C++ -*-===//
//
// The CUDA kernels that read elements of any storage type: Cast between
// every pair of storages (integer to integer exactly, everything else
// through a double, 16-bit results through fp32 as on the CPU), and the
// broadcasting comparisons and logical ops that write bool (int64 compared
// exactly). Grid-stride loops keep the grid small for any size.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/LaunchSupport.h"

using namespace gmopt::cuda;

namespace {

__device__ double loadAsDouble(Storage s, const void *p, int64_t i) {
  switch (s) {
  case Storage::F32:
    return static_cast<const float *>(p)[i];
  case Storage::F16:
    return widenHalf(static_cast<const uint16_t *>(p)[i]);
  case Storage::BF16:
    return widenBFloat16(static_cast<const uint16_t *>(p)[i]);
  case Storage::F64:
    return static_cast<const double *>(p)[i];
  case Storage::I64:
    return static_cast<double>(static_cast<const int64_t *>(p)[i]);
  case Storage::I32:
    return static_cast<const int32_t *>(p)[i];
  case Storage::Bool:
    return static_cast<const uint8_t *>(p)[i] != 0;
  }
  return 0;
}

__device__ bool isIntegerStorage(Storage s) {
  return s == Storage::I64 || s == Storage::I32 || s == Storage::Bool;
}

__global__ void castKernel(Storage from, Storage to, const void *in, void *out,
                           int64_t elements) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    // Integer to integer keeps every bit of int64 (double would not).
    if (isIntegerStorage(from) && isIntegerStorage(to)) {
      int64_t v = from == Storage::I64 ? static_cast<const int64_t *>(in)[i]
                  : from == Storage::I32
                      ? static_cast<const int32_t *>(in)[i]
                      : static_cast<const uint8_t *>(in)[i] != 0;
      if (to == Storage::I64)
        static_cast<int64_t *>(out)[i] = v;
      else if (to == Storage::I32)
        static_cast<int32_t *>(out)[i] = static_cast<int32_t>(v);
      else
        static_cast<uint8_t *>(out)[i] = v != 0;
      continue;
    }
    double v = loadAsDouble(from, in, i);
    switch (to) {
    case Storage::F32:
      static_cast<float *>(out)[i] = static_cast<float>(v);
      break;
    case Storage::F16:
      // Through fp32 like the CPU (an f64 source rounds twice there too).
      static_cast<uint16_t *>(out)[i] = narrowToHalf(static_cast<float>(v));
      break;
    case Storage::BF16:
      static_cast<uint16_t *>(out)[i] = narrowToBFloat16(static_cast<float>(v));
      break;
    case Storage::F64:
      static_cast<double *>(out)[i] = v;
      break;
    case Storage::I64:
      static_cast<int64_t *>(out)[i] = static_cast<int64_t>(v);
      break;
    case Storage::I32:
      static_cast<int32_t *>(out)[i] = static_cast<int32_t>(v);
      break;
    case Storage::Bool:
      static_cast<uint8_t *>(out)[i] = v != 0;
      break;
    }
  }
}

__device__ __forceinline__ bool compareValues(CompareOp op, double a,
                                              double b) {
  switch (op) {
  case CompareOp::Equal:
    return a == b;
  case CompareOp::Less:
    return a < b;
  case CompareOp::Greater:
    return a > b;
  case CompareOp::LessOrEqual:
    return a <= b;
  case CompareOp::GreaterOrEqual:
    return a >= b;
  case CompareOp::And:
    return a != 0 && b != 0;
  case CompareOp::Or:
    return a != 0 || b != 0;
  case CompareOp::Xor:
    return (a != 0) != (b != 0);
  case CompareOp::IsNaN:
    return a != a;
  case CompareOp::IsInf:
    return isinf(a);
  case CompareOp::IsPositiveInf:
    return isinf(a) && a > 0;
  case CompareOp::IsNegativeInf:
    return isinf(a) && a < 0;
  case CompareOp::Not:
    return a == 0;
  }
  return false;
}

__global__ void compareKernel(CompareOp op, Storage storage, const void *a,
                              const void *b, uint8_t *out, int64_t elements,
                              BroadcastIndexing ix) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t ia = operandOffset(ix, 0, i), ib = operandOffset(ix, 1, i);
    bool result;
    if (storage == Storage::I64 && op <= CompareOp::GreaterOrEqual) {
      // Exact: int64 does not fit a double.
      int64_t va = static_cast<const int64_t *>(a)[ia];
      int64_t vb = static_cast<const int64_t *>(b)[ib];
      result = op == CompareOp::Equal         ? va == vb
               : op == CompareOp::Less        ? va < vb
               : op == CompareOp::Greater     ? va > vb
               : op == CompareOp::LessOrEqual ? va <= vb
                                              : va >= vb;
    } else {
      result = compareValues(op, loadAsDouble(storage, a, ia),
                             loadAsDouble(storage, b, ib));
    }
    out[operandOffset(ix, BroadcastIndexing::kOutput, i)] = result;
  }
}

} // namespace

cudaError_t gmopt::cuda::launchCompare(CompareOp op, Storage storage,
                                       const void *a, const void *b,
                                       uint8_t *out, int64_t elements,
                                       const BroadcastIndexing &index,
                                       cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  compareKernel<<<gridFor(elements), kThreads, 0, stream>>>(
      op, storage, a, b, out, elements, index);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchCast(Storage from, Storage to, const void *in,
                                    void *out, int64_t elements,
                                    cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  castKernel<<<gridFor(elements), kThreads, 0, stream>>>(from, to, in, out,
                                                         elements);
  return cudaGetLastError();
}
