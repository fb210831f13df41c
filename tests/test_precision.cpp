// Reduced precisions: float16 conversion (every bit pattern, ties, overflow,
// subnormals, NaN; against NumPy's astype), bfloat16 rounding, the bfloat16
// GEMM against a double reference within its error bound, the bfloat16 layer
// against the float32 one, and output_dtype through mha::run end to end.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <vector>

#include "mha/config/precision.hpp"
#include "mha/config/rng.hpp"
#include "mha/config/weights.hpp"
#include "mha/io/npy.hpp"
#include "mha/kernel/attention.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/run/run.hpp"
#include "test_util.hpp"

using mha::float16;
using mha::to_double;
using mha::to_float16;
using mha::test::TempDir;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::uint16_t f16(double x) {
  return to_float16(x).bits;
}

bool is_f16_nan(std::uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// An independent bfloat16 rounding: 8 significant bits by nearbyint (the
// FPU's default mode, ties to even) on the scaled value; subnormals (below
// 2^-126) are multiples of 2^-133.
double bf16_by_scaling(float x) {
  if (!std::isfinite(x)) return x;
  const double a = x;
  if (std::abs(a) < std::ldexp(1.0, -126))
    return std::ldexp(std::nearbyint(std::ldexp(a, 133)), -133);
  int e;
  const double m = std::frexp(a, &e);  // |m| in [0.5, 1)
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

std::vector<float> uniform(std::size_t n, const char* name, float lo = -1, float hi = 1) {
  std::vector<float> v(n);
  mha::RandomStream(11, name).fill_uniform<float>(v.data(), n, lo, hi);
  return v;
}

std::string crc32_hex(const std::string& bytes) {
  const unsigned long crc =
      ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
              static_cast<uInt>(bytes.size()));
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", crc & 0xffffffffUL);
  return hex;
}

}  // namespace

TEST_CASE("every float16 value round-trips exactly", "[precision]") {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const double x = to_double(float16{static_cast<std::uint16_t>(h)});
    INFO("bits " << h);
    if (is_f16_nan(static_cast<std::uint16_t>(h))) {
      REQUIRE(std::isnan(x));
      REQUIRE(is_f16_nan(f16(x)));
      REQUIRE((f16(x) & 0x8000u) == (h & 0x8000u));  // the sign survives
      continue;
    }
    REQUIRE(f16(x) == h);
    REQUIRE(f16(static_cast<float>(x)) == h);  // every float16 is a float
  }
}

TEST_CASE("float16 rounding: ties to even, overflow, subnormals, NaN", "[precision]") {
  // Normal range: 1 + 2^-10 is the next float16 after 1.
  CHECK(f16(1.0) == 0x3c00u);
  CHECK(f16(1 + std::ldexp(1.0, -11)) == 0x3c00u);      // tie: to even (1)
  CHECK(f16(1 + 3 * std::ldexp(1.0, -11)) == 0x3c02u);  // tie: to even (1 + 2^-9)
  CHECK(f16(1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3c01u);  // above the tie
  // One rounding from double: via float the 2^-40 above would be lost (a tie, then 1).
  CHECK(f16(static_cast<float>(1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40))) == 0x3c00u);
  CHECK(f16(0.1) == 0x2e66u);
  CHECK(f16(-2.5) == 0xc100u);
  // Overflow: 65504 is the largest; from 65520 (halfway to 2^16) it is inf.
  CHECK(f16(65504.0) == 0x7bffu);
  CHECK(f16(65519.99) == 0x7bffu);
  CHECK(f16(65520.0) == 0x7c00u);
  CHECK(f16(-65520.0) == 0xfc00u);
  CHECK(f16(1e10) == 0x7c00u);
  CHECK(f16(1e300) == 0x7c00u);
  CHECK(f16(kInf) == 0x7c00u);
  CHECK(f16(-kInf) == 0xfc00u);
  // Subnormals are multiples of 2^-24; the smallest normal is 2^-14.
  CHECK(f16(std::ldexp(1.0, -24)) == 0x0001u);
  CHECK(f16(std::ldexp(1.0, -25)) == 0x0000u);      // tie: to even (0)
  CHECK(f16(3 * std::ldexp(1.0, -25)) == 0x0002u);  // tie: to even (2)
  CHECK(f16(std::ldexp(1.0, -25) * 1.0000001) == 0x0001u);
  CHECK(f16(std::ldexp(1.0, -14) - std::ldexp(1.0, -25)) == 0x0400u);  // tie: up to the normal
  CHECK(f16(std::ldexp(1.0, -14) - std::ldexp(1.0, -24)) == 0x03ffu);
  CHECK(f16(std::ldexp(1.0, -14)) == 0x0400u);
  CHECK(f16(-std::ldexp(1.0, -24)) == 0x8001u);
  CHECK(f16(1e-30) == 0x0000u);
  CHECK(f16(-1e-30) == 0x8000u);
  CHECK(f16(-0.0) == 0x8000u);
  CHECK(f16(std::numeric_limits<double>::denorm_min()) == 0x0000u);
  // NaN stays NaN, as NumPy keeps it: the payload's top bits, never inf.
  CHECK(is_f16_nan(f16(std::nan(""))));
  CHECK(f16(std::numeric_limits<float>::quiet_NaN()) == 0x7e00u);
  CHECK(is_f16_nan(f16(std::numeric_limits<double>::signaling_NaN())));
  CHECK(std::isnan(to_double(float16{0x7c01u})));
  CHECK(to_double(float16{0x7bffu}) == 65504.0);
  CHECK(to_double(float16{0x0001u}) == std::ldexp(1.0, -24));
  CHECK(to_double(float16{0xfc00u}) == -kInf);
}

TEST_CASE("float16 conversion matches NumPy's astype", "[precision][numpy]") {
  if (!mha::test::have_numpy()) {
    MHA_SKIP("numpy",
             "/usr/bin/python3 with numpy not found (scripts/setup.sh --test installs it)");
  }
  // Values of every magnitude float16 cares about: random significands at
  // exponents from below the subnormals to beyond the range, exact ties, and
  // the boundaries; as float32 and as float64 (whose extra bits matter).
  std::mt19937_64 rng(7);
  std::vector<double> d;
  for (int e = -27; e <= 17; ++e)
    for (int i = 0; i < 2000; ++i) {
      const double m = std::uniform_real_distribution<double>(1.0, 2.0)(rng);
      d.push_back((i % 2 ? -1 : 1) * std::ldexp(m, e));
    }
  for (std::uint32_t h = 0; h < 0x7c00u; h += 7) {  // halfway between neighbours: ties
    const double a = to_double(float16{static_cast<std::uint16_t>(h)});
    const double b = to_double(float16{static_cast<std::uint16_t>(h + 1)});
    d.push_back((a + b) / 2);
    d.push_back(-(a + b) / 2);
  }
  for (double x : {0.0, -0.0, 65504.0, 65519.0, 65520.0, 65536.0, 1e-8, 6e-8, kInf, -kInf, 1e38})
    d.push_back(x);
  std::vector<float> f(d.begin(), d.end());
  TempDir tmp("precision");
  tmp.write("f4.npy", mha::encode_npy(mha::NpyArray::of(f.data(), {f.size()})));
  tmp.write("f8.npy", mha::encode_npy(mha::NpyArray::of(d.data(), {d.size()})));
  const std::string script = tmp.write("cast.py", R"(
import sys, numpy as np
d = sys.argv[1]
with np.errstate(over='ignore'):
    for name in ('f4', 'f8'):
        np.save(d + '/' + name + '_as_f2.npy', np.load(d + '/' + name + '.npy').astype(np.float16))
np.save(d + '/all_f2.npy', np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
        .astype(np.float64))
)");
  REQUIRE(mha::test::run_python(script, tmp.path.string()) == 0);

  for (const char* name : {"f4", "f8"}) {
    const mha::NpyArray a = mha::read_npy(tmp / (std::string(name) + "_as_f2.npy"));
    REQUIRE(a.dtype == mha::DType::f2);
    const auto numpy = mha::test::values_of<std::uint16_t>(a);
    REQUIRE(numpy.size() == d.size());
    for (std::size_t i = 0; i < d.size(); ++i) {
      const double x = name[1] == '4' ? static_cast<double>(f[i]) : d[i];
      INFO(name << " value " << x << " NumPy " << numpy[i] << " ours " << f16(x));
      REQUIRE(f16(x) == numpy[i]);
    }
  }
  const auto all = mha::test::values_of<double>(mha::read_npy(tmp / "all_f2.npy"));
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const double ours = to_double(float16{static_cast<std::uint16_t>(h)});
    INFO("bits " << h);
    REQUIRE((std::isnan(ours) ? std::isnan(all[h]) : ours == all[h]));
  }
}

TEST_CASE("bfloat16 rounding", "[precision]") {
  // 1 + 2^-7 is the next bfloat16 after 1.
  CHECK(mha::round_to_bfloat16(1 + std::ldexp(1.f, -8)) == 1.f);  // tie: to even
  CHECK(mha::round_to_bfloat16(1 + 3 * std::ldexp(1.f, -8)) == 1 + std::ldexp(1.f, -6));
  CHECK(mha::round_to_bfloat16(1 + std::ldexp(1.f, -8) + std::ldexp(1.f, -20)) ==
        1 + std::ldexp(1.f, -7));
  CHECK(mha::bfloat16_bits(1.f) == 0x3f80u);
  CHECK(mha::bfloat16_bits(-2.f) == 0xc000u);
  CHECK(mha::bfloat16_bits(std::numeric_limits<float>::max()) == 0x7f80u);  // rounds to inf
  CHECK(mha::bfloat16_bits(3.3895314e38f) == 0x7f7fu);                      // the largest bfloat16
  CHECK(mha::bfloat16_bits(std::numeric_limits<float>::infinity()) == 0x7f80u);
  CHECK(mha::bfloat16_bits(-std::numeric_limits<float>::infinity()) == 0xff80u);
  CHECK(std::isnan(mha::round_to_bfloat16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload sits in the dropped bits must not become inf.
  float snan;
  const std::uint32_t snan_bits = 0x7f800001u;
  std::memcpy(&snan, &snan_bits, 4);
  CHECK(std::isnan(mha::round_to_bfloat16(snan)));
  CHECK(mha::bfloat16_bits(-0.f) == 0x8000u);
  CHECK(mha::bfloat16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000u);  // tie: 0

  // Against rounding by scaling, over random values of every exponent.
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t u = rng();
    float x;
    std::memcpy(&x, &u, 4);
    if (std::isnan(x)) continue;
    const double want = bf16_by_scaling(x);
    const float got = mha::round_to_bfloat16(x);
    INFO("bits " << u << " value " << x);
    if (std::abs(want) >= 3.3961732e38) {  // past bfloat16's range: inf
      REQUIRE(std::isinf(got));
    } else {
      REQUIRE(static_cast<double>(got) == want);
      REQUIRE((bits_of(got) & 0xffffu) == 0u);
    }
  }
}

namespace {

// A plain row-major sbgemm with CBLAS's contract, to check what the "sbgemm"
// backend hands it: products of bfloat16 values summed in float32.
void naive_sbgemm(int, int ta, int tb, int m, int n, int k, float alpha, const std::uint16_t* A,
                  int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  auto value = [](std::uint16_t b) {
    const std::uint32_t u = std::uint32_t{b} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float sum = 0;
      for (int l = 0; l < k; ++l)
        sum += value(ta == 112 ? A[l * lda + i] : A[i * lda + l]) *
               value(tb == 112 ? B[j * ldb + l] : B[l * ldb + j]);
      C[i * ldc + j] = alpha * sum + (beta == 0 ? 0.f : beta * C[i * ldc + j]);
    }
}

// gemm(..., bf16 = true) on random operands of every transpose, with leading
// dimensions wider than the matrices, against double references: the exact
// product of the bfloat16-rounded operands (only float32 summation error may
// remain) and of the original operands (bfloat16's error bound).
void check_bf16_gemm() {
  const double u_f = std::ldexp(1.0, -24);  // float32 unit roundoff
  // bfloat16's: 8 significant bits, so a rounding is within half a step of
  // 2^-7 (at 1): 2^-8 relative, not 2^-9.
  const double u_b = std::ldexp(1.0, -8);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const auto& [m, n, k] : {std::array<std::size_t, 3>{1, 1, 1},
                                    {7, 5, 3},
                                    {33, 17, 64},
                                    {64, 130, 257},
                                    {5, 9, 0}}) {
        CAPTURE(ta, tb, m, n, k);
        const std::size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
        const auto A = uniform((ta ? k : m) * lda, "A"), B = uniform((tb ? n : k) * ldb, "B");
        const auto C0 = uniform(m * ldc, "C");
        const float alpha = 0.75f, beta = 0.5f;
        std::vector<float> C = C0;
        mha::gemm<float>(ta, tb, m, n, k, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc,
                         true);
        double max_err = 0, max_scale = 0;
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < n; ++j) {
            double exact = 0, rounded = 0, magnitude = 0;
            for (std::size_t l = 0; l < k; ++l) {
              const float a = ta ? A[l * lda + i] : A[i * lda + l];
              const float b = tb ? B[j * ldb + l] : B[l * ldb + j];
              exact += static_cast<double>(a) * b;
              rounded += static_cast<double>(mha::round_to_bfloat16(a)) * mha::round_to_bfloat16(b);
              magnitude += std::abs(static_cast<double>(a) * b);
            }
            const double c0 = beta * static_cast<double>(C0[i * ldc + j]);
            const double got = C[i * ldc + j];
            // float32: k sums, alpha, beta and the final add, each within u_f.
            const double gamma = (k + 3) * u_f / (1 - (k + 3) * u_f);
            const double sum_err =
                std::abs(alpha) * magnitude * (1 + 2 * u_b) * gamma + std::abs(c0) * gamma;
            INFO("C[" << i << "," << j << "] = " << got);
            REQUIRE(std::abs(got - (alpha * rounded + c0)) <= sum_err);
            // Each operand within u_b relative: a product within 2u_b + u_b^2.
            const double bound = std::abs(alpha) * magnitude * (2 * u_b + u_b * u_b) + sum_err;
            REQUIRE(std::abs(got - (alpha * exact + c0)) <= bound);
            max_err = std::max(max_err, std::abs(got - (alpha * exact + c0)));
            max_scale = std::max(max_scale, std::abs(alpha) * magnitude);
          }
        // The operands really were rounded: the error is bfloat16's, not float32's.
        if (k >= 3) CHECK(max_err > 1e-2 * u_b * max_scale);
        for (std::size_t i = 0; i < m; ++i)  // columns past n untouched
          REQUIRE(C[i * ldc + n] == C0[i * ldc + n]);
      }
}

}  // namespace

TEST_CASE("bfloat16 GEMM against a double reference", "[precision][blas]") {
  INFO("backend " << mha::bf16_gemm_backend());
  check_bf16_gemm();
  // The sbgemm path's packing and arguments, through a plain sbgemm (Debian
  // 12's OpenBLAS has none to call).
  mha::set_sbgemm_for_tests(naive_sbgemm);
  CHECK(std::string(mha::bf16_gemm_backend()) == "sbgemm");
  check_bf16_gemm();
  mha::set_sbgemm_for_tests(nullptr);
}

namespace {

struct Errors {
  double max_rel = 0, rms_rel = 0;  // max |x - ref| / max |ref|, ||x - ref|| / ||ref||
};

Errors errors(const std::vector<float>& x, const std::vector<float>& ref) {
  REQUIRE(x.size() == ref.size());
  double max_err = 0, max_ref = 0, err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = std::abs(static_cast<double>(x[i]) - ref[i]);
    max_err = std::max(max_err, e);
    max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
    err2 += e * e;
    ref2 += static_cast<double>(ref[i]) * ref[i];
  }
  return {max_err / max_ref, std::sqrt(err2 / ref2)};
}

}  // namespace

// Tolerance: four chained GEMMs (projection, Q K^T, A V, output projection),
// each of whose operands is rounded to bfloat16, within 2^-8 relative (about
// 2^-8 / sqrt(3) RMS: rounding errors spread evenly over half a step). Their
// relative errors add up through the chain, so the bfloat16 layer is held to
// 4 * 2^-8 = 1.6% RMS and 8 * 2^-8 = 3.1% at worst (relative to the largest
// value) against float32. docs/benchmarks.md ("Precision") measures about
// 0.5% RMS on realistic shapes.
TEST_CASE("the bfloat16 layer against the float32 layer", "[precision][attention]") {
  mha::Dims d;
  d.B = 2, d.T = 70, d.S = 90, d.h = 4, d.d_k = 12, d.d_v = 10;
  d.d_model = 48, d.kdim = 40, d.vdim = 36, d.d_out = 32;
  d.key_is_query = d.value_is_key = false;
  const auto X_q = uniform(d.B * d.T * d.d_model, "X_q"), X_k = uniform(d.B * d.S * d.kdim, "X_k"),
             X_v = uniform(d.B * d.S * d.vdim, "X_v");
  const mha::Weights<float> w = mha::random_weights<float>(d, true, 3);
  for (const auto causal : {mha::Causal::none, mha::Causal::bottom_right})
    for (const bool fused : {true, false}) {
      CAPTURE(static_cast<int>(causal), fused);
      mha::Mask<float> mask;
      mask.causal = causal;
      std::vector<float> out32(d.B * d.T * d.d_out), out16(out32.size());
      std::vector<float> att32(fused ? 0 : d.B * d.h * d.T * d.S), att16(att32.size());
      mha::LayerOptions<float> opt;
      opt.scale = 1 / std::sqrt(static_cast<float>(d.d_k));
      opt.threads = 2;
      opt.block_q = 32, opt.block_k = 40;  // several blocks of each
      if (!fused) opt.attention = mha::AttentionOutput::per_head;
      opt.attention_buffer = fused ? nullptr : att32.data();
      mha::attention_layer<float>(d, X_q.data(), X_k.data(), X_v.data(), w, mask, opt,
                                  out32.data());
      opt.bf16_gemm = true;
      opt.attention_buffer = fused ? nullptr : att16.data();
      mha::attention_layer<float>(d, X_q.data(), X_k.data(), X_v.data(), w, mask, opt,
                                  out16.data());
      const Errors e = errors(out16, out32);
      INFO("output: max rel " << e.max_rel << ", rms rel " << e.rms_rel);
      CHECK(e.rms_rel < 4 * std::ldexp(1.0, -8));
      CHECK(e.max_rel < 8 * std::ldexp(1.0, -8));
      CHECK(e.rms_rel > 1e-4);  // bfloat16 did happen
      if (!fused) {
        const Errors a = errors(att16, att32);
        INFO("attention: max rel " << a.max_rel << ", rms rel " << a.rms_rel);
        CHECK(a.rms_rel < 4 * std::ldexp(1.0, -8));
        CHECK(a.max_rel < 8 * std::ldexp(1.0, -8));
      }
    }
}

TEST_CASE("bfloat16 GEMMs are refused in float64", "[precision][attention]") {
  mha::Dims d;
  d.B = 1, d.T = d.S = 3, d.h = 1, d.d_k = d.d_v = 2, d.d_model = d.kdim = d.vdim = d.d_out = 2;
  const mha::Weights<double> w = mha::random_weights<double>(d, false, 0);
  std::vector<double> X(6, 0.5), out(6);
  mha::LayerOptions<double> opt;
  opt.bf16_gemm = true;
  mha::test::require_invalid(
      [&] {
        mha::attention_layer<double>(d, X.data(), X.data(), X.data(), w, mha::Mask<double>(), opt,
                                     out.data());
      },
      "bfloat16 GEMMs are a float32 option");
}

namespace {

mha::Config small_config(const std::string& out_dir) {
  mha::Config c;
  c.h = 4, c.d_model = 32, c.seq_len = 20, c.batch = 2;
  c.save_attention = true;
  c.out_dir = out_dir;
  return c;
}

template <class T>
std::vector<T> load(const std::string& path, mha::DType dtype) {
  const mha::NpyArray a = mha::read_npy(path);
  REQUIRE(a.dtype == dtype);
  return mha::test::values_of<T>(a);
}

}  // namespace

TEST_CASE("output_dtype float16 end to end", "[precision][run]") {
  TempDir tmp("precision_run");
  for (const auto dtype : {mha::ComputeType::float32, mha::ComputeType::float64}) {
    const bool f64 = dtype == mha::ComputeType::float64;
    CAPTURE(f64);
    mha::Config wide = small_config(tmp / (f64 ? "f64" : "f32"));
    wide.dtype = dtype;
    mha::Config half = wide;
    half.out_dir = tmp / (f64 ? "f64_as_f16" : "f32_as_f16");
    half.output_dtype = mha::OutputType::float16;
    half.save_inputs = true;
    mha::run(wide);
    const mha::RunReport report = mha::run(half).report;

    // Each value is the float16 nearest the wide run's (one rounding, also
    // from float64), as NumPy's astype(np.float16) gives.
    for (const char* name : {"output.npy", "attention.npy"}) {
      INFO(name);
      const auto h = load<std::uint16_t>(half.out_dir + "/" + name, mha::DType::f2);
      std::vector<double> x;
      if (f64) {
        x = load<double>(wide.out_dir + "/" + name, mha::DType::f8);
      } else {
        const auto f = load<float>(wide.out_dir + "/" + name, mha::DType::f4);
        x.assign(f.begin(), f.end());
      }
      REQUIRE(h.size() == x.size());
      for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(h[i] == f16(x[i]));
      CHECK(report.outputs.at(name).dtype == "float16");
    }
    CHECK(report.config.output_dtype == mha::OutputType::float16);
    CHECK(report.outputs.at("query.npy").dtype == "float16");
    load<std::uint16_t>(half.out_dir + "/query.npy", mha::DType::f2);
    // output_stats describe the file as written.
    REQUIRE(report.output_stats);
    CHECK(report.output_stats->crc32 ==
          crc32_hex(mha::test::read_file(half.out_dir + "/output.npy")));
  }
}

TEST_CASE("output_dtype float64 from float32, and bfloat16 compute, through mha::run",
          "[precision][run]") {
  TempDir tmp("precision_run");
  mha::Config f32 = small_config(tmp / "f32");
  mha::Config wide = f32, bf16 = f32;
  wide.out_dir = tmp / "f32_as_f64";
  wide.output_dtype = mha::OutputType::float64;
  bf16.out_dir = tmp / "bf16";
  bf16.dtype = mha::ComputeType::bfloat16;
  mha::run(f32);
  const mha::RunReport wide_report = mha::run(wide).report;
  const mha::RunReport bf16_report = mha::run(bf16).report;

  const auto f = load<float>(f32.out_dir + "/output.npy", mha::DType::f4);
  const auto w = load<double>(wide.out_dir + "/output.npy", mha::DType::f8);
  REQUIRE(w == std::vector<double>(f.begin(), f.end()));
  CHECK(wide_report.outputs.at("attention.npy").dtype == "float64");
  REQUIRE(wide_report.output_stats);
  CHECK(wide_report.output_stats->crc32 ==
        crc32_hex(mha::test::read_file(wide.out_dir + "/output.npy")));

  // bfloat16 computes in float32 and writes float32 unless output_dtype says.
  CHECK(bf16_report.config.dtype == mha::ComputeType::bfloat16);
  CHECK(bf16_report.outputs.at("output.npy").dtype == "float32");
  CHECK(bf16_report.bf16_gemm == std::string(mha::bf16_gemm_backend()));
  const auto b = load<float>(bf16.out_dir + "/output.npy", mha::DType::f4);
  const Errors e = errors(b, f);
  CHECK(e.rms_rel > 1e-4);
  CHECK(e.rms_rel < 4 * std::ldexp(1.0, -8));
}

TEST_CASE("values beyond float16's range are refused unless allow_nonfinite", "[precision][run]") {
  TempDir tmp("precision_run");
  // Inputs of 1e5: the output is about as large, past float16's 65504.
  std::vector<float> q(2 * 5 * 8);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = 1e5f * (1 + static_cast<float>(i % 7));
  mha::Config c;
  c.query = tmp.write("q.npy", mha::encode_npy(mha::NpyArray::of(q.data(), {2, 5, 8})));
  c.h = 2;
  c.out_dir = tmp / "out";
  c.output_dtype = mha::OutputType::float16;
  mha::test::require_invalid([&] { mha::run(c); },
                             "is beyond float16's range (+-65504); output_dtype float16 would "
                             "write it as inf");
  CHECK(!std::filesystem::exists(tmp / "out/output.npy"));
  CHECK(!std::filesystem::exists(tmp / "out/run.json"));
  c.allow_nonfinite = true;
  mha::run(c);
  const auto h = load<std::uint16_t>(tmp / "out/output.npy", mha::DType::f2);
  CHECK(std::any_of(h.begin(), h.end(), [](std::uint16_t x) { return (x & 0x7fffu) == 0x7c00u; }));

  // float64 to float32 likewise.
  const double big[] = {1.0, -1e39};
  mha::test::require_invalid(
      [&] { mha::convert_for_output<float>(big, 2, {2}, "x.npy", false); },
      "x.npy: value -1e+39 at index (1,) is beyond float32's range (+-3.4e38); "
      "output_dtype float32 would write it as inf");
  CHECK(std::isinf(mha::convert_for_output<float>(big, 2, {2}, "x.npy", true)[1]));
}
