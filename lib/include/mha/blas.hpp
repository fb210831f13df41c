// The one place that talks to CBLAS (<cblas.h> cannot share a translation
// unit with xtensor-blas). Row-major GEMM on raw pointers with leading
// dimensions, so a head's slice of a projection is addressed in place.
#pragma once

#include <cstddef>

namespace mha {

// C (m x n, ldc) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C
// op(A) = A (m x k, lda) or, with trans_a, A^T where A is (k x m, lda).
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
          const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc);

// Makes every GEMM single-threaded: the kernel runs its own OpenMP pool and
// calls BLAS from inside it (BLAS threads on top of it halve the speed).
void blas_single_threaded();

}  // namespace mha
