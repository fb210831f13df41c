// The direct GEMM: C (rows, N) (+)= A (rows, K) B (K, N), float32, row-major,
// with no packing of either operand. The attention's block products (the
// fused kernel's P V_i and Q_i K_i^T) have one small dimension (d_k, d_v or a
// block of keys) and operands already in cache, where OpenBLAS spends a tenth
// of the time copying P into its packed layout; these kernels read A and B in
// place (BERT-base's 512 x 512 by 512 x 64 block: 112 vs 96 GFLOP/s on one Zen
// 4 core). Internal to the kernel; the per-ISA functions are exposed for the
// unit tests (tests/test_direct_gemm.cpp).
//
// Every element of C is one chain of fused multiply-adds over k = 0, 1, ...,
// K - 1 in that order, from 0 or from C: the AVX2 and AVX-512 builds give the
// same bits, and the bits do not depend on how the caller cuts rows or
// columns into pieces.
#pragma once

#include <cstddef>

namespace mha::detail {

// C (rows, N; ldc) = A (rows, K; lda) B (K, N; ldb), or C += A B when
// `accumulate`, or C = bias + A B with bias (N) added to every row when bias
// is non-null (the chains then start from bias[c]: the same bits as copying
// the bias into C and accumulating). Calling one on a CPU without its ISA
// (see vexp_impl.hpp's cpu_has_*) is undefined (an illegal instruction).
void direct_gemm_avx2(std::size_t rows, std::size_t N, std::size_t K, const float* A,
                      std::size_t lda, const float* B, std::size_t ldb, float* C, std::size_t ldc,
                      bool accumulate, const float* bias = nullptr);
void direct_gemm_avx512(std::size_t rows, std::size_t N, std::size_t K, const float* A,
                        std::size_t lda, const float* B, std::size_t ldb, float* C, std::size_t ldc,
                        bool accumulate, const float* bias = nullptr);

// What the attention uses for its block products, for a request (the value of
// MHA_DIRECT_GEMM): "avx512", "avx2" or "blas" (OpenBLAS's sgemm). The
// requested one if the CPU supports it; otherwise (and for a null, empty or
// unknown request) "avx512" where the CPU has it, else "blas": the AVX2 build
// is slower than OpenBLAS's AVX2 kernels and runs only when asked for.
const char* select_direct_gemm_isa(const char* request);

// As direct_gemm_avx2/avx512 through this process's choice; false (and C
// untouched) when that is "blas", for the caller to use gemm() instead.
bool direct_gemm(std::size_t rows, std::size_t N, std::size_t K, const float* A, std::size_t lda,
                 const float* B, std::size_t ldb, float* C, std::size_t ldc, bool accumulate,
                 const float* bias = nullptr);

}  // namespace mha::detail
