// The native bfloat16 GEMM (lib/src/kernel/bf16_gemm.hpp), where this CPU has
// AVX512_BF16: against double loops over the bfloat16-rounded operands on
// shapes that hit every row remainder (rows mod 6, past a block of 192 rows),
// every column remainder (full and partial registers), odd and even K (K = 0
// and 1), transposed operands, alpha, overwrite and accumulate; nothing
// written outside C; the same bits for any cutting of rows or columns and
// for A rounded once or per call; the packed layout; subnormals flushed as
// documented; the run-time choice, on CPUs with and without the instruction.
// Where the CPU has AMX tiles, every check runs on both kernels, AMX's and
// VDPBF16PS's (set_bf16_amx_for_tests).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "../lib/src/kernel/bf16_gemm.hpp"
#include "mha/kernel/bfloat16.hpp"
#include "mha/kernel/blas.hpp"
#include "test_util.hpp"

namespace {

using mha::detail::bf16_gemm;
using mha::detail::bf16_gemm_rounded;
using mha::detail::bf16_pack_b;
using mha::detail::bf16_pairs;
using mha::detail::bf16_round_rows;

using mha::test::random_floats;

constexpr float kSentinel = 12345.0f;

// op(A) (rows, K) and op(B) (K, N) stored transposed or not with padded
// leading dimensions; C (rows, N; ldc) with its padding set to a sentinel.
struct Problem {
  std::size_t rows, N, K;
  bool ta, tb;
  std::size_t lda, ldb, ldc;
  std::vector<float> A, B, C0;
  Problem(std::size_t rows_, std::size_t N_, std::size_t K_, bool ta_, bool tb_, unsigned seed)
      : rows(rows_), N(N_), K(K_), ta(ta_), tb(tb_) {
    lda = (ta ? rows : K) + 3;
    ldb = (tb ? K : N) + 5;
    ldc = N + 7;
    A = random_floats((ta ? K : rows) * lda + 1, seed);
    B = random_floats((tb ? N : K) * ldb + 1, seed + 1);
    C0.assign(rows * ldc + 16, kSentinel);
    const auto c = random_floats(rows * N, seed + 2);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < N; ++j) C0[r * ldc + j] = c[r * N + j];
  }
  float a(std::size_t r, std::size_t k) const { return ta ? A[k * lda + r] : A[r * lda + k]; }
  float b(std::size_t k, std::size_t j) const { return tb ? B[j * ldb + k] : B[k * ldb + j]; }
  std::vector<std::uint32_t> packed() const {
    std::vector<std::uint32_t> p(bf16_pairs(K) * N + 1, 0xdeadbeefu);
    bf16_pack_b(tb, K, N, B.data(), ldb, p.data(), N);
    return p;
  }
};

// C = alpha A B (+ C0) over the whole problem, through bf16_gemm.
std::vector<float> run(const Problem& p, float alpha, bool accumulate) {
  std::vector<float> C = p.C0;
  const auto Bp = p.packed();
  bf16_gemm(p.rows, p.N, p.K, alpha, p.ta, p.A.data(), p.lda, Bp.data(), p.N, C.data(), p.ldc,
            accumulate);
  return C;
}

void check_against_double(const Problem& p, float alpha, bool accumulate) {
  const std::vector<float> C = run(p, alpha, accumulate);
  const double u_f = std::ldexp(1.0, -24);
  for (std::size_t r = 0; r < p.rows; ++r) {
    for (std::size_t j = 0; j < p.N; ++j) {
      double rounded = 0, magnitude = 0;
      for (std::size_t k = 0; k < p.K; ++k) {
        const double x = static_cast<double>(mha::round_to_bfloat16(p.a(r, k))) *
                         mha::round_to_bfloat16(p.b(k, j));
        rounded += x;
        magnitude += std::abs(x);
      }
      const double c0 = accumulate ? p.C0[r * p.ldc + j] : 0.0;
      const double want = alpha * rounded + c0;
      // K float32 additions, and per slice of 1024 k the scaling and the add
      // to C, each within u_f.
      const std::size_t ops = p.K + 2 * (p.K / 1024 + 1);
      const double gamma = ops * u_f / (1 - ops * u_f);
      const double bound = gamma * (std::abs(alpha) * magnitude + std::abs(c0));
      const double got = C[r * p.ldc + j];
      INFO("C[" << r << "," << j << "] = " << got << ", want " << want);
      REQUIRE(std::abs(got - want) <= bound);
    }
    for (std::size_t j = p.N; j < p.ldc && r * p.ldc + j < C.size(); ++j)
      REQUIRE(C[r * p.ldc + j] == kSentinel);  // padding untouched
  }
  for (std::size_t i = p.rows * p.ldc; i < C.size(); ++i) REQUIRE(C[i] == kSentinel);
}

// The kernels this CPU can run: VDPBF16PS tiles (0) and, with AMX, AMX's (1).
std::vector<int> kernels() {
  std::vector<int> k = {0};
  if (mha::detail::cpu_has_amx_bf16()) k.push_back(1);
  return k;
}

// Runs bf16_gemm_rounded on kernel `amx` while it lives.
struct UseKernel {
  explicit UseKernel(int amx) { mha::detail::set_bf16_amx_for_tests(amx); }
  ~UseKernel() { mha::detail::set_bf16_amx_for_tests(-1); }
};

}  // namespace

TEST_CASE("bf16_gemm matches double loops over rounded operands", "[bf16_gemm]") {
  if (!mha::detail::cpu_has_avx512_bf16()) {
    // Nothing native to test: the process must not pick it (next test case).
    CHECK(std::string(mha::bf16_gemm_backend()) != "avx512bf16");
    MHA_SKIP("isa.avx512_bf16", "the CPU has no AVX512_BF16: the native bfloat16 GEMM cannot run");
  }
  unsigned seed = 1;
  for (const int amx : kernels())
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const std::size_t rows : {1, 5, 6, 7, 12, 13, 33, 197})
          for (const std::size_t N : {1, 15, 16, 17, 48, 63, 64, 65, 130})
            for (const std::size_t K : {0, 1, 2, 3, 31, 64, 65, 1025, 2113}) {
              // The long ones (past a block of rows; over several slices of k) on a
              // few shapes.
              const bool long_rows = rows == 197, deep = K > 1024;
              if ((long_rows || deep) && !(N % 16 == 1 && (deep ? rows == 7 : K == 65))) continue;
              const UseKernel use(amx);
              CAPTURE(amx, ta, tb, rows, N, K);
              const Problem p(rows, N, K, ta, tb, seed++);
              check_against_double(p, 1.0f, false);
              check_against_double(p, 0.125f, true);
            }
}

TEST_CASE("bf16_gemm: the same bits for every cut and for A rounded once", "[bf16_gemm]") {
  if (!mha::detail::cpu_has_avx512_bf16())
    MHA_SKIP("isa.avx512_bf16", "the CPU has no AVX512_BF16");
  for (const int amx : kernels()) {
    const UseKernel use(amx);
    CAPTURE(amx);
    const Problem p(45, 150, 77, false, false, 7);
    const std::vector<float> whole = run(p, 0.5f, true);
    const auto Bp = p.packed();
    const std::size_t P = bf16_pairs(p.K);
    std::vector<std::uint32_t> Ap(p.rows * P);
    bf16_round_rows(p.rows, p.K, p.A.data(), p.lda, Ap.data(), P);
    for (const std::size_t cut_r : {1, 6, 17, 44})
      for (const std::size_t cut_c : {1, 16, 33, 64, 149}) {
        CAPTURE(cut_r, cut_c);
        std::vector<float> C = p.C0, D = p.C0;
        for (const auto& [r0, r1] :
             {std::pair<std::size_t, std::size_t>{0, cut_r}, {cut_r, p.rows}})
          for (const auto& [c0, c1] :
               {std::pair<std::size_t, std::size_t>{0, cut_c}, {cut_c, p.N}}) {
            bf16_gemm(r1 - r0, c1 - c0, p.K, 0.5f, false, p.A.data() + r0 * p.lda, p.lda,
                      Bp.data() + c0, p.N, C.data() + r0 * p.ldc + c0, p.ldc, true);
            bf16_gemm_rounded(r1 - r0, c1 - c0, p.K, 0.5f, Ap.data() + r0 * P, P, Bp.data() + c0,
                              p.N, D.data() + r0 * p.ldc + c0, p.ldc, true);
          }
        REQUIRE(C == whole);
        REQUIRE(D == whole);
      }
  }
}

TEST_CASE("bf16_pack_b: pairs of k, low half first, zero past K", "[bf16_gemm]") {
  if (!mha::detail::cpu_has_avx512_bf16())
    MHA_SKIP("isa.avx512_bf16", "the CPU has no AVX512_BF16");
  for (const bool tb : {false, true}) {
    const Problem p(1, 19, 5, false, tb, 11);
    const auto packed = p.packed();
    for (std::size_t q = 0; q < bf16_pairs(p.K); ++q)
      for (std::size_t j = 0; j < p.N; ++j) {
        const std::uint32_t w = packed[q * p.N + j];
        CHECK((w & 0xffffu) == mha::bfloat16_bits(p.b(2 * q, j)));
        CHECK((w >> 16) == (2 * q + 1 < p.K ? mha::bfloat16_bits(p.b(2 * q + 1, j)) : 0u));
      }
    CHECK(packed[bf16_pairs(p.K) * p.N] == 0xdeadbeefu);  // nothing past the packed pairs
  }
}

TEST_CASE("bf16_pack_b: B^T packs as B, for every remainder of 16 rows and pairs", "[bf16_gemm]") {
  if (!mha::detail::cpu_has_avx512_bf16())
    MHA_SKIP("isa.avx512_bf16", "the CPU has no AVX512_BF16");
  for (const auto& [K, N] : {std::pair<std::size_t, std::size_t>{1, 1},
                             {2, 16},
                             {31, 17},
                             {32, 33},
                             {65, 40},
                             {200, 64},
                             {771, 50}}) {
    CAPTURE(K, N);
    const auto B = random_floats(K * N, static_cast<unsigned>(K * 1000 + N));
    std::vector<float> Bt(N * (K + 3));  // B^T (N, K; ld K + 3)
    for (std::size_t k = 0; k < K; ++k)
      for (std::size_t j = 0; j < N; ++j) Bt[j * (K + 3) + k] = B[k * N + j];
    const std::size_t ld = N + 5, words = bf16_pairs(K) * ld;
    std::vector<std::uint32_t> a(words, 0xdeadbeefu), b(words, 0xdeadbeefu);
    bf16_pack_b(false, K, N, B.data(), N, a.data(), ld);
    bf16_pack_b(true, K, N, Bt.data(), K + 3, b.data(), ld);
    CHECK(a == b);  // the padding past N untouched in both
  }
}

TEST_CASE("bf16_pack_b_bits: bfloat16 bits pack as their float32 values", "[bf16_gemm]") {
  if (!mha::detail::cpu_has_avx512_bf16())
    MHA_SKIP("isa.avx512_bf16", "the CPU has no AVX512_BF16");
  // Every bit pattern's class: zeros, subnormals, normals, infinities, NaNs.
  const std::uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x0080, 0x3f80, 0xbf80,
                                   0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff, 0x0040};
  for (const auto& [K, N] : {std::pair<std::size_t, std::size_t>{1, 1},
                             {3, 17},
                             {31, 16},
                             {32, 33},
                             {65, 40},
                             {200, 64}}) {
    for (const bool trans : {false, true}) {
      CAPTURE(K, N, trans);
      const std::size_t rows = trans ? N : K, cols = trans ? K : N, ld = cols + 3;
      std::vector<std::uint16_t> bits(rows * ld);
      std::mt19937 rng(static_cast<unsigned>(K * 7 + N));
      for (std::size_t i = 0; i < bits.size(); ++i)
        bits[i] =
            i % 5 == 0 ? special[rng() % std::size(special)] : static_cast<std::uint16_t>(rng());
      std::vector<float> values(bits.size());
      for (std::size_t i = 0; i < bits.size(); ++i) {
        const std::uint32_t b = std::uint32_t{bits[i]} << 16;
        std::memcpy(&values[i], &b, 4);
      }
      const std::size_t ldp = N + 5, words = bf16_pairs(K) * ldp;
      std::vector<std::uint32_t> want(words, 0xdeadbeefu), got(words, 0xdeadbeefu);
      bf16_pack_b(trans, K, N, values.data(), ld, want.data(), ldp);
      mha::detail::bf16_pack_b_bits(trans, K, N, bits.data(), ld, got.data(), ldp);
      CHECK(got == want);
    }
  }
}

TEST_CASE("bf16_gemm flushes subnormal operands to zero", "[bf16_gemm]") {
  if (!mha::detail::cpu_has_avx512_bf16())
    MHA_SKIP("isa.avx512_bf16", "the CPU has no AVX512_BF16");
  // 1e-39 is a float32 (and bfloat16) subnormal: VDPBF16PS reads it as 0,
  // where the rounded-operand sgemm path gives 1e-39 * 1e30 = 1e-9.
  const float a[2] = {1e-39f, 2.0f}, b[2] = {1e30f, 3.0f};
  std::uint32_t packed[1];
  bf16_pack_b(false, 2, 1, b, 1, packed, 1);
  for (const int amx : kernels()) {
    const UseKernel use(amx);
    float c = -1;
    bf16_gemm(1, 1, 2, 1.0f, false, a, 2, packed, 1, &c, 1, false);
    CHECK(c == mha::round_to_bfloat16(2.0f) * mha::round_to_bfloat16(3.0f));
  }
}

TEST_CASE("MHA_BF16_GEMM and the CPU choose the bfloat16 backend", "[bf16_gemm]") {
  const std::string backend = mha::bf16_gemm_backend();
  const char* env = std::getenv("MHA_BF16_GEMM");
  const std::string want = env ? env : "";
  if (!want.empty())
    CHECK(backend == want);
  else if (mha::detail::cpu_has_amx_bf16())
    CHECK(backend == "amx");
  else if (mha::detail::cpu_has_avx512_bf16())
    CHECK(backend == "avx512bf16");
  else
    CHECK((backend == "sbgemm" || backend == "sgemm"));
  CHECK(mha::detail::bf16_native() == (backend == "amx" || backend == "avx512bf16"));
  CHECK(mha::detail::bf16_amx() == (backend == "amx"));
}

TEST_CASE("bf16_gemm: a bias gives the bits of the bias copied into C and accumulated",
          "[bf16_gemm]") {
  if (!mha::detail::cpu_has_avx512_bf16())
    MHA_SKIP("isa.avx512_bf16", "the CPU has no AVX512_BF16");
  for (const int amx : kernels())
    for (const std::size_t K : {0, 9, 2113}) {  // 2113: several slices of k
      const UseKernel use(amx);
      CAPTURE(amx, K);
      const Problem p(13, 70, K, false, false, 23);
      const auto Bp = p.packed();
      const std::vector<float> bias = random_floats(p.N, 4);
      std::vector<float> copied = p.C0, with_bias = p.C0;
      for (std::size_t r = 0; r < p.rows; ++r)
        std::copy(bias.begin(), bias.end(), copied.begin() + r * p.ldc);
      bf16_gemm(p.rows, p.N, K, 1.0f, false, p.A.data(), p.lda, Bp.data(), p.N, copied.data(),
                p.ldc, true);
      bf16_gemm(p.rows, p.N, K, 1.0f, false, p.A.data(), p.lda, Bp.data(), p.N, with_bias.data(),
                p.ldc, true, bias.data());  // accumulate is ignored with a bias
      CHECK(with_bias == copied);
    }
}
