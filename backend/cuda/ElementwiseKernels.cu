//===- ElementwiseKernels.cu - Elementwise CUDA kernels -------------------===//
//
// The CUDA kernels whose work is independent per element: the n-ary
// broadcasting elementwise kernel (unary, binary and gradient ops; one
// instantiation per storage type, the op a runtime switch; unbroadcast,
// contiguous, 16-byte-aligned launches take its vector path, one 128-bit
// load per operand for 4 fp32 or 8 f16/bf16 elements, VectorAccess.h), Cast,
// Dropout and DropoutGrad on gmopt's Philox stream, InPlaceAccumulatorV2, and
// the fused multi-tensor AdamW and SGD updates. The arithmetic is
// ElementwiseMath.h's and PhiloxMath.h's, which host tests check against
// the CPU kernels. Flags and scalars (ratio, training mode, lr, step,
// update signal, overwrite) are read on the device, so no launch waits
// for the host. Grid-stride loops keep the grid small for any size.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/LaunchSupport.h"
#include "backend/cuda/PhiloxMath.h"
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

__device__ double loadAsDouble(Storage s, const void *p, int64_t i);

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

template <typename T>
__global__ void fillKernel(T value, T *out, int64_t elements) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

/// The ratio and training mode of a dropout launch, read on the device.
struct DropoutMode {
  float ratio;
  bool active;
};

__device__ __forceinline__ DropoutMode readDropoutMode(const DropoutParams &p) {
  DropoutMode mode;
  mode.ratio = p.ratioValue >= 0 ? p.ratioValue : (p.ratio ? *p.ratio : 0.5f);
  bool training = !p.inference && (p.training ? *p.training != 0 : false);
  mode.active = training && mode.ratio > 0.0f;
  return mode;
}

/// One thread per Philox block of four elements.
template <typename T>
__global__ void dropoutKernel(const T *x, T *out, uint8_t *mask,
                              int64_t elements, DropoutParams params) {
  DropoutMode mode = readDropoutMode(params);
  float scale = 1.0f / (1.0f - mode.ratio);
  PhiloxStreamKey key =
      makePhiloxStreamKey(params.seed, params.streamId, params.step);
  int64_t blocks = (elements + 3) / 4;
  for (int64_t block = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       block < blocks; block += int64_t(gridDim.x) * blockDim.x) {
    PhiloxWords words;
    if (mode.active)
      words = philoxBlock(key, static_cast<uint32_t>(block));
    for (int lane = 0; lane < 4; ++lane) {
      int64_t i = block * 4 + lane;
      if (i >= elements)
        break;
      bool keep = !mode.active || dropoutKeeps(words.w[lane], mode.ratio);
      float v = loadAsFloat(x, i);
      // Inactive dropout is the identity (no scaling), as on the CPU.
      storeFromFloat(out, i, !mode.active ? v : keep ? v * scale : 0.0f);
      if (mask)
        mask[i] = keep;
    }
  }
}

/// One thread per 32-element mask word (eight Philox blocks).
template <typename T>
__global__ void bitmaskDropoutKernel(const T *x, T *out, uint32_t *mask,
                                     int64_t elements, DropoutParams params) {
  DropoutMode mode = readDropoutMode(params);
  float scale = 1.0f / (1.0f - mode.ratio);
  PhiloxStreamKey key =
      makePhiloxStreamKey(params.seed, params.streamId, params.step);
  int64_t words = (elements + 31) / 32;
  for (int64_t word = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       word < words; word += int64_t(gridDim.x) * blockDim.x) {
    uint32_t bits = 0;
    for (int block = 0; block < 8; ++block) {
      int64_t first = word * 32 + block * 4;
      if (first >= elements)
        break;
      PhiloxWords random;
      if (mode.active)
        random = philoxBlock(key, static_cast<uint32_t>(first / 4));
      for (int lane = 0; lane < 4 && first + lane < elements; ++lane) {
        int64_t i = first + lane;
        bool keep = !mode.active || dropoutKeeps(random.w[lane], mode.ratio);
        float v = loadAsFloat(x, i);
        storeFromFloat(out, i, !mode.active ? v : keep ? v * scale : 0.0f);
        bits |= static_cast<uint32_t>(keep) << (i % 32);
      }
    }
    if (mask)
      mask[word] = bits;
  }
}

template <typename T>
__global__ void dropoutGradKernel(const T *dy, const void *mask, bool bitmask,
                                  T *dx, int64_t elements,
                                  DropoutParams params) {
  DropoutMode mode = readDropoutMode(params);
  float scale = mode.active ? 1.0f / (1.0f - mode.ratio) : 1.0f;
  const uint8_t *bytes = static_cast<const uint8_t *>(mask);
  const uint32_t *words = static_cast<const uint32_t *>(mask);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    float g = loadAsFloat(dy, i);
    bool keep =
        !mask || (bitmask ? (words[i / 32] >> (i % 32)) & 1u : bytes[i] != 0);
    storeFromFloat(dx, i, !mode.active ? g : keep ? g * scale : 0.0f);
  }
}

//===----------------------------------------------------------------------===//
// Accumulators and optimizers
//===----------------------------------------------------------------------===//

template <typename TB, typename TV>
__global__ void accumulateKernel(const TB *sum, const TV *value,
                                 const uint8_t *overwrite,
                                 const uint8_t *updateSignal, uint8_t *updated,
                                 TB *out, TB *outCopy, int64_t elements) {
  bool replace = overwrite && *overwrite != 0;
  bool update = !updateSignal || *updateSignal != 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    float old = loadAsFloat(sum, i);
    float result = !update   ? old
                   : replace ? loadAsFloat(value, i)
                             : old + loadAsFloat(value, i);
    storeFromFloat(out, i, result);
    if (outCopy && outCopy != out)
      storeFromFloat(outCopy, i, result);
  }
  if (updated && blockIdx.x == 0 && threadIdx.x == 0)
    *updated = 1;
}

template <typename TB>
cudaError_t accumulateInto(const TB *sum, Storage valueStorage,
                           const void *value, const uint8_t *overwrite,
                           const uint8_t *updateSignal, uint8_t *updated,
                           void *out, void *outCopy, int64_t elements,
                           cudaStream_t stream) {
  unsigned grid = gridFor(elements);
  TB *result = static_cast<TB *>(out), *copy = static_cast<TB *>(outCopy);
  switch (valueStorage) {
  case Storage::F32:
    accumulateKernel<<<grid, kThreads, 0, stream>>>(
        sum, static_cast<const float *>(value), overwrite, updateSignal,
        updated, result, copy, elements);
    break;
  case Storage::F16:
    accumulateKernel<<<grid, kThreads, 0, stream>>>(
        sum, static_cast<const HalfBits *>(value), overwrite, updateSignal,
        updated, result, copy, elements);
    break;
  case Storage::BF16:
    accumulateKernel<<<grid, kThreads, 0, stream>>>(
        sum, static_cast<const BFloat16Bits *>(value), overwrite, updateSignal,
        updated, result, copy, elements);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

/// The tensor table of a fused optimizer launch, passed by value.
struct OptimizerTable {
  OptimizerTensor tensors[kOptimizerTensorsPerLaunch];
};

/// blockIdx.y picks the tensor, blockIdx.x strides over its elements.
__global__ void adamWKernel(OptimizerTable table, AdamWParams params) {
  if (params.updateSignal && *params.updateSignal == 0)
    return;
  AdamWConstants s;
  s.alpha = params.alpha;
  s.beta = params.beta;
  s.epsilon = params.epsilon;
  s.weightDecay = params.weightDecay;
  s.mode = params.mode;
  setAdamWStep(s, *params.lr, *params.step, params.correctBias);
  const OptimizerTensor &t = table.tensors[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < t.elements; i += int64_t(gridDim.x) * blockDim.x) {
    float w = t.weight[i], m1 = t.m1[i], m2 = t.m2[i];
    adamWElement(s, w, t.grad[i], m1, m2);
    t.weight[i] = w;
    t.m1[i] = m1;
    t.m2[i] = m2;
  }
}

__global__ void sgdKernel(OptimizerTable table, const float *lr,
                          const uint8_t *updateSignal) {
  if (updateSignal && *updateSignal == 0)
    return;
  float negativeLr = -*lr;
  const OptimizerTensor &t = table.tensors[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < t.elements; i += int64_t(gridDim.x) * blockDim.x)
    t.weight[i] = sgdElement(t.weight[i], t.grad[i], negativeLr);
}

__global__ void optimizerFlagKernel(bool int64Flag, void *flag,
                                    int64_t elements,
                                    const uint8_t *updateSignal) {
  bool update = !updateSignal || *updateSignal != 0;
  for (int64_t i = threadIdx.x; i < elements; i += blockDim.x) {
    if (int64Flag)
      static_cast<int64_t *>(flag)[i] = update ? 1 : 0;
    else
      static_cast<uint8_t *>(flag)[i] = update ? 1 : 0;
  }
}

/// Blocks along x for the largest tensor of a fused launch.
unsigned fusedGrid(const OptimizerTensor *tensors, int count) {
  int64_t largest = 1;
  for (int i = 0; i < count; ++i)
    largest = tensors[i].elements > largest ? tensors[i].elements : largest;
  unsigned grid = gridFor(largest);
  return grid > 4096 ? 4096 : grid;
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

cudaError_t gmopt::cuda::launchCast(Storage from, Storage to, const void *in,
                                    void *out, int64_t elements,
                                    cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  castKernel<<<gridFor(elements), kThreads, 0, stream>>>(from, to, in, out,
                                                         elements);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchDropout(Storage storage, const void *x,
                                       void *out, uint8_t *mask,
                                       int64_t elements,
                                       const DropoutParams &params,
                                       cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  unsigned grid = gridFor((elements + 3) / 4);
  switch (storage) {
  case Storage::F32:
    dropoutKernel<<<grid, kThreads, 0, stream>>>(static_cast<const float *>(x),
                                                 static_cast<float *>(out),
                                                 mask, elements, params);
    break;
  case Storage::F16:
    dropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const HalfBits *>(x), static_cast<HalfBits *>(out), mask,
        elements, params);
    break;
  case Storage::BF16:
    dropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const BFloat16Bits *>(x), static_cast<BFloat16Bits *>(out),
        mask, elements, params);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchBitmaskDropout(Storage storage, const void *x,
                                              void *out, uint32_t *mask,
                                              int64_t elements,
                                              const DropoutParams &params,
                                              cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  unsigned grid = gridFor((elements + 31) / 32);
  switch (storage) {
  case Storage::F32:
    bitmaskDropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const float *>(x), static_cast<float *>(out), mask,
        elements, params);
    break;
  case Storage::F16:
    bitmaskDropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const HalfBits *>(x), static_cast<HalfBits *>(out), mask,
        elements, params);
    break;
  case Storage::BF16:
    bitmaskDropoutKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const BFloat16Bits *>(x), static_cast<BFloat16Bits *>(out),
        mask, elements, params);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchDropoutGrad(Storage storage, const void *dy,
                                           const void *mask, bool bitmask,
                                           void *dx, int64_t elements,
                                           const DropoutParams &params,
                                           cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  unsigned grid = gridFor(elements);
  switch (storage) {
  case Storage::F32:
    dropoutGradKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const float *>(dy), mask, bitmask, static_cast<float *>(dx),
        elements, params);
    break;
  case Storage::F16:
    dropoutGradKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const HalfBits *>(dy), mask, bitmask,
        static_cast<HalfBits *>(dx), elements, params);
    break;
  case Storage::BF16:
    dropoutGradKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const BFloat16Bits *>(dy), mask, bitmask,
        static_cast<BFloat16Bits *>(dx), elements, params);
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

/// The accumulators' common launch: out (and outCopy) = update ? (replace ?
/// value : sum + value) : sum.
static cudaError_t
launchAccumulateFrom(Storage sumStorage, const void *sum, Storage valueStorage,
                     const void *value, const uint8_t *overwrite,
                     const uint8_t *updateSignal, uint8_t *updated, void *out,
                     void *outCopy, int64_t elements, cudaStream_t stream) {
  switch (sumStorage) {
  case Storage::F32:
    return accumulateInto(static_cast<const float *>(sum), valueStorage, value,
                          overwrite, updateSignal, updated, out, outCopy,
                          elements, stream);
  case Storage::F16:
    return accumulateInto(static_cast<const HalfBits *>(sum), valueStorage,
                          value, overwrite, updateSignal, updated, out, outCopy,
                          elements, stream);
  case Storage::BF16:
    return accumulateInto(static_cast<const BFloat16Bits *>(sum), valueStorage,
                          value, overwrite, updateSignal, updated, out, outCopy,
                          elements, stream);
  default:
    return cudaErrorInvalidValue;
  }
}

cudaError_t gmopt::cuda::launchAccumulate(
    Storage bufferStorage, void *buffer, Storage valueStorage,
    const void *value, const uint8_t *overwrite, uint8_t *updated,
    void *bufferOut, int64_t elements, cudaStream_t stream) {
  // At least one thread runs (gridFor), to set the updated flag.
  return launchAccumulateFrom(bufferStorage, buffer, valueStorage, value,
                              overwrite, nullptr, updated, buffer, bufferOut,
                              elements, stream);
}

cudaError_t gmopt::cuda::launchSumIf(Storage sumStorage, const void *oldSum,
                                     Storage valueStorage, const void *value,
                                     const uint8_t *updateSignal, void *newSum,
                                     int64_t elements, cudaStream_t stream) {
  return launchAccumulateFrom(sumStorage, oldSum, valueStorage, value, nullptr,
                              updateSignal, nullptr, newSum, nullptr, elements,
                              stream);
}

cudaError_t gmopt::cuda::launchAdamW(const OptimizerTensor *tensors, int count,
                                     const AdamWParams &params,
                                     cudaStream_t stream) {
  if (count <= 0 || count > kOptimizerTensorsPerLaunch)
    return count == 0 ? cudaSuccess : cudaErrorInvalidValue;
  OptimizerTable table;
  for (int i = 0; i < count; ++i)
    table.tensors[i] = tensors[i];
  dim3 grid(fusedGrid(tensors, count), static_cast<unsigned>(count));
  adamWKernel<<<grid, kThreads, 0, stream>>>(table, params);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchSgd(const OptimizerTensor *tensors, int count,
                                   const float *lr, const uint8_t *updateSignal,
                                   cudaStream_t stream) {
  if (count <= 0 || count > kOptimizerTensorsPerLaunch)
    return count == 0 ? cudaSuccess : cudaErrorInvalidValue;
  OptimizerTable table;
  for (int i = 0; i < count; ++i)
    table.tensors[i] = tensors[i];
  dim3 grid(fusedGrid(tensors, count), static_cast<unsigned>(count));
  sgdKernel<<<grid, kThreads, 0, stream>>>(table, lr, updateSignal);
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchOptimizerFlag(Storage storage, void *flag,
                                             int64_t elements,
                                             const uint8_t *updateSignal,
                                             cudaStream_t stream) {
  if (elements == 0)
    return cudaSuccess;
  if (storage != Storage::I64 && storage != Storage::Bool)
    return cudaErrorInvalidValue;
  optimizerFlagKernel<<<1, 32, 0, stream>>>(storage == Storage::I64, flag,
                                            elements, updateSignal);
  return cudaGetLastError();
}
