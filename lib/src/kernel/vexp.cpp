// exp_shifted_sum: x[i] = exp(x[i] - shift) and the sum, the inner loop of
// every softmax. One algorithm (Cephes expf) in three builds -- AVX-512, AVX2
// + FMA and portable scalar -- picked once per process from the CPU features
// and the MHA_VEXP environment variable. The vector builds use function
// target attributes rather than the compiler flags, so they are available
// (and chosen at run time) even when the library is built without
// -march=native.
//
// The algorithm, for t = x - shift:
//   n = round(t * log2(e)),  r = t - n * ln2  (ln2 split into a short head
//   and a tail, so n * ln2_hi is exact and r keeps its low bits; |r| <= ln2/2)
//   exp(r) ~= 1 + r + r^2 * P(r), P the degree-5 Cephes minimax polynomial
//   exp(t) = 2^n * exp(r), the 2^n applied by adding n to the exponent bits.
// The exponent add is only right while the result is a normal float, so
// t < kMinArg (results below FLT_MIN, and -inf) gives exactly 0 and
// t > kMaxArg gives +inf. Rather than clamping t, the vector versions let
// out-of-range lanes compute garbage and overwrite it at the end (one compare
// and one blend each); the scalar one computes with 0 in their place. A NaN t
// gives NaN. Max error measured over every float in [kMinArg, kMaxArg]:
// 1.01 ulp against double std::exp (tests/test_vexp.cpp, [.vexp-exhaustive]).
//
// Not for -ffast-math: the NaN and infinity handling relies on IEEE semantics.
#include "mha/kernel/vexp.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "intrinsics.hpp"
#include "vexp_impl.hpp"

namespace mha {
namespace {

constexpr float kLog2e = 1.44269504088896341f;
// ln 2 = kLn2Hi + kLn2Lo: the head has 9 significant bits, so n * kLn2Hi is
// exact for every |n| <= 2^15 and the subtraction t - n * kLn2Hi loses nothing.
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
// The smallest float t with exp(t) >= FLT_MIN (-126 ln 2 rounded up): below
// it the result would be subnormal, which the exponent add cannot make.
constexpr float kMinArg = -0x1.5d589ep+6f;  // -87.33654
// The largest float t with exp(t) <= FLT_MAX; above it exp overflows.
constexpr float kMaxArg = 0x1.62e42ep+6f;  // 88.72283
// Cephes expf: exp(r) ~= 1 + r + r^2 * (kP0 r^5 + ... + kP5), |r| <= ln2/2.
constexpr float kP0 = 1.9875691500e-4f;
constexpr float kP1 = 1.3981999507e-3f;
constexpr float kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f;
constexpr float kP4 = 1.6666665459e-1f;
constexpr float kP5 = 5.0000001201e-1f;

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------- scalar

// The float with the given bits (std::bit_cast is C++20).
inline float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The bits of f.
inline std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// exp(t) by the algorithm above. The range checks work on the bits as
// integers, and the selects are masks: float comparisons (which may trap,
// under GCC's default -ftrapping-math) and unsigned ones (none in SSE2) keep
// GCC from vectorizing a loop of this, which then runs slower than libm.
inline float exp_one(float t) {
  const std::int32_t u = static_cast<std::int32_t>(to_bits(t));
  const std::int32_t mag = u & 0x7fffffff;  // the bits of |t|
  const std::int32_t limit = static_cast<std::int32_t>(to_bits(u < 0 ? -kMinArg : kMaxArg));
  // All ones for kMinArg <= t <= kMaxArg, zero otherwise (NaN included).
  const std::int32_t in_range = -static_cast<std::int32_t>(mag <= limit);
  // The argument for the arithmetic: 0 when out of range, which keeps the
  // float-to-int conversion below defined.
  const float tc = from_bits(static_cast<std::uint32_t>(u & in_range));
  // Round to nearest by the 1.5 * 2^23 shifter (exact for |x| < 2^22),
  // which needs no SSE4.1 roundss and no libm call.
  constexpr float kShifter = 0x1.8p23f;
  const float n = (tc * kLog2e + kShifter) - kShifter;
  float r = tc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = kP0;
  p = p * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  p = p * (r * r) + r + 1.0f;
  // Unsigned arithmetic: shifting a negative int left is undefined in C++17.
  const std::uint32_t scale = static_cast<std::uint32_t>(static_cast<std::int32_t>(n)) << 23;
  // Out of range: NaN stays (mag above the infinity bits), else 0 below, +inf above.
  const std::int32_t overflow = u < 0 ? 0 : static_cast<std::int32_t>(to_bits(kInf));
  const std::int32_t special = mag > static_cast<std::int32_t>(to_bits(kInf)) ? u : overflow;
  return from_bits(((to_bits(p) + scale) & static_cast<std::uint32_t>(in_range)) |
                   static_cast<std::uint32_t>(special & ~in_range));
}

// ---------------------------------------------------------------- sums

// Elements per block of the summation. Each block is summed in its own
// running sums (lanes), which are then added to the running total: with one
// long chain of float adds per lane, the terms of a long row become small
// next to the sum and lose their low bits (100k softmax terms lost about
// 2e-6 of the sum that way). Blocked, the error stays near 1e-7. A multiple
// of every unroll width below, so only the last block has a tail.
constexpr std::size_t kBlock = 1024;

// x[i] = exp(x[i] - shift) for i < n (n <= kBlock), returning their sum.
// Two passes over the (cache-resident) block, each of which GCC vectorizes
// for the ISA the file is built for: the exps, then sixteen running sums like
// the vector versions' lanes, more accurate than one chain of float adds.
inline float block_sum_scalar(float* x, std::size_t n, float shift) {
  for (std::size_t i = 0; i < n; ++i) x[i] = exp_one(x[i] - shift);
  constexpr std::size_t kLanes = 16;
  float acc[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  }
  for (std::size_t j = 0; i + j < n; ++j) acc[j] += x[i + j];
  // Pairwise reduction of the lanes.
  for (std::size_t width = kLanes / 2; width > 0; width /= 2) {
    for (std::size_t j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  return acc[0];
}

// ---------------------------------------------------------------- vectors

// One body for both vector builds (vexp_simd.inc), compiled twice under
// #pragma GCC target, each time over the operations of its ISA (struct V):
// the arithmetic is the same sequence of instructions, only the width, the
// masked tail and the handling of out-of-range lanes differ.

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {

struct V {
  using reg = __m256;
  static constexpr std::size_t kLanes = 8;
  static reg set1(float v) { return _mm256_set1_ps(v); }
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* x) { return _mm256_loadu_ps(x); }
  static void store(float* x, reg v) { _mm256_storeu_ps(x, v); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg fnmadd(reg a, reg b, reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static reg round(reg v) {
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n p by adding n to the exponent bits; zero below the range (not-less-than
  // is true for NaN, which is kept), +inf above it. NaN lanes stay NaN: the
  // conversion of NaN to int gives 0x80000000, whose shift by 23 is 0.
  static reg scale_and_clamp(reg p, reg n, reg t) {
    const __m256i scale = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    reg y = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), scale));
    y = _mm256_and_ps(y, _mm256_cmp_ps(t, _mm256_set1_ps(kMinArg), _CMP_NLT_UQ));
    return _mm256_blendv_ps(y, _mm256_set1_ps(kInf),
                            _mm256_cmp_ps(t, _mm256_set1_ps(kMaxArg), _CMP_GT_OQ));
  }
  // The first `count` (< kLanes) lanes: lanes below it have their sign bit
  // set, the mask maskload/maskstore want. Masked-off lanes read as 0 and
  // must not reach the sum, hence the and.
  using mask = __m256i;
  static mask first(std::size_t count) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
  }
  static reg load(const float* x, mask m) { return _mm256_maskload_ps(x, m); }
  static void store(float* x, mask m, reg v) { _mm256_maskstore_ps(x, m, v); }
  static reg add(reg acc, mask m, reg v) {
    return _mm256_add_ps(acc, _mm256_and_ps(v, _mm256_castsi256_ps(m)));
  }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static float max_lanes(reg v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float sum_lanes(reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "vexp_simd.inc"

}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq")
namespace avx512 {

struct V {
  using reg = __m512;
  static constexpr std::size_t kLanes = 16;
  static reg set1(float v) { return _mm512_set1_ps(v); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* x) { return _mm512_loadu_ps(x); }
  static void store(float* x, reg v) { _mm512_storeu_ps(x, v); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg fnmadd(reg a, reg b, reg c) { return _mm512_fnmadd_ps(a, b, c); }
  static reg round(reg v) {
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // As the AVX2 version, with the zeroing below the range in the same
  // instruction as the exponent add.
  static reg scale_and_clamp(reg p, reg n, reg t) {
    const __m512i scale = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    const __mmask16 keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(kMinArg), _CMP_NLT_UQ);
    const reg y = _mm512_castsi512_ps(_mm512_maskz_add_epi32(keep, _mm512_castps_si512(p), scale));
    const __mmask16 over = _mm512_cmp_ps_mask(t, _mm512_set1_ps(kMaxArg), _CMP_GT_OQ);
    return _mm512_mask_mov_ps(y, over, _mm512_set1_ps(kInf));
  }
  // Masked-off lanes are neither read (no fault past the end) nor written nor summed.
  using mask = __mmask16;
  static mask first(std::size_t count) { return static_cast<__mmask16>((1u << count) - 1u); }
  static reg load(const float* x, mask m) { return _mm512_maskz_loadu_ps(m, x); }
  static void store(float* x, mask m, reg v) { _mm512_mask_storeu_ps(x, m, v); }
  static reg add(reg acc, mask m, reg v) { return _mm512_mask_add_ps(acc, m, acc, v); }
  static float sum_lanes(reg v) { return _mm512_reduce_add_ps(v); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static float max_lanes(reg v) { return _mm512_reduce_max_ps(v); }
};

#include "vexp_simd.inc"

}  // namespace avx512
#pragma GCC pop_options

}  // namespace

namespace detail {

// Block by block (see kBlock), adding each block's sum to a float total.
float exp_shifted_sum_scalar(float* x, std::size_t n, float shift) {
  float total = 0.0f;
  for (std::size_t i = 0; i < n; i += kBlock) {
    total += block_sum_scalar(x + i, std::min(kBlock, n - i), shift);
  }
  return total;
}

float exp_shifted_sum_avx2(float* x, std::size_t n, float shift) {
  return avx2::exp_shifted_sum(x, n, shift);
}

float max_of_scalar(const float* x, std::size_t n) {
  float m = -kInf;
  for (std::size_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float max_of_avx2(const float* x, std::size_t n) {
  return avx2::max_of(x, n);
}

float max_of_avx512(const float* x, std::size_t n) {
  return avx512::max_of(x, n);
}

float exp_shifted_sum_avx512(float* x, std::size_t n, float shift) {
  return avx512::exp_shifted_sum(x, n, shift);
}

// AVX2 and FMA present. __builtin_cpu_supports also checks that the OS saves
// the wider registers.
bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// AVX-512F and DQ present (and enabled by the OS).
bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}

// The requested ISA if usable, else the best one (see vexp_impl.hpp).
const char* select_vexp_isa(const char* request) {
  const std::string_view want = request ? request : "";
  if (want == "scalar") return "scalar";
  if (want == "avx2" && cpu_has_avx2()) return "avx2";
  if (cpu_has_avx512()) return "avx512";
  if (cpu_has_avx2()) return "avx2";
  return "scalar";
}

}  // namespace detail

namespace {

using ExpSumFn = float (*)(float*, std::size_t, float);
using MaxFn = float (*)(const float*, std::size_t);

// An implementation and its name as vexp_isa reports it.
struct Choice {
  const char* isa;
  ExpSumFn fn;
  MaxFn max;
};

// The implementation for this process, decided on first use from the CPU and
// MHA_VEXP (thread-safe static initialisation; later changes to the
// environment are ignored).
const Choice& choice() {
  static const Choice c = [] {
    const char* isa = detail::select_vexp_isa(std::getenv("MHA_VEXP"));
    const std::string_view name = isa;
    if (name == "avx512") return Choice{isa, detail::exp_shifted_sum_avx512, detail::max_of_avx512};
    if (name == "avx2") return Choice{isa, detail::exp_shifted_sum_avx2, detail::max_of_avx2};
    return Choice{isa, detail::exp_shifted_sum_scalar, detail::max_of_scalar};
  }();
  return c;
}

}  // namespace

// Through the implementation chosen on first use.
float exp_shifted_sum(float* x, std::size_t n, float shift) {
  return choice().fn(x, n, shift);
}

float max_of(const float* x, std::size_t n) {
  return choice().max(x, n);
}

double max_of(const double* x, std::size_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// The double softmax is the accuracy reference, so it keeps libm's exp.
double exp_shifted_sum(double* x, std::size_t n, double shift) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// The name of the implementation chosen on first use.
const char* vexp_isa() {
  return choice().isa;
}

}  // namespace mha
