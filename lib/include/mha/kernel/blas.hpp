// The one place that talks to CBLAS (<cblas.h> cannot share a translation
// unit with xtensor-blas). Row-major GEMM on raw pointers with leading
// dimensions, so a head's slice of a projection is addressed in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

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

// What runs the attention's float32 block products (the fused kernel's
// P V_i and Q_i K_i^T) and projections: "avx512" (the default where the CPU
// has AVX-512) or "avx2" (only when asked for) for the direct GEMM, which
// reads its operands without packing them, or "blas" for OpenBLAS's sgemm.
// MHA_DIRECT_GEMM=avx512|avx2|blas in the environment picks one the CPU
// supports. The two vector builds give the same bits.
const char* direct_gemm_isa();

// For tests: routes the "sbgemm" backend to `fn` (a cblas_sbgemm with
// CBLAS's enum values as ints: order 101 row-major, trans 111 no / 112 yes),
// or back to OpenBLAS's with nullptr.
using SbgemmFn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                          const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb,
                          float beta, float* C, int ldc);
void set_sbgemm_for_tests(SbgemmFn fn);

// Which OpenBLAS runs the GEMMs, and with which kernels (run.json's "blas").
struct BlasInfo {
  std::string library;          // the file dlopen loaded
  std::string core;             // openblas_get_corename(): the kernel set, e.g. "SkylakeX", "Zen"
  std::string coretype;         // OPENBLAS_CORETYPE in force when it loaded ("" when none)
  std::string coretype_source;  // "user" (the environment), "mha" (auto_coretype) or "openblas"
  std::string threading;        // "serial", "pthreads" or "openmp"
  std::string config;           // openblas_get_config()
};

// Loads OpenBLAS once per process and returns what was loaded. Call it
// before any parallel work (gemm() loads on first use, and a failure to load
// throws). The library is MHA_OPENBLAS_PATH, set by CMake to Debian's
// pthread build (or the file $MHA_OPENBLAS names), loaded with
// OPENBLAS_NUM_THREADS=1 so that it starts no threads: the kernel runs one
// pool (thread_pool.hpp) and calls single-threaded GEMMs from its tasks.
// Debian's serial build would be the natural choice but gives wrong results
// now and then when called from two threads at once (0.3.21: 5 runs in 60);
// the pthread build with one thread is the configuration OpenBLAS supports
// for that. Before loading, OPENBLAS_CORETYPE is set to auto_coretype()'s
// choice unless the user set it. The environment is restored afterwards.
const BlasInfo& blas_load();

// Starts loading OpenBLAS on a background thread and returns at once, so that
// loading overlaps other work; blas_load() waits for it. Until then the
// environment holds OPENBLAS_NUM_THREADS=1 (and OPENBLAS_CORETYPE when chosen):
// start no child process in between.
void blas_preload();

// The CPU features OpenBLAS's kernel sets need, from cpuid and xgetbv.
struct CpuFeatures {
  bool avx512f = false, avx512cd = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool os_avx512 = false;  // the OS saves the AVX-512 registers (XCR0 bits 1, 2, 5, 6, 7)
};
CpuFeatures cpu_features();

// The OPENBLAS_CORETYPE to load OpenBLAS with, or nullopt to leave the
// choice to OpenBLAS: "SkylakeX" when the CPU has the AVX-512 subsets its
// SkylakeX kernels use (0.3.21 runs its AVX2 Haswell kernels on AMD Zen 4
// otherwise, at about 0.6x the speed), nothing when `user_coretype` (the
// environment's value) is set, which always wins.
std::optional<std::string> auto_coretype(const char* user_coretype, const CpuFeatures& cpu);

}  // namespace mha
