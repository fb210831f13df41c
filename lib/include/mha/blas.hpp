// The one place that talks to CBLAS (<cblas.h> cannot share a translation
// unit with xtensor-blas). Row-major GEMM on raw pointers with leading
// dimensions, so a head's slice of a projection is addressed in place.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha {

// C (m x n, ldc) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C
// op(A) = A (m x k, lda) or, with trans_a, A^T where A is (k x m, lda).
// bf16 (float only; dtype bfloat16): A and B are first rounded to bfloat16
// (nearest even) and their products summed in float32, as OpenBLAS's
// cblas_sbgemm computes; C, alpha and beta stay float32.
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
          const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc,
          bool bf16 = false);

// What runs a bf16 GEMM: "sbgemm" when the loaded OpenBLAS exports
// cblas_sbgemm (built with BUILD_BFLOAT16=1; Debian 12's 0.3.21 is not),
// else "sgemm": the rounded operands, exact in float32, through cblas_sgemm.
// A product of two bfloat16 values is exact in float32, so both compute the
// same products with float32 sums, in different orders.
// MHA_BF16_GEMM=sgemm|sbgemm in the environment picks one (sbgemm must exist).
const char* bf16_gemm_backend();

// For tests: routes the "sbgemm" backend to `fn` (a cblas_sbgemm with
// CBLAS's enum values as ints: order 101 row-major, trans 111 no / 112 yes),
// or back to OpenBLAS's with nullptr.
using SbgemmFn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                          const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb,
                          float beta, float* C, int ldc);
void set_sbgemm_for_tests(SbgemmFn fn);

// Makes every GEMM single-threaded: the kernel runs its own OpenMP pool and
// calls BLAS from inside it (BLAS threads on top of it halve the speed).
void blas_single_threaded();

}  // namespace mha
