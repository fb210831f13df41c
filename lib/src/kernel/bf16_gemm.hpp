// The native bfloat16 GEMM (dtype bfloat16 on CPUs with AVX512_BF16):
// C (rows, N) (+)= alpha * bf16(A) (rows, K) bf16(B) (K, N), each operand
// rounded to bfloat16 (nearest even) and every pair of products added to a
// float32 accumulator by one VDPBF16PS. Internal to the kernel; blas.hpp's
// gemm(..., bf16) and the attention's block products call it, and
// tests/test_bf16_gemm.cpp holds it against double loops.
//
// B is packed first (bf16_pack_b): bfloat16 pairs, the layout VDPBF16PS
// multiplies, so a weight matrix or a block of K or V is packed once and
// read by every row tile. A is rounded a block of rows at a time inside
// bf16_gemm.
//
// Numerics: bfloat16's products are exact in float32; VDPBF16PS adds the
// odd-k product and then the even-k one to the accumulator, rounding to
// nearest each time, over k = 0, 1, ..., K - 1 in pairs, from 0, in slices
// of 1024 k: alpha scales a slice's sum, which is added to C (the first
// slice's to 0 unless accumulate). The instruction
// treats subnormal inputs as 0 and flushes subnormal results to 0 whatever
// MXCSR says, so do the roundings (values below 2^-126 in magnitude become
// 0). Every element of C is one chain over k: the bits do not depend on how
// the caller cuts rows or columns into pieces, nor on the thread count.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha::detail {

// The CPU and OS support AVX-512 F, BW and BF16 (cpuid leaf 7, subleaf 1, EAX bit 5).
bool cpu_has_avx512_bf16();

// Pairs of k a packed B has: ceil(K / 2).
inline std::size_t bf16_pairs(std::size_t K) {
  return (K + 1) / 2;
}

// out[p * ldp + j] (p < bf16_pairs(K), j < N) = the bfloat16 bits of
// op(B)[2p][j] in its low half and of op(B)[2p + 1][j] (0 past K) in its high
// half, where op(B) (K, N) is B (K, N; ldb) or, with `trans`, B^T for B
// (N, K; ldb). Needs cpu_has_avx512_bf16().
void bf16_pack_b(bool trans, std::size_t K, std::size_t N, const float* B, std::size_t ldb,
                 std::uint32_t* out, std::size_t ldp);

// The same from bfloat16 values (bits, as a BF16 file stores them): the
// words bf16_pack_b packs from their float32 values (subnormals become a zero
// of their sign, NaNs quiet), with no float32 copy.
void bf16_pack_b_bits(bool trans, std::size_t K, std::size_t N, const std::uint16_t* B,
                      std::size_t ldb, std::uint32_t* out, std::size_t ldp);

// out[r * ldo + p] (r < rows, p < bf16_pairs(K)) = the bfloat16 bits of
// A[r][2p] in its low half and of A[r][2p + 1] (0 past K) in its high half,
// for A (rows, K; lda): an A operand rounded once for several products.
// Needs cpu_has_avx512_bf16().
void bf16_round_rows(std::size_t rows, std::size_t K, const float* A, std::size_t lda,
                     std::uint32_t* out, std::size_t ldo);

// C (rows, N; ldc) = alpha * Ap Bp, or C += alpha * Ap Bp when `accumulate`,
// or C = bias + alpha * Ap Bp with bias (N) added to every row when bias is
// non-null,
// where Ap (rows, K) is rounded by bf16_round_rows (leading dimension ldap
// words) and Bp (K, N) packed by bf16_pack_b (ldbp words). Needs
// cpu_has_avx512_bf16().
void bf16_gemm_rounded(std::size_t rows, std::size_t N, std::size_t K, float alpha,
                       const std::uint32_t* Ap, std::size_t ldap, const std::uint32_t* Bp,
                       std::size_t ldbp, float* C, std::size_t ldc, bool accumulate,
                       const float* bias = nullptr);

// As bf16_gemm_rounded for op(A) (rows, K) in float32: A (rows, K; lda) or,
// with trans_a, A^T for A (K, rows; lda), rounded a block of rows at a time
// into per-thread scratch.
void bf16_gemm(std::size_t rows, std::size_t N, std::size_t K, float alpha, bool trans_a,
               const float* A, std::size_t lda, const std::uint32_t* Bp, std::size_t ldbp, float* C,
               std::size_t ldc, bool accumulate, const float* bias = nullptr);

// Whether gemm(..., bf16) runs bf16_gemm in this process (blas.hpp's
// bf16_gemm_backend() is "amx" or "avx512bf16"), so callers may pack B themselves.
bool bf16_native();

// The CPU has AMX-TILE and AMX-BF16 and the OS gave this process the tiles'
// state (arch_prctl ARCH_REQ_XCOMP_PERM).
bool cpu_has_amx_bf16();
// Whether bf16_gemm_rounded runs on AMX tiles: where cpu_has_amx_bf16(),
// unless MHA_BF16_GEMM=avx512bf16 asks for VDPBF16PS (blas.cpp decides:
// bf16_amx_chosen); a test may force either (set_bf16_amx_for_tests: 1 on
// where the CPU has it, 0 off, -1 back to the process's choice).
bool bf16_amx();
bool bf16_amx_chosen();
void set_bf16_amx_for_tests(int on);

}  // namespace mha::detail
