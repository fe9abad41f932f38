//===- ReduceKernels.cu - Reductions and reducing ops on CUDA -------------===//
//
// The kernels behind ReduceKernels.h. An output (a reduced element, an
// arg-reduction line, an instance-norm plane, a layer-norm row, a DivGrad
// gradient element) belongs to a group of 1, 32 or 256 threads: each thread
// accumulates a strided share of the reduced elements, the group combines
// the shares by warp shuffles and, for a block, through shared memory in
// warp order. The group size depends only on the shapes, so every result
// is reproducible. The arithmetic is ReduceMath.h's; the reduced elements
// are reached through ReduceIndexing, so any set of axes reduces without a
// transposed copy.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/LaunchSupport.h"
#include "backend/cuda/ReduceKernels.h"

using namespace gmopt::cuda;

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;

/// Threads per output: one for short reductions, a block for long ones
/// with few outputs, a warp otherwise.
int groupSizeFor(int64_t outputs, int64_t count) {
  if (count < kWarp)
    return 1;
  if (outputs < 4 * 1024 && count >= 4 * 1024)
    return kThreads;
  return kWarp;
}

unsigned groupGridFor(int64_t outputs, int group) {
  int64_t perBlock = kThreads / group;
  int64_t blocks = (outputs + perBlock - 1) / perBlock;
  if (blocks < 1)
    blocks = 1;
  return static_cast<unsigned>(blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

__device__ __forceinline__ double shuffleXor(double v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ ArgBest shuffleXor(ArgBest v, int offset) {
  ArgBest other;
  other.value = __shfl_xor_sync(0xffffffffu, v.value, offset);
  other.index =
      __shfl_xor_sync(0xffffffffu, static_cast<long long>(v.index), offset);
  return other;
}

/// Combines \p v over the Group threads of a group; every thread of the
/// group gets the result. \p shared holds kWarpsPerBlock values (Group ==
/// kThreads only, where every thread of the block must call).
template <int Group, typename V, typename Combine>
__device__ V groupCombine(V v, Combine combine, V *shared) {
  if constexpr (Group > 1)
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
      v = combine(v, shuffleXor(v, offset));
  if constexpr (Group == kThreads) {
    if (threadIdx.x % kWarp == 0)
      shared[threadIdx.x / kWarp] = v;
    __syncthreads();
    v = shared[0];
    for (int w = 1; w < kWarpsPerBlock; ++w)
      v = combine(v, shared[w]);
    // The next call may overwrite shared.
    __syncthreads();
  }
  return v;
}

/// Loops \p out over the outputs of this thread's group (uniform across a
/// group, so a block-sized group may synchronize inside).
#define FOR_EACH_GROUP_OUTPUT(out, outputs)                                    \
  for (int64_t out =                                                           \
           blockIdx.x * int64_t(kThreads / Group) + threadIdx.x / Group;       \
       out < (outputs); out += int64_t(gridDim.x) * (kThreads / Group))

__device__ __forceinline__ double addDoubles(double a, double b) {
  return a + b;
}

//===----------------------------------------------------------------------===//
// Reduce*
//===----------------------------------------------------------------------===//

template <typename T, int Group>
__global__ void reduceKernel(ReduceKind kind, const T *x, T *out,
                             ReduceIndexing ix) {
  __shared__ double shared[kWarpsPerBlock];
  int lane = threadIdx.x % Group;
  auto combineKind = [kind](double a, double b) {
    return reduceCombine(kind, a, b);
  };
  auto combineMax = [](double a, double b) {
    return reduceCombine(ReduceKind::Max, a, b);
  };
  FOR_EACH_GROUP_OUTPUT(o, ix.outputs) {
    int64_t base = keptOffset(ix, 0, o);
    double shift = 0;
    if (kind == ReduceKind::LogSumExp) {
      double rowMax = reduceInit(ReduceKind::Max);
      for (int64_t r = lane; r < ix.count; r += Group)
        rowMax =
            combineMax(rowMax, loadAsFloat(x, base + reducedOffset(ix, 0, r)));
      shift = groupCombine<Group>(rowMax, combineMax, shared);
    }
    double acc = reduceInit(kind);
    for (int64_t r = lane; r < ix.count; r += Group)
      acc = combineKind(
          acc, reducePre(kind, loadAsFloat(x, base + reducedOffset(ix, 0, r)),
                         shift));
    acc = groupCombine<Group>(acc, combineKind, shared);
    if (lane == 0)
      storeFromFloat(out, o, reduceFinalize(kind, acc, ix.count, shift));
  }
}

template <typename T, int Group>
__global__ void argReduceKernel(const T *x, int64_t *out, ReduceIndexing ix,
                                bool isMax, bool selectLast) {
  __shared__ ArgBest shared[kWarpsPerBlock];
  int lane = threadIdx.x % Group;
  auto combine = [isMax, selectLast](ArgBest a, ArgBest b) {
    return argCombine(a, b, isMax, selectLast);
  };
  FOR_EACH_GROUP_OUTPUT(o, ix.outputs) {
    int64_t base = keptOffset(ix, 0, o);
    ArgBest best = argNone();
    for (int64_t r = lane; r < ix.count; r += Group)
      best = argConsider(best, loadAsFloat(x, base + reducedOffset(ix, 0, r)),
                         r, isMax, selectLast);
    best = groupCombine<Group>(best, combine, shared);
    if (lane == 0)
      out[o] = argResult(best, ix.count ? loadAsFloat(x, base) : 0.0f);
  }
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

template <typename T, int Group>
__global__ void instanceNormKernel(const T *x, const T *scale, const T *bias,
                                   T *y, int64_t planes, int64_t channels,
                                   int64_t size, double epsilon) {
  __shared__ double shared[kWarpsPerBlock];
  int lane = threadIdx.x % Group;
  FOR_EACH_GROUP_OUTPUT(p, planes) {
    int64_t base = p * size;
    double sum = 0;
    for (int64_t i = lane; i < size; i += Group)
      sum += loadAsFloat(x, base + i);
    sum = groupCombine<Group>(sum, addDoubles, shared);
    double mean = size ? sum / static_cast<double>(size) : 0.0;
    double squares = 0;
    for (int64_t i = lane; i < size; i += Group) {
      double d = loadAsFloat(x, base + i) - mean;
      squares += mulUnfused(d, d);
    }
    squares = groupCombine<Group>(squares, addDoubles, shared);
    int64_t c = p % channels;
    NormAffine affine =
        instanceNormAffine(loadAsFloat(scale, c), loadAsFloat(bias, c), mean,
                           instanceNormInvStd(squares, size, epsilon));
    // Each element is read and written by one thread (y may alias x).
    for (int64_t i = lane; i < size; i += Group)
      storeFromFloat(y, base + i,
                     instanceNormElement(loadAsFloat(x, base + i), affine));
  }
}

template <typename T, int Group>
__global__ void invertibleNormGradKernel(const T *dy, const T *y,
                                         const T *scale, const T *bias,
                                         const float *invStd, T *dx,
                                         int64_t rows, int64_t cols) {
  __shared__ double shared[kWarpsPerBlock];
  int lane = threadIdx.x % Group;
  FOR_EACH_GROUP_OUTPUT(row, rows) {
    int64_t base = row * cols;
    float inv = invStd[row];
    double sumB = 0, sumBX = 0;
    for (int64_t j = lane; j < cols; j += Group) {
      float s = loadAsFloat(scale, j);
      double xhat =
          invertibleXhat(loadAsFloat(y, base + j), loadAsFloat(bias, j), s);
      double b = normGradB(loadAsFloat(dy, base + j), s, inv);
      sumB += b;
      sumBX += mulUnfused(b, xhat);
    }
    sumB = groupCombine<Group>(sumB, addDoubles, shared);
    sumBX = groupCombine<Group>(sumBX, addDoubles, shared);
    double meanB = sumB / static_cast<double>(cols);
    double meanBX = sumBX / static_cast<double>(cols);
    for (int64_t j = lane; j < cols; j += Group) {
      float s = loadAsFloat(scale, j);
      double xhat =
          invertibleXhat(loadAsFloat(y, base + j), loadAsFloat(bias, j), s);
      double b = normGradB(loadAsFloat(dy, base + j), s, inv);
      storeFromFloat(dx, base + j, normGradDx(b, xhat, meanB, meanBX));
    }
  }
}

/// dscale[j] = sum_r dy * xhat and dbias[j] = sum_r dy, one thread per
/// column: fp32 partials of kNormGradRowBlock rows, summed in double in row
/// order.
template <typename T>
__global__ void invertibleNormParamGradKernel(const T *dy, const T *y,
                                              const T *scale, const T *bias,
                                              T *dscale, T *dbias, int64_t rows,
                                              int64_t cols) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < cols;
       j += int64_t(gridDim.x) * blockDim.x) {
    float s = loadAsFloat(scale, j), offset = loadAsFloat(bias, j);
    double sumScale = 0, sumBias = 0;
    for (int64_t first = 0; first < rows; first += kNormGradRowBlock) {
      int64_t last =
          first + kNormGradRowBlock < rows ? first + kNormGradRowBlock : rows;
      float partialScale = 0, partialBias = 0;
      for (int64_t r = first; r < last; ++r) {
        float g = loadAsFloat(dy, r * cols + j);
        partialScale += scaleGradTerm(
            g, invertibleXhat(loadAsFloat(y, r * cols + j), offset, s));
        partialBias += g;
      }
      sumScale += partialScale;
      sumBias += partialBias;
    }
    if (dscale)
      storeFromFloat(dscale, j, static_cast<float>(sumScale));
    if (dbias)
      storeFromFloat(dbias, j, static_cast<float>(sumBias));
  }
}

//===----------------------------------------------------------------------===//
// DivGrad
//===----------------------------------------------------------------------===//

template <typename T, int Group, bool ForB>
__global__ void divGradKernel(const T *dy, const T *a, const T *b, T *grad,
                              ReduceIndexing ix) {
  __shared__ double shared[kWarpsPerBlock];
  int lane = threadIdx.x % Group;
  FOR_EACH_GROUP_OUTPUT(o, ix.outputs) {
    int64_t baseDy = keptOffset(ix, 0, o), baseA = keptOffset(ix, 1, o),
            baseB = keptOffset(ix, 2, o);
    double acc = 0;
    for (int64_t r = lane; r < ix.count; r += Group) {
      float g = loadAsFloat(dy, baseDy + reducedOffset(ix, 0, r));
      float bv = loadAsFloat(b, baseB + reducedOffset(ix, 2, r));
      if constexpr (ForB)
        acc += divGradB(g, loadAsFloat(a, baseA + reducedOffset(ix, 1, r)), bv);
      else
        acc += divGradA(g, bv);
    }
    acc = groupCombine<Group>(acc, addDoubles, shared);
    if (lane == 0)
      storeFromFloat(grad, o, static_cast<float>(acc));
  }
}

/// Launches KERNEL<T, group, EXTRA...> for the group size of (outputs,
/// count).
#define LAUNCH_GROUPED(outputs, count, stream, KERNEL, TEMPLATE, ...)          \
  do {                                                                         \
    int group = groupSizeFor(outputs, count);                                  \
    unsigned grid = groupGridFor(outputs, group);                              \
    if (group == 1)                                                            \
      KERNEL<TEMPLATE, 1><<<grid, kThreads, 0, stream>>>(__VA_ARGS__);         \
    else if (group == kWarp)                                                   \
      KERNEL<TEMPLATE, kWarp><<<grid, kThreads, 0, stream>>>(__VA_ARGS__);     \
    else                                                                       \
      KERNEL<TEMPLATE, kThreads><<<grid, kThreads, 0, stream>>>(__VA_ARGS__);  \
  } while (false)

} // namespace

cudaError_t gmopt::cuda::launchStridedReduce(ReduceKind kind, Storage storage,
                                             const void *x, void *out,
                                             const ReduceIndexing &ix,
                                             cudaStream_t stream) {
  if (ix.outputs == 0)
    return cudaSuccess;
  GMOPT_DISPATCH_FLOAT_STORAGE(
      storage, T,
      LAUNCH_GROUPED(ix.outputs, ix.count, stream, reduceKernel, T, kind,
                     static_cast<const T *>(x), static_cast<T *>(out), ix));
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchReduce(ReduceKind kind, Storage storage,
                                      const void *x, void *out, RowShape shape,
                                      cudaStream_t stream) {
  std::vector<ReduceDim> dims(3);
  dims[0].extent = shape.outer;
  dims[0].stride[0] = shape.n * shape.inner;
  dims[1].extent = shape.n;
  dims[1].reduced = true;
  dims[1].stride[0] = shape.inner;
  dims[2].extent = shape.inner;
  dims[2].stride[0] = 1;
  ReduceIndexing ix;
  if (!planReduction(dims, ix))
    return cudaErrorInvalidValue;
  return launchStridedReduce(kind, storage, x, out, ix, stream);
}

cudaError_t gmopt::cuda::launchArgReduce(Storage storage, const void *x,
                                         int64_t *out, const ReduceIndexing &ix,
                                         bool isMax, bool selectLast,
                                         cudaStream_t stream) {
  if (ix.outputs == 0)
    return cudaSuccess;
  if (ix.reducedRank > 1)
    return cudaErrorInvalidValue;
  GMOPT_DISPATCH_FLOAT_STORAGE(
      storage, T,
      LAUNCH_GROUPED(ix.outputs, ix.count, stream, argReduceKernel, T,
                     static_cast<const T *>(x), out, ix, isMax, selectLast));
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchInstanceNorm(Storage storage, const void *x,
                                            const void *scale, const void *bias,
                                            void *y, int64_t planes,
                                            int64_t channels, int64_t size,
                                            double epsilon,
                                            cudaStream_t stream) {
  if (planes == 0)
    return cudaSuccess;
  GMOPT_DISPATCH_FLOAT_STORAGE(
      storage, T,
      LAUNCH_GROUPED(planes, size, stream, instanceNormKernel, T,
                     static_cast<const T *>(x), static_cast<const T *>(scale),
                     static_cast<const T *>(bias), static_cast<T *>(y), planes,
                     channels, size, epsilon));
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchInvertibleLayerNormGrad(
    Storage storage, const void *dy, const void *y, const void *scale,
    const void *bias, const float *invStd, void *dx, void *dscale, void *dbias,
    int64_t rows, int64_t cols, cudaStream_t stream) {
  GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, {
    const T *pdy = static_cast<const T *>(dy), *py = static_cast<const T *>(y);
    const T *ps = static_cast<const T *>(scale),
            *pb = static_cast<const T *>(bias);
    // The column sums first, should dx share dy's bytes.
    if ((dscale || dbias) && cols) {
      int64_t blocks = (cols + kThreads - 1) / kThreads;
      invertibleNormParamGradKernel<<<
          static_cast<unsigned>(blocks > 65535 ? 65535 : blocks), kThreads, 0,
          stream>>>(pdy, py, ps, pb, static_cast<T *>(dscale),
                    static_cast<T *>(dbias), rows, cols);
    }
    if (rows && cols)
      LAUNCH_GROUPED(rows, cols, stream, invertibleNormGradKernel, T, pdy, py,
                     ps, pb, invStd, static_cast<T *>(dx), rows, cols);
  });
  return cudaGetLastError();
}

cudaError_t gmopt::cuda::launchDivGrad(Storage storage, const void *dy,
                                       const void *a, const void *b, void *grad,
                                       const ReduceIndexing &ix, bool forB,
                                       cudaStream_t stream) {
  if (ix.outputs == 0)
    return cudaSuccess;
  GMOPT_DISPATCH_FLOAT_STORAGE(storage, T, {
    const T *pdy = static_cast<const T *>(dy), *pa = static_cast<const T *>(a),
            *pb = static_cast<const T *>(b);
    T *out = static_cast<T *>(grad);
    int group = groupSizeFor(ix.outputs, ix.count);
    unsigned grid = groupGridFor(ix.outputs, group);
    auto launch = [&](auto kernel) {
      kernel<<<grid, kThreads, 0, stream>>>(pdy, pa, pb, out, ix);
    };
    if (forB) {
      if (group == 1)
        launch(divGradKernel<T, 1, true>);
      else if (group == kWarp)
        launch(divGradKernel<T, kWarp, true>);
      else
        launch(divGradKernel<T, kThreads, true>);
    } else {
      if (group == 1)
        launch(divGradKernel<T, 1, false>);
      else if (group == kWarp)
        launch(divGradKernel<T, kWarp, false>);
      else
        launch(divGradKernel<T, kThreads, false>);
    }
  });
  return cudaGetLastError();
}
