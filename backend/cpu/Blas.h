//===- Blas.h - Row-major GEMM through OpenBLAS -----------------*- C++ -*-===//
//
// The one place the CPU backend calls BLAS: row-major C = alpha * op(A) *
// op(B) + beta * C for fp32 (cblas_sgemm) and f64 (cblas_dgemm), with the
// degenerate sizes BLAS rejects (a zero extent) handled here, and a plain
// loop for integer element types.
//
// OpenBLAS runs single-threaded (see useSingleThreadedBlas): its own
// threading may split the K dimension for some shapes, which changes the
// rounding with the thread count. Instead gemm cuts C into blocks of rows
// (or columns) whose size depends only on the problem's extents and hands
// the blocks to the backend's thread pool; every element of C is then
// computed by one single-threaded call in the same order whatever the
// thread count, so results are bitwise reproducible.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_BLAS_H
#define GMOPT_BACKEND_CPU_BLAS_H

#include "backend/cpu/Parallel.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>

namespace gmopt {
namespace cpu {

/// Makes OpenBLAS compute on the calling thread only (once per process).
void useSingleThreadedBlas();

/// True if every extent fits BLAS's 32-bit integers.
inline bool fitsBlasInt(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t limit = std::numeric_limits<int>::max();
  return m <= limit && n <= limit && k <= limit;
}

/// One single-threaded GEMM call (see gemm).
template <typename T>
void gemmBlock(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
               T alpha, const T *a, int64_t lda, const T *b, int64_t ldb,
               T beta, T *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0 || alpha == T(0)) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : T(beta * c[i * ldc + j]);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), alpha, a,
                static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
                static_cast<int>(ldc));
  } else if constexpr (std::is_same_v<T, double>) {
    cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), alpha, a,
                static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
                static_cast<int>(ldc));
  } else {
    // Integers: wrap like the element-wise ops do.
    using U = std::make_unsigned_t<T>;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        U sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          T av = transA ? a[p * lda + i] : a[i * lda + p];
          T bv = transB ? b[j * ldb + p] : b[p * ldb + j];
          sum += static_cast<U>(av) * static_cast<U>(bv);
        }
        U scaled = static_cast<U>(alpha) * sum;
        if (beta != T(0))
          scaled += static_cast<U>(beta) * static_cast<U>(c[i * ldc + j]);
        c[i * ldc + j] = static_cast<T>(scaled);
      }
  }
}

/// The extents and layout of one matrix product (see gemm).
struct GemmShape {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

/// How a product is cut into single-threaded calls: \p count blocks of
/// \p size rows (or columns) of C. Depends on the extents only.
struct GemmBlocking {
  bool splitRows = true;
  int64_t size = 0;
  int64_t count = 1;
};

inline GemmBlocking planGemmBlocks(int64_t m, int64_t n, int64_t k) {
  // Each call packs its slice of A or B again and pays a task hand-off, so
  // a block must carry enough work to amortize that: at least 64 rows or
  // columns and about kMinBlockWork multiply-adds, and at most 16 blocks.
  // Small products stay whole. A long inner dimension also wants wide
  // blocks: every block streams the whole unsplit operand (K x the other
  // extent) through the cache again, so narrow blocks of a deep product
  // are memory-bound (128x768x3072 in 12 blocks of 64 columns took 1.5x
  // the time of one call, 128x768x50257 1.7x). Blocks are at least K/8
  // wide, but a big product still gets two blocks for two threads (at
  // most a few percent slower than one call).
  constexpr int64_t kMinBlock = 64, kMaxBlocks = 16;
  constexpr int64_t kMinBlockWork = int64_t(1) << 19;
  constexpr int64_t kDepthPerWidth = 8;
  GemmBlocking blocking;
  blocking.splitRows = m >= n;
  int64_t extent = blocking.splitRows ? m : n;
  int64_t work = m * n * std::max<int64_t>(k, 1);
  int64_t count =
      std::min({kMaxBlocks, extent / kMinBlock, work / kMinBlockWork,
                std::max<int64_t>(2, extent * kDepthPerWidth /
                                         std::max<int64_t>(k, 1))});
  if (count <= 1) {
    blocking.size = std::max<int64_t>(extent, 1);
    blocking.count = 1;
    return blocking;
  }
  int64_t size = (extent + count - 1) / count;
  blocking.size = (size + 15) / 16 * 16;
  blocking.count = numChunks(extent, blocking.size);
  return blocking;
}

/// C_i = alpha * op(A_i) * op(B_i) + beta * C_i for i in [0, batch), where
/// operands(i) returns the (A_i, B_i, C_i) pointers. Every (batch, block)
/// pair is one single-threaded call, run on up to \p numThreads threads;
/// the calls, and so the results, do not depend on the thread count.
template <typename T, typename OperandsFn>
void batchedGemm(unsigned numThreads, const GemmShape &s, int64_t batch,
                 T alpha, T beta, const OperandsFn &operands) {
  if (batch <= 0 || s.m == 0 || s.n == 0)
    return;
  GemmBlocking blocking = planGemmBlocks(s.m, s.n, s.k);
  int64_t extent = blocking.splitRows ? s.m : s.n;
  int64_t tasks = batch * blocking.count;
  int64_t work = s.m * s.n * std::max<int64_t>(s.k, 1) / blocking.count;
  parallelFor(
      numThreads, tasks, std::max<int64_t>(1, (int64_t(1) << 16) / work),
      [&](int64_t lo, int64_t hi) {
        for (int64_t task = lo; task < hi; ++task) {
          auto [a, b, c] = operands(task / blocking.count);
          int64_t begin = (task % blocking.count) * blocking.size;
          int64_t end = std::min(extent, begin + blocking.size);
          if (blocking.splitRows) {
            const T *rowsOfA = s.transA ? a + begin : a + begin * s.lda;
            gemmBlock<T>(s.transA, s.transB, end - begin, s.n, s.k, alpha,
                         rowsOfA, s.lda, b, s.ldb, beta, c + begin * s.ldc,
                         s.ldc);
          } else {
            const T *columnsOfB = s.transB ? b + begin * s.ldb : b + begin;
            gemmBlock<T>(s.transA, s.transB, s.m, end - begin, s.k, alpha, a,
                         s.lda, columnsOfB, s.ldb, beta, c + begin, s.ldc);
          }
        }
      });
}

/// Row-major C[M,N] = alpha * op(A) * op(B) + beta * C, where op(A) is
/// [M,K] (A stored [K,M] when transA) and op(B) is [K,N] (B stored [N,K]
/// when transB); lda/ldb/ldc are row strides in elements. Runs on up to
/// \p numThreads threads with thread-count-independent results. The caller
/// checked fitsBlasInt.
template <typename T>
void gemm(unsigned numThreads, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, T alpha, const T *a, int64_t lda, const T *b, int64_t ldb,
          T beta, T *c, int64_t ldc) {
  GemmShape shape{transA, transB, m, n, k, lda, ldb, ldc};
  batchedGemm<T>(numThreads, shape, 1, alpha, beta,
                 [&](int64_t) { return std::make_tuple(a, b, c); });
}

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_BLAS_H
