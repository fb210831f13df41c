#include "mha/blas.hpp"

#include <cblas.h>
#include <cpuid.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "mha/error.hpp"
#include "mha/precision.hpp"

#ifndef MHA_OPENBLAS_PATH
#define MHA_OPENBLAS_PATH "libopenblas.so.0"
#endif

namespace mha {
namespace {

// The OpenBLAS entry points the library calls, looked up in the loaded build.
// OpenBLAS is opened with dlopen rather than linked so that its settings
// (OPENBLAS_CORETYPE, OPENBLAS_NUM_THREADS), which its constructor reads once,
// can be chosen before it loads; see blas_load().
using SgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint,
                         float, const float*, blasint, const float*, blasint, float, float*,
                         blasint);
using DgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint,
                         double, const double*, blasint, const double*, blasint, double, double*,
                         blasint);
struct Entry {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  SbgemmFn sbgemm = nullptr;  // absent unless OpenBLAS was built with BUILD_BFLOAT16
};

struct Loaded {
  BlasInfo info;
  Entry entry;
};

// Sets an environment variable for the duration of a scope, then restores
// it (or removes it) so that child processes see the user's environment.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

Loaded load_openblas() {
  Loaded l;
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const std::optional<std::string> chosen = auto_coretype(user, cpu_features());
  if (user && *user) {
    l.info.coretype = user;
    l.info.coretype_source = "user";
  } else if (chosen) {
    l.info.coretype = *chosen;
    l.info.coretype_source = "mha";
  } else {
    l.info.coretype_source = "openblas";
  }
  const char* override_path = std::getenv("MHA_OPENBLAS");
  l.info.library = override_path && *override_path ? override_path : MHA_OPENBLAS_PATH;
  void* handle = nullptr;
  std::string error;
  {
    // Both are read once, by OpenBLAS's constructor during dlopen. One
    // thread: the threaded build then starts no threads of its own, and the
    // kernel calls it from its pool (thread_pool.hpp).
    ScopedEnv one_thread("OPENBLAS_NUM_THREADS", "1");
    std::optional<ScopedEnv> coretype;
    if (l.info.coretype_source == "mha") coretype.emplace("OPENBLAS_CORETYPE", *chosen);
    handle = ::dlopen(l.info.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      error = ::dlerror();
      // A build moved to a machine without the configured file: any OpenBLAS will do.
      handle = ::dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
      if (handle) l.info.library = "libopenblas.so.0";
    }
  }
  if (!handle)
    fail_runtime("cannot load OpenBLAS (" + error +
                 "); expected Debian's libopenblas0-pthread (scripts/setup.sh installs it)");
  auto sym = [&](const char* name) { return ::dlsym(handle, name); };
  l.entry.sgemm = reinterpret_cast<SgemmFn>(sym("cblas_sgemm"));
  l.entry.dgemm = reinterpret_cast<DgemmFn>(sym("cblas_dgemm"));
  l.entry.sbgemm = reinterpret_cast<SbgemmFn>(sym("cblas_sbgemm"));
  if (!l.entry.sgemm || !l.entry.dgemm)
    fail_runtime(l.info.library + ": no cblas_sgemm/cblas_dgemm; expected an OpenBLAS with CBLAS");
  if (auto set_threads = reinterpret_cast<void (*)(int)>(sym("openblas_set_num_threads")))
    set_threads(1);
  if (auto corename = reinterpret_cast<char* (*)()>(sym("openblas_get_corename")))
    l.info.core = corename();
  if (auto config = reinterpret_cast<char* (*)()>(sym("openblas_get_config")))
    l.info.config = config();
  if (auto parallel = reinterpret_cast<int (*)()>(sym("openblas_get_parallel")))
    l.info.threading = parallel() == 0 ? "serial" : parallel() == 1 ? "pthreads" : "openmp";
  return l;
}

const Loaded& loaded() {
  // A function-local static: loaded once, thread-safely; a failure rethrows
  // on every call (the static stays uninitialized).
  static const Loaded l = load_openblas();
  return l;
}

const Entry& entry() {
  return loaded().entry;
}

CBLAS_TRANSPOSE op(bool trans) {
  return trans ? CblasTrans : CblasNoTrans;
}

// cblas_sbgemm's enums are ints in the SysV ABI, so the symbol can be called
// through SbgemmFn.
static_assert(sizeof(blasint) == sizeof(int) && sizeof(CBLAS_TRANSPOSE) == sizeof(int));

// The loaded OpenBLAS's cblas_sbgemm, looked up at run time so that the binary
// links against builds without it; null when absent.
SbgemmFn openblas_sbgemm() {
  return entry().sbgemm;
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
  entry().sgemm(CblasRowMajor, op(ta), op(tb), static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), alpha, a, ld(a_cols), b, ld(b_cols), beta, C,
                static_cast<blasint>(ldc));
}

}  // namespace

template <>
void gemm<float>(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta,
                 float* C, std::size_t ldc, bool bf16) {
  if (bf16) return gemm_bf16(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  entry().sgemm(CblasRowMajor, op(ta), op(tb), static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), alpha, A, static_cast<blasint>(lda), B,
                static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

template <>
void gemm<double>(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, double alpha,
                  const double* A, std::size_t lda, const double* B, std::size_t ldb, double beta,
                  double* C, std::size_t ldc, bool bf16) {
  // Callers check before any parallel region: an exception cannot leave one.
  if (bf16) std::abort();
  entry().dgemm(CblasRowMajor, op(ta), op(tb), static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), alpha, A, static_cast<blasint>(lda), B,
                static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

const char* bf16_gemm_backend() {
  return sbgemm_or_null() ? "sbgemm" : "sgemm";
}

void set_sbgemm_for_tests(SbgemmFn fn) {
  g_test_sbgemm.store(fn, std::memory_order_relaxed);
}

const BlasInfo& blas_load() {
  return loaded().info;
}

nlohmann::json BlasInfo::to_json() const {
  return {{"library", library},     {"core", core},
          {"coretype", coretype},   {"coretype_source", coretype_source},
          {"threading", threading}, {"config", config}};
}

CpuFeatures cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & bit_OSXSAVE;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx512f = b & bit_AVX512F;
  f.avx512cd = b & bit_AVX512CD;
  f.avx512bw = b & bit_AVX512BW;
  f.avx512dq = b & bit_AVX512DQ;
  f.avx512vl = b & bit_AVX512VL;
  if (osxsave) {
    // XCR0: the OS saves SSE (bit 1), AVX (2), opmask (5), ZMM0-15 high (6), ZMM16-31 (7).
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    f.os_avx512 = (lo & 0xE6) == 0xE6;
  }
  return f;
}

std::optional<std::string> auto_coretype(const char* user_coretype, const CpuFeatures& cpu) {
  if (user_coretype && *user_coretype) return std::nullopt;  // the user's choice always wins
  // OpenBLAS's SkylakeX kernels use AVX-512 F, CD, BW, DQ and VL.
  const bool skylakex =
      cpu.avx512f && cpu.avx512cd && cpu.avx512bw && cpu.avx512dq && cpu.avx512vl && cpu.os_avx512;
  if (!skylakex) return std::nullopt;
  return std::string("SkylakeX");
}

}  // namespace mha
