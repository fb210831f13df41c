#include "mha/kernel/blas.hpp"

#include <cblas.h>
#include <cpuid.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bf16_gemm.hpp"
#include "mha/base/error.hpp"
#include "mha/kernel/bfloat16.hpp"

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

// Loads OpenBLAS in two halves: start() decides its settings in the calling
// thread and dlopens it on a background thread, so the 2 ms that loading and
// relocating it takes overlap the run's own start (config, inputs); get()
// waits for it, restores the environment and looks up the entry points.
class Loader {
 public:
  // A process that fails before it computes still has the opener running.
  ~Loader() {
    if (opener_.joinable()) opener_.join();
  }

  void start() {
    std::lock_guard<std::mutex> lock(mutex_);
    start_locked();
  }

  const Loaded& get() {
    if (const Loaded* l = ready_.load(std::memory_order_acquire)) return *l;
    std::lock_guard<std::mutex> lock(mutex_);
    start_locked();
    if (!finished_) finish();
    if (failure_) std::rethrow_exception(failure_);
    return loaded_;
  }

 private:
  void start_locked() {
    if (started_) return;
    started_ = true;
    BlasInfo& info = loaded_.info;
    const char* user = std::getenv("OPENBLAS_CORETYPE");
    const std::optional<std::string> chosen = auto_coretype(user, cpu_features());
    if (user && *user) {
      info.coretype = user;
      info.coretype_source = "user";
    } else if (chosen) {
      info.coretype = *chosen;
      info.coretype_source = "mha";
    } else {
      info.coretype_source = "openblas";
    }
    const char* override_path = std::getenv("MHA_OPENBLAS");
    info.library = override_path && *override_path ? override_path : MHA_OPENBLAS_PATH;
    // Both are read once, by OpenBLAS's constructor during dlopen; set here,
    // in the calling thread, and restored in finish(). One thread: the
    // threaded build then starts no threads of its own, and the kernel calls
    // it from its pool (thread_pool.hpp).
    one_thread_.emplace("OPENBLAS_NUM_THREADS", "1");
    if (info.coretype_source == "mha") coretype_.emplace("OPENBLAS_CORETYPE", *chosen);
    opener_ = std::thread([this, path = info.library] {
      handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle_) {
        const char* e = ::dlerror();
        error_ = e ? e : path + ": cannot be loaded";
        // A build moved to a machine without the configured file: any OpenBLAS will do.
        handle_ = ::dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        fallback_ = handle_ != nullptr;
      }
    });
  }

  void finish() {
    finished_ = true;
    opener_.join();
    one_thread_.reset();
    coretype_.reset();
    try {
      resolve();
      ready_.store(&loaded_, std::memory_order_release);
    } catch (...) {
      failure_ = std::current_exception();
    }
  }

  void resolve() {
    BlasInfo& info = loaded_.info;
    Entry& entry = loaded_.entry;
    if (!handle_)
      fail_runtime("cannot load OpenBLAS (" + error_ +
                   "); expected Debian's libopenblas0-pthread (scripts/setup.sh installs it)");
    if (fallback_) info.library = "libopenblas.so.0";
    auto sym = [&](const char* name) { return ::dlsym(handle_, name); };
    entry.sgemm = reinterpret_cast<SgemmFn>(sym("cblas_sgemm"));
    entry.dgemm = reinterpret_cast<DgemmFn>(sym("cblas_dgemm"));
    entry.sbgemm = reinterpret_cast<SbgemmFn>(sym("cblas_sbgemm"));
    if (!entry.sgemm || !entry.dgemm)
      fail_runtime(info.library + ": no cblas_sgemm/cblas_dgemm; expected an OpenBLAS with CBLAS");
    if (auto set_threads = reinterpret_cast<void (*)(int)>(sym("openblas_set_num_threads")))
      set_threads(1);
    if (auto corename = reinterpret_cast<char* (*)()>(sym("openblas_get_corename")))
      info.core = corename();
    if (auto config = reinterpret_cast<char* (*)()>(sym("openblas_get_config")))
      info.config = config();
    if (auto parallel = reinterpret_cast<int (*)()>(sym("openblas_get_parallel")))
      info.threading = parallel() == 0 ? "serial" : parallel() == 1 ? "pthreads" : "openmp";
  }

  std::mutex mutex_;
  bool started_ = false, finished_ = false;
  std::optional<ScopedEnv> one_thread_, coretype_;
  std::thread opener_;
  void* handle_ = nullptr;
  bool fallback_ = false;
  std::string error_;
  Loaded loaded_;
  std::exception_ptr failure_;
  std::atomic<const Loaded*> ready_{nullptr};
};

Loader& loader() {
  static Loader l;
  return l;
}

const Loaded& loaded() {
  return loader().get();
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

enum class Bf16Backend { amx, native, sbgemm, sgemm };

// The routine bf16 GEMMs use: the native kernel (bf16_gemm.hpp) where the CPU
// has AVX512_BF16, else sbgemm when OpenBLAS has it, else sgemm on rounded
// operands; MHA_BF16_GEMM picks one. A test's sbgemm (set_sbgemm_for_tests)
// overrides all of them.
Bf16Backend bf16_backend() {
  if (g_test_sbgemm.load(std::memory_order_relaxed)) return Bf16Backend::sbgemm;
  static const Bf16Backend chosen = [] {
    const char* env = std::getenv("MHA_BF16_GEMM");
    const std::string want = env ? env : "";
    const bool native = detail::cpu_has_avx512_bf16();
    if (want == "sgemm") return Bf16Backend::sgemm;
    if (want == "sbgemm") {
      if (!openblas_sbgemm())
        fail_input(
            "MHA_BF16_GEMM=sbgemm: the loaded OpenBLAS has no cblas_sbgemm (it was built "
            "without BUILD_BFLOAT16); unset it, or use avx512bf16 or sgemm");
      return Bf16Backend::sbgemm;
    }
    if (want == "avx512bf16") {
      if (!native)
        fail_input("MHA_BF16_GEMM=avx512bf16: this CPU has no AVX512_BF16; unset it, or use sgemm");
      return Bf16Backend::native;
    }
    if (want == "amx") {
      if (!detail::cpu_has_amx_bf16())
        fail_input(
            "MHA_BF16_GEMM=amx: this CPU (or this OS for this process) has no AMX-BF16 tiles; "
            "unset it, or use avx512bf16 or sgemm");
      return Bf16Backend::amx;
    }
    if (!want.empty())
      fail_input("MHA_BF16_GEMM: expected 'amx', 'avx512bf16', 'sbgemm' or 'sgemm', got '" + want +
                 "'");
    if (detail::cpu_has_amx_bf16()) return Bf16Backend::amx;
    if (native) return Bf16Backend::native;
    return openblas_sbgemm() ? Bf16Backend::sbgemm : Bf16Backend::sgemm;
  }();
  return chosen;
}

SbgemmFn sbgemm_fn() {
  if (SbgemmFn fn = g_test_sbgemm.load(std::memory_order_relaxed)) return fn;
  return openblas_sbgemm();
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
  const Bf16Backend backend = bf16_backend();
  if (backend == Bf16Backend::native || backend == Bf16Backend::amx) {
    // op(B) packed once into per-thread pairs, op(A) rounded as it goes.
    thread_local std::vector<std::uint32_t> packed;
    packed.resize(detail::bf16_pairs(k) * n);
    detail::bf16_pack_b(tb, k, n, B, ldb, packed.data(), n);
    if (beta != 0 && beta != 1)
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) C[i * ldc + j] *= beta;
    detail::bf16_gemm(m, n, k, alpha, ta, A, lda, packed.data(), n, C, ldc, beta != 0);
    return;
  }
  if (backend == Bf16Backend::sbgemm) {
    const SbgemmFn sbgemm = sbgemm_fn();
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
  switch (bf16_backend()) {
    case Bf16Backend::amx:
      return "amx";
    case Bf16Backend::native:
      return "avx512bf16";
    case Bf16Backend::sbgemm:
      return "sbgemm";
    default:
      return "sgemm";
  }
}

namespace detail {
bool bf16_native() {
  const Bf16Backend b = bf16_backend();
  return b == Bf16Backend::native || b == Bf16Backend::amx;
}
bool bf16_amx_chosen() {
  return bf16_backend() == Bf16Backend::amx;
}
}  // namespace detail

void set_sbgemm_for_tests(SbgemmFn fn) {
  g_test_sbgemm.store(fn, std::memory_order_relaxed);
}

const BlasInfo& blas_load() {
  return loaded().info;
}

void blas_preload() {
  loader().start();
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
