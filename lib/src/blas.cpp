#include "mha/blas.hpp"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "mha/error.hpp"
#include "mha/precision.hpp"

namespace mha {
namespace {

CBLAS_TRANSPOSE op(bool trans) {
  return trans ? CblasTrans : CblasNoTrans;
}

// cblas_sbgemm's enums are ints in the SysV ABI, so the symbol can be called
// through SbgemmFn.
static_assert(sizeof(blasint) == sizeof(int) && sizeof(CBLAS_TRANSPOSE) == sizeof(int));

// The loaded OpenBLAS's cblas_sbgemm, looked up at run time so that the binary
// links against builds without it; null when absent.
SbgemmFn openblas_sbgemm() {
  static const SbgemmFn fn = reinterpret_cast<SbgemmFn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
  return fn;
}

std::atomic<SbgemmFn> g_test_sbgemm{nullptr};

// The routine bf16 GEMMs use: sbgemm when available, unless MHA_BF16_GEMM says.
SbgemmFn sbgemm_or_null() {
  if (SbgemmFn fn = g_test_sbgemm.load(std::memory_order_relaxed)) return fn;
  static const SbgemmFn chosen = [] {
    const char* env = std::getenv("MHA_BF16_GEMM");
    const std::string want = env ? env : "";
    if (want == "sgemm") return SbgemmFn{nullptr};
    if (want == "sbgemm" && !openblas_sbgemm())
      fail_input(
          "MHA_BF16_GEMM=sbgemm: the loaded OpenBLAS has no cblas_sbgemm (it was built "
          "without BUILD_BFLOAT16); unset it to use sgemm on bfloat16-rounded operands");
    if (!want.empty() && want != "sgemm" && want != "sbgemm")
      fail_input("MHA_BF16_GEMM: expected 'sgemm' or 'sbgemm', got '" + want + "'");
    return openblas_sbgemm();
  }();
  return chosen;
}

// Copies the (rows x cols, ld) matrix at X to `out` (rows x cols, packed),
// each value rounded to bfloat16: as its bits (sbgemm) or as the float32 it
// is exactly (sgemm).
template <class Out>
void round_matrix(const float* X, std::size_t rows, std::size_t cols, std::size_t ld, Out* out) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* x = X + r * ld;
    Out* o = out + r * cols;
    for (std::size_t c = 0; c < cols; ++c) {
      if constexpr (std::is_same_v<Out, std::uint16_t>)
        o[c] = bfloat16_bits(x[c]);
      else
        o[c] = round_to_bfloat16(x[c]);
    }
  }
}

// C (m x n) = alpha op(A) op(B) + beta C with bfloat16 operands: op(A) and
// op(B) are rounded into per-thread scratch (stored as given, transposed or
// not, with packed leading dimensions), then multiplied by sbgemm or sgemm.
void gemm_bf16(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
               const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta,
               float* C, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  // Stored shapes: A is (m x k), or (k x m) transposed; B is (k x n), or (n x k).
  const std::size_t a_rows = ta ? k : m, a_cols = ta ? m : k;
  const std::size_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  const auto ld = [](std::size_t cols) {
    return static_cast<blasint>(std::max<std::size_t>(1, cols));
  };
  // op(A) and op(B) rounded into per-thread scratch of element type Out.
  auto rounded = [&](auto out_tag) {
    using Out = decltype(out_tag);
    thread_local std::vector<Out> a, b;
    a.resize(a_rows * a_cols);
    b.resize(b_rows * b_cols);
    round_matrix(A, a_rows, a_cols, lda, a.data());
    round_matrix(B, b_rows, b_cols, ldb, b.data());
    return std::pair<const Out*, const Out*>(a.data(), b.data());
  };
  if (SbgemmFn sbgemm = sbgemm_or_null()) {
    const auto [a, b] = rounded(std::uint16_t{});
    sbgemm(CblasRowMajor, op(ta), op(tb), static_cast<int>(m), static_cast<int>(n),
           static_cast<int>(k), alpha, a, ld(a_cols), b, ld(b_cols), beta, C,
           static_cast<int>(ldc));
    return;
  }
  const auto [a, b] = rounded(float{});
  cblas_sgemm(CblasRowMajor, op(ta), op(tb), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, ld(a_cols), b, ld(b_cols), beta, C,
              static_cast<blasint>(ldc));
}

}  // namespace

template <>
void gemm<float>(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta,
                 float* C, std::size_t ldc, bool bf16) {
  if (bf16) return gemm_bf16(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

template <>
void gemm<double>(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, double alpha,
                  const double* A, std::size_t lda, const double* B, std::size_t ldb, double beta,
                  double* C, std::size_t ldc, bool bf16) {
  // Callers check before any parallel region: an exception cannot leave one.
  if (bf16) std::abort();
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

const char* bf16_gemm_backend() {
  return sbgemm_or_null() ? "sbgemm" : "sgemm";
}

void set_sbgemm_for_tests(SbgemmFn fn) {
  g_test_sbgemm.store(fn, std::memory_order_relaxed);
}

void blas_single_threaded() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace mha
