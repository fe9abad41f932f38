//===- Blas.h - Row-major GEMM through OpenBLAS -----------------*- C++ -*-===//
//
// The one place the CPU backend calls BLAS: row-major C = alpha * op(A) *
// op(B) + beta * C for fp32 (cblas_sgemm) and f64 (cblas_dgemm), with the
// degenerate sizes BLAS rejects (a zero extent) handled here, and a plain
// loop for integer element types.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_BLAS_H
#define GMOPT_BACKEND_CPU_BLAS_H

#include <cblas.h>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace gmopt {
namespace cpu {

/// True if every extent fits BLAS's 32-bit integers.
inline bool fitsBlasInt(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t limit = std::numeric_limits<int>::max();
  return m <= limit && n <= limit && k <= limit;
}

/// Row-major C[M,N] = alpha * op(A) * op(B) + beta * C, where op(A) is
/// [M,K] (A stored [K,M] when transA) and op(B) is [K,N] (B stored [N,K]
/// when transB); lda/ldb/ldc are row strides in elements. The caller checked
/// fitsBlasInt.
template <typename T>
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, T alpha,
          const T *a, int64_t lda, const T *b, int64_t ldb, T beta, T *c,
          int64_t ldc) {
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

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_BLAS_H
