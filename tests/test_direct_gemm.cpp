// The direct GEMM (lib/src/kernel/direct_gemm.hpp), each ISA this CPU has run
// directly: against double loops on shapes that hit every row remainder
// (rows mod 6, and past a block of 192 rows), every column remainder (full
// and partial registers), K = 0
// and 1, strided operands, overwrite and accumulate; nothing written outside
// C's rows and columns; the same bits from AVX2 and AVX-512 and for any
// cutting of the rows or columns; the run-time choice.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../lib/src/kernel/direct_gemm.hpp"
#include "../lib/src/kernel/vexp_impl.hpp"
#include "mha/kernel/blas.hpp"
#include "test_util.hpp"

namespace {

using GemmFn = void (*)(std::size_t, std::size_t, std::size_t, const float*, std::size_t,
                        const float*, std::size_t, float*, std::size_t, bool, const float*);

struct Impl {
  const char* name;
  GemmFn fn;
};

std::vector<Impl> available() {
  std::vector<Impl> impls;
  if (mha::detail::cpu_has_avx2()) impls.push_back({"avx2", mha::detail::direct_gemm_avx2});
  if (mha::detail::cpu_has_avx512()) impls.push_back({"avx512", mha::detail::direct_gemm_avx512});
  return impls;
}

using mha::test::random_floats;

// One problem: A (rows, K; lda), B (K, N; ldb), C (rows, N; ldc), the
// leading dimensions padded so that strides are exercised, and C's padding
// filled with a sentinel the kernel must leave alone.
struct Problem {
  std::size_t rows, N, K, lda, ldb, ldc;
  std::vector<float> A, B, C;
  static constexpr float kSentinel = 12345.0f;
  Problem(std::size_t rows_, std::size_t N_, std::size_t K_, unsigned seed)
      : rows(rows_), N(N_), K(K_), lda(K_ + 3), ldb(N_ + 5), ldc(N_ + 7) {
    A = random_floats(rows * lda + 1, seed);
    B = random_floats(K * ldb + 1, seed + 1);
    C.assign(rows * ldc + 16, kSentinel);
    const std::vector<float> c0 = random_floats(rows * N, seed + 2);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < N; ++c) C[r * ldc + c] = c0[r * N + c];
  }
  // C (+)= A B in double, element (r, c).
  double reference(std::size_t r, std::size_t c, bool accumulate, const std::vector<float>& C0) {
    double sum = accumulate ? C0[r * ldc + c] : 0.0;
    for (std::size_t k = 0; k < K; ++k)
      sum += static_cast<double>(A[r * lda + k]) * static_cast<double>(B[k * ldb + c]);
    return sum;
  }
};

}  // namespace

TEST_CASE("direct_gemm matches double loops on every remainder", "[direct_gemm]") {
  const auto impls = available();
  if (impls.empty()) {
    MHA_SKIP("isa.avx2", "no AVX2 on this CPU: the attention uses OpenBLAS, nothing to check");
  }
  unsigned seed = 1;
  for (const Impl& impl : impls)
    // 7 rows and more: B's slices copied into a panel; 397: over one block of rows (384)
    for (std::size_t rows : {1, 2, 5, 6, 7, 12, 13, 197, 397})
      for (std::size_t N : {1, 7, 8, 15, 16, 17, 33, 64, 65, 100, 130})
        for (std::size_t K : {0, 1, 9, 64, 300})  // 300: over two slices of k (128)
          for (bool accumulate : {false, true}) {
            Problem p(rows, N, K, ++seed);
            const std::vector<float> C0 = p.C;
            impl.fn(rows, N, K, p.A.data(), p.lda, p.B.data(), p.ldb, p.C.data(), p.ldc, accumulate,
                    nullptr);
            INFO(impl.name << " rows " << rows << " N " << N << " K " << K << " accumulate "
                           << accumulate);
            double worst = 0;
            std::size_t untouched = 0, outside = 0;
            for (std::size_t i = 0; i < p.C.size(); ++i) {
              const std::size_t r = i / p.ldc, c = i % p.ldc;
              if (r < rows && c < N) {
                const double ref = p.reference(r, c, accumulate, C0);
                worst = std::max(worst, std::abs(p.C[i] - ref));
                untouched += p.C[i] == Problem::kSentinel;
              } else {
                outside += p.C[i] != Problem::kSentinel;
              }
            }
            // |sum| <= K + 1 terms of magnitude <= 1: float rounding of K + 1 terms.
            CHECK(worst <= 1e-6 * static_cast<double>(K + 2));
            CHECK(untouched == 0);
            CHECK(outside == 0);
          }
}

TEST_CASE("direct_gemm: the same bits from every ISA and every cut", "[direct_gemm]") {
  const auto impls = available();
  if (impls.empty()) {
    MHA_SKIP("isa.avx2", "no AVX2 on this CPU: nothing to check");
  }
  const std::size_t rows = 23, N = 77, K = 150;
  Problem p(rows, N, K, 99);
  std::vector<float> whole = p.C;
  impls.front().fn(rows, N, K, p.A.data(), p.lda, p.B.data(), p.ldb, whole.data(), p.ldc, true,
                   nullptr);
  for (const Impl& impl : impls) {
    INFO(impl.name);
    std::vector<float> again = p.C;
    impl.fn(rows, N, K, p.A.data(), p.lda, p.B.data(), p.ldb, again.data(), p.ldc, true, nullptr);
    CHECK(again == whole);
    // Rows 0-4, 5-22 and columns 0-30, 31-76 as four calls (a piece of 5 rows reads B in
    // place, the others through a panel: the same bits).
    std::vector<float> cut = p.C;
    for (std::size_t r0 : {0, 5})
      for (std::size_t c0 : {0, 31}) {
        const std::size_t r1 = r0 == 0 ? 5 : rows, c1 = c0 == 0 ? 31 : N;
        impl.fn(r1 - r0, c1 - c0, K, p.A.data() + r0 * p.lda, p.lda, p.B.data() + c0, p.ldb,
                cut.data() + r0 * p.ldc + c0, p.ldc, true, nullptr);
      }
    CHECK(cut == whole);
  }
}

TEST_CASE("direct_gemm: a bias gives the bits of the bias copied into C and accumulated",
          "[direct_gemm]") {
  for (const Impl& impl : available()) {
    // K over one slice of k (256), so that later slices continue from C.
    for (const std::size_t K : {0, 9, 300}) {
      CAPTURE(impl.name, K);
      Problem p(13, 70, K, 17);
      const std::vector<float> bias = random_floats(70, 3);
      std::vector<float> copied = p.C, with_bias = p.C;
      for (std::size_t r = 0; r < 13; ++r)
        std::copy(bias.begin(), bias.end(), copied.begin() + r * p.ldc);
      impl.fn(13, 70, K, p.A.data(), p.lda, p.B.data(), p.ldb, copied.data(), p.ldc, true, nullptr);
      // accumulate is ignored with a bias: C's old values do not count.
      impl.fn(13, 70, K, p.A.data(), p.lda, p.B.data(), p.ldb, with_bias.data(), p.ldc, true,
              bias.data());
      CHECK(with_bias == copied);
    }
  }
}

TEST_CASE("direct_gemm_isa and MHA_DIRECT_GEMM select the kernel", "[direct_gemm]") {
  using mha::detail::select_direct_gemm_isa;
  const bool avx2 = mha::detail::cpu_has_avx2(), avx512 = mha::detail::cpu_has_avx512();
  const std::string best = avx512 ? "avx512" : "blas";  // AVX2 only when asked for
  CHECK(std::string(select_direct_gemm_isa(nullptr)) == best);
  CHECK(std::string(select_direct_gemm_isa("bogus")) == best);
  CHECK(std::string(select_direct_gemm_isa("blas")) == "blas");
  CHECK(std::string(select_direct_gemm_isa("avx2")) == (avx2 ? "avx2" : "blas"));
  CHECK(std::string(select_direct_gemm_isa("avx512")) == best);
  const std::string isa = mha::direct_gemm_isa();
  CHECK(isa == select_direct_gemm_isa(std::getenv("MHA_DIRECT_GEMM")));
  // The public entry point runs the chosen kernel, or declines for "blas".
  Problem p(7, 20, 9, 5);
  std::vector<float> C = p.C;
  const bool ran = mha::detail::direct_gemm(7, 20, 9, p.A.data(), p.lda, p.B.data(), p.ldb,
                                            C.data(), p.ldc, false);
  CHECK(ran == (isa != "blas"));
  if (ran) {
    std::vector<float> expected = p.C;
    (isa == "avx512" ? mha::detail::direct_gemm_avx512 : mha::detail::direct_gemm_avx2)(
        7, 20, 9, p.A.data(), p.lda, p.B.data(), p.ldb, expected.data(), p.ldc, false, nullptr);
    CHECK(C == expected);
  } else {
    CHECK(C == p.C);
  }
}
