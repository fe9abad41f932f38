//===- IndexKernels.cu - GatherElements, GatherND and the scatters --------===//
//
// The indexing kernels of IndexKernels.h. One thread per index (element
// gathers and scatters) or per data element of an ND block; the index
// arithmetic is IndexMath.h's. Gathers copy elements as unsigned words of
// their size. Scatters with a reduction combine through compare-and-swap on
// the target's word (fp32 / fp64 adds with atomicAdd), so duplicate indices
// are all applied, in an unspecified order; 16-bit targets are widened to
// fp32, combined and rounded back per update. An index out of range raises
// the shared device fault (RowKernels.cu's word, reached through
// getKernelFaultWord) and contributes nothing.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/IndexKernels.h"
#include "backend/cuda/LaunchSupport.h"

using namespace gmopt::cuda;

namespace {

/// Where a faulting kernel records its fault.
struct FaultSink {
  KernelFaultRecord *record;
  const int32_t *launchId;
};

__device__ void raiseIndexFault(const FaultSink &sink) {
  if (atomicCAS(&sink.record->code, 0,
                static_cast<int32_t>(KernelFault::IndexOutOfRange)) == 0)
    sink.record->launchId = *sink.launchId;
}

__device__ __forceinline__ int64_t loadIndex(const void *indices,
                                             bool indices32, int64_t i) {
  return indices32 ? static_cast<const int32_t *>(indices)[i]
                   : static_cast<const int64_t *>(indices)[i];
}

#define FOR_EACH(i, n)                                                         \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

//===----------------------------------------------------------------------===//
// Atomic combination
//===----------------------------------------------------------------------===//

/// How a storage type is combined through compare-and-swap: its CAS word
/// and the arithmetic type the reduction runs in.
template <typename T> struct Atomic;
template <> struct Atomic<float> {
  using Word = unsigned int;
  using Compute = float;
  __device__ static Compute value(Word w) { return __uint_as_float(w); }
  __device__ static Word word(Compute v) { return __float_as_uint(v); }
  __device__ static Compute of(float v) { return v; }
};
template <> struct Atomic<double> {
  using Word = unsigned long long;
  using Compute = double;
  __device__ static Compute value(Word w) {
    return __longlong_as_double(static_cast<long long>(w));
  }
  __device__ static Word word(Compute v) {
    return static_cast<Word>(__double_as_longlong(v));
  }
  __device__ static Compute of(double v) { return v; }
};
template <> struct Atomic<int32_t> {
  using Word = int;
  using Compute = int32_t;
  __device__ static Compute value(Word w) { return w; }
  __device__ static Word word(Compute v) { return v; }
  __device__ static Compute of(int32_t v) { return v; }
};
template <> struct Atomic<int64_t> {
  using Word = unsigned long long;
  using Compute = int64_t;
  __device__ static Compute value(Word w) { return static_cast<int64_t>(w); }
  __device__ static Word word(Compute v) { return static_cast<Word>(v); }
  __device__ static Compute of(int64_t v) { return v; }
};
template <> struct Atomic<HalfBits> {
  using Word = unsigned short;
  using Compute = float;
  __device__ static Compute value(Word w) { return widenHalf(w); }
  __device__ static Word word(Compute v) { return narrowToHalf(v); }
  __device__ static Compute of(HalfBits v) { return widenHalf(v.bits); }
};
template <> struct Atomic<BFloat16Bits> {
  using Word = unsigned short;
  using Compute = float;
  __device__ static Compute value(Word w) { return widenBFloat16(w); }
  __device__ static Word word(Compute v) { return narrowToBFloat16(v); }
  __device__ static Compute of(BFloat16Bits v) { return widenBFloat16(v.bits); }
};

/// *target = combineScatter(op, *target, update), atomically.
template <typename T>
__device__ void atomicCombine(T *target, T update, ScatterOp op) {
  using A = Atomic<T>;
  typename A::Compute u = A::of(update);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (op == ScatterOp::Add) {
      atomicAdd(target, u);
      return;
    }
  }
  auto *word = reinterpret_cast<typename A::Word *>(target);
  typename A::Word old = *word, assumed;
  do {
    assumed = old;
    typename A::Word next = A::word(combineScatter(op, A::value(assumed), u));
    old = atomicCAS(word, assumed, next);
  } while (old != assumed);
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

template <typename W>
__global__ void gatherElementsKernel(const W *data, const void *indices,
                                     bool indices32, W *out, int64_t count,
                                     ElementIndexing g, FaultSink sink) {
  FOR_EACH(i, count) {
    int64_t offset;
    if (!elementOffset(g, i, loadIndex(indices, indices32, i), offset)) {
      raiseIndexFault(sink);
      out[i] = W(0);
      continue;
    }
    out[i] = data[offset];
  }
}

template <typename T, bool Reduce>
__global__ void scatterElementsKernel(const void *indices, bool indices32,
                                      const T *updates, T *out, int64_t count,
                                      ElementIndexing g, ScatterOp op,
                                      FaultSink sink) {
  FOR_EACH(i, count) {
    int64_t offset;
    if (!elementOffset(g, i, loadIndex(indices, indices32, i), offset)) {
      raiseIndexFault(sink);
      continue;
    }
    if constexpr (Reduce)
      atomicCombine(out + offset, updates[i], op);
    else
      out[offset] = updates[i];
  }
}

/// The data offset of the block element \p i (tuple i / block) addresses;
/// false when its tuple has an entry out of range.
__device__ bool ndElementOffset(const NDIndexing &g, const void *indices,
                                bool indices32, int64_t i, int64_t &offset) {
  int64_t t = i / g.block, j = i % g.block;
  bool valid =
      indices32
          ? ndBlockOffset(g, t,
                          static_cast<const int32_t *>(indices) + t * g.depth,
                          offset)
          : ndBlockOffset(g, t,
                          static_cast<const int64_t *>(indices) + t * g.depth,
                          offset);
  offset += j;
  return valid;
}

template <typename W>
__global__ void gatherNDKernel(const W *data, const void *indices,
                               bool indices32, W *out, NDIndexing g,
                               FaultSink sink) {
  FOR_EACH(i, g.batches * g.tuples * g.block) {
    int64_t offset = 0;
    if (!ndElementOffset(g, indices, indices32, i, offset)) {
      if (i % g.block == 0)
        raiseIndexFault(sink);
      out[i] = W(0);
      continue;
    }
    out[i] = data[offset];
  }
}

template <typename T, bool Reduce>
__global__ void scatterNDKernel(const void *indices, bool indices32,
                                const T *updates, T *out, NDIndexing g,
                                ScatterOp op, FaultSink sink) {
  FOR_EACH(i, g.batches * g.tuples * g.block) {
    int64_t offset = 0;
    if (!ndElementOffset(g, indices, indices32, i, offset)) {
      if (i % g.block == 0)
        raiseIndexFault(sink);
      continue;
    }
    if constexpr (Reduce)
      atomicCombine(out + offset, updates[i], op);
    else
      out[offset] = updates[i];
  }
}

cudaError_t faultSink(FaultSink &sink) {
  return getKernelFaultWord(&sink.record, &sink.launchId);
}

/// Runs fn(W{}) with the unsigned word type of \p bytes.
template <typename Fn> cudaError_t withWord(int64_t bytes, const Fn &fn) {
  switch (bytes) {
  case 1:
    return fn(uint8_t{});
  case 2:
    return fn(uint16_t{});
  case 4:
    return fn(uint32_t{});
  case 8:
    return fn(static_cast<unsigned long long>(0));
  default:
    return cudaErrorInvalidValue;
  }
}

int64_t storageBytes(Storage s) {
  switch (s) {
  case Storage::F64:
  case Storage::I64:
    return 8;
  case Storage::F32:
  case Storage::I32:
    return 4;
  case Storage::F16:
  case Storage::BF16:
    return 2;
  case Storage::Bool:
    return 1;
  }
  return 0;
}

/// Runs fn(T{}) with the reducing storage type of \p storage.
template <typename Fn> cudaError_t withReducing(Storage storage, const Fn &fn) {
  switch (storage) {
  case Storage::F32:
    return fn(float{});
  case Storage::F64:
    return fn(double{});
  case Storage::I32:
    return fn(int32_t{});
  case Storage::I64:
    return fn(int64_t{});
  case Storage::F16:
    return fn(HalfBits{});
  case Storage::BF16:
    return fn(BFloat16Bits{});
  default:
    return cudaErrorInvalidValue;
  }
}

} // namespace

cudaError_t
gmopt::cuda::launchGatherElements(const void *data, const void *indices,
                                  bool indices32, void *out, int64_t count,
                                  const ElementIndexing &g,
                                  int64_t elementBytes, cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  FaultSink sink;
  if (cudaError_t status = faultSink(sink))
    return status;
  return withWord(elementBytes, [&](auto tag) {
    using W = decltype(tag);
    gatherElementsKernel<W><<<gridFor(count), kThreads, 0, stream>>>(
        static_cast<const W *>(data), indices, indices32, static_cast<W *>(out),
        count, g, sink);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchScatterElements(
    const void *indices, bool indices32, const void *updates, void *out,
    int64_t count, const ElementIndexing &g, Storage storage, ScatterOp op,
    cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  FaultSink sink;
  if (cudaError_t status = faultSink(sink))
    return status;
  if (op == ScatterOp::None)
    return withWord(storageBytes(storage), [&](auto tag) {
      using W = decltype(tag);
      scatterElementsKernel<W, false><<<gridFor(count), kThreads, 0, stream>>>(
          indices, indices32, static_cast<const W *>(updates),
          static_cast<W *>(out), count, g, op, sink);
      return cudaGetLastError();
    });
  return withReducing(storage, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2)
      if (op != ScatterOp::Add)
        return cudaErrorInvalidValue;
    scatterElementsKernel<T, true><<<gridFor(count), kThreads, 0, stream>>>(
        indices, indices32, static_cast<const T *>(updates),
        static_cast<T *>(out), count, g, op, sink);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchGatherND(const void *data, const void *indices,
                                        bool indices32, void *out,
                                        const NDIndexing &g,
                                        int64_t elementBytes,
                                        cudaStream_t stream) {
  int64_t total = g.batches * g.tuples * g.block;
  if (total == 0)
    return cudaSuccess;
  FaultSink sink;
  if (cudaError_t status = faultSink(sink))
    return status;
  return withWord(elementBytes, [&](auto tag) {
    using W = decltype(tag);
    gatherNDKernel<W><<<gridFor(total), kThreads, 0, stream>>>(
        static_cast<const W *>(data), indices, indices32, static_cast<W *>(out),
        g, sink);
    return cudaGetLastError();
  });
}

cudaError_t gmopt::cuda::launchScatterND(const void *indices, bool indices32,
                                         const void *updates, void *out,
                                         const NDIndexing &g, Storage storage,
                                         ScatterOp op, cudaStream_t stream) {
  int64_t total = g.batches * g.tuples * g.block;
  if (total == 0)
    return cudaSuccess;
  FaultSink sink;
  if (cudaError_t status = faultSink(sink))
    return status;
  if (op == ScatterOp::None)
    return withWord(storageBytes(storage), [&](auto tag) {
      using W = decltype(tag);
      scatterNDKernel<W, false><<<gridFor(total), kThreads, 0, stream>>>(
          indices, indices32, static_cast<const W *>(updates),
          static_cast<W *>(out), g, op, sink);
      return cudaGetLastError();
    });
  return withReducing(storage, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2)
      if (op != ScatterOp::Add)
        return cudaErrorInvalidValue;
    scatterNDKernel<T, true><<<gridFor(total), kThreads, 0, stream>>>(
        indices, indices32, static_cast<const T *>(updates),
        static_cast<T *>(out), g, op, sink);
    return cudaGetLastError();
  });
}
