// The direct GEMM (direct_gemm.hpp): register tiles of kRows rows of C by
// kRegs vector registers of columns. For each k, the tile loads one row of B
// (kRegs registers) and broadcasts one element of A per row, then does
// kRows * kRegs fused multiply-adds into accumulators that stay in registers
// until the tile's K is done. Columns past the last full register go through
// masked loads and stores, so nothing outside the operands is read or
// written. One body (a template over the ISA's operations, struct V),
// compiled under AVX2 + FMA and under AVX-512F by target attributes, as
// vexp.cpp is.
#include "direct_gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "intrinsics.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/vexp.hpp"
#include "vexp_impl.hpp"

namespace mha {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
// 16 ymm registers: 6 x 2 accumulators, 2 of B, 1 broadcast.
struct V {
  using reg = __m256;
  using mask = __m256i;
  static constexpr std::size_t kLanes = 8;
  static constexpr int kRows = 6, kRegs = 2;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float v) { return _mm256_set1_ps(v); }
  static reg load(const float* x) { return _mm256_loadu_ps(x); }
  static reg load(const float* x, mask m) { return _mm256_maskload_ps(x, m); }
  static void store(float* x, reg v) { _mm256_storeu_ps(x, v); }
  static void store(float* x, mask m, reg v) { _mm256_maskstore_ps(x, m, v); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  // Lanes [0, count) on.
  static mask first(std::size_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
};
#include "direct_gemm_simd.inc"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
// 32 zmm registers: 6 x 4 accumulators, 4 of B, 1 broadcast.
struct V {
  using reg = __m512;
  using mask = __mmask16;
  static constexpr std::size_t kLanes = 16;
  static constexpr int kRows = 6, kRegs = 4;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float v) { return _mm512_set1_ps(v); }
  static reg load(const float* x) { return _mm512_loadu_ps(x); }
  static reg load(const float* x, mask m) { return _mm512_maskz_loadu_ps(m, x); }
  static void store(float* x, reg v) { _mm512_storeu_ps(x, v); }
  static void store(float* x, mask m, reg v) { _mm512_mask_storeu_ps(x, m, v); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static mask first(std::size_t count) {
    return static_cast<__mmask16>(count >= 16 ? 0xffffu : (1u << count) - 1u);
  }
};
#include "direct_gemm_simd.inc"
}  // namespace avx512
#pragma GCC pop_options

using Fn = void (*)(std::size_t, std::size_t, std::size_t, const float*, std::size_t, const float*,
                    std::size_t, float*, std::size_t, bool, const float*);

struct Choice {
  const char* isa;
  Fn fn;  // null for "blas"
};

const Choice& choice() {
  static const Choice c = [] {
    const char* isa = detail::select_direct_gemm_isa(std::getenv("MHA_DIRECT_GEMM"));
    const std::string_view name = isa;
    if (name == "avx512") return Choice{isa, detail::direct_gemm_avx512};
    if (name == "avx2") return Choice{isa, detail::direct_gemm_avx2};
    return Choice{isa, nullptr};
  }();
  return c;
}

}  // namespace

namespace detail {

void direct_gemm_avx2(std::size_t rows, std::size_t N, std::size_t K, const float* A,
                      std::size_t lda, const float* B, std::size_t ldb, float* C, std::size_t ldc,
                      bool accumulate, const float* bias) {
  avx2::Kernel::run(rows, N, K, A, lda, B, ldb, C, ldc, accumulate, bias);
}

void direct_gemm_avx512(std::size_t rows, std::size_t N, std::size_t K, const float* A,
                        std::size_t lda, const float* B, std::size_t ldb, float* C, std::size_t ldc,
                        bool accumulate, const float* bias) {
  avx512::Kernel::run(rows, N, K, A, lda, B, ldb, C, ldc, accumulate, bias);
}

// AVX-512 when the CPU has it; the AVX2 build only when asked for: with
// 16 registers its tiles (6 x 2) load too much per multiply-add, and it ran
// 1.2-1.35x slower than OpenBLAS's AVX2 (Haswell) kernels on the same cases
// (bert-s128, long-4k, decode-4k on one thread), so an AVX2-only CPU keeps
// OpenBLAS.
const char* select_direct_gemm_isa(const char* request) {
  const std::string_view want = request ? request : "";
  if (want == "blas") return "blas";
  if (want == "avx2" && cpu_has_avx2()) return "avx2";
  if (cpu_has_avx512()) return "avx512";
  return "blas";
}

bool direct_gemm(std::size_t rows, std::size_t N, std::size_t K, const float* A, std::size_t lda,
                 const float* B, std::size_t ldb, float* C, std::size_t ldc, bool accumulate,
                 const float* bias) {
  const Fn fn = choice().fn;
  if (!fn) return false;
  fn(rows, N, K, A, lda, B, ldb, C, ldc, accumulate, bias);
  return true;
}

}  // namespace detail

// The choice for this process, made on first use from the CPU and
// MHA_DIRECT_GEMM.
const char* direct_gemm_isa() {
  return choice().isa;
}

}  // namespace mha
