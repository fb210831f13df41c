// mha::exp_shifted_sum and its three implementations (scalar, AVX2, AVX-512),
// each run directly when this CPU supports it: accuracy against double
// std::exp, out-of-range and special arguments, sums, tail lengths, unaligned
// pointers, the shift, agreement between implementations and the run-time
// choice. Hidden: an exhaustive accuracy check over every float argument
// ([.vexp-exhaustive]) and a micro-benchmark ([.vexp-bench]).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../lib/src/kernel/vexp_impl.hpp"
#include "mha/kernel/vexp.hpp"

namespace {

using ExpSumFn = float (*)(float*, std::size_t, float);

struct Impl {
  const char* name;
  ExpSumFn fn;
};

// The implementations this CPU can run (scalar always).
std::vector<Impl> available_impls() {
  std::vector<Impl> impls{{"scalar", mha::detail::exp_shifted_sum_scalar}};
  if (mha::detail::cpu_has_avx2()) impls.push_back({"avx2", mha::detail::exp_shifted_sum_avx2});
  if (mha::detail::cpu_has_avx512()) {
    impls.push_back({"avx512", mha::detail::exp_shifted_sum_avx512});
  }
  return impls;
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// The argument range of vexp.cpp: below kMinArg exp(t) < FLT_MIN and the
// result is 0; above kMaxArg exp(t) > FLT_MAX and the result is +inf.
constexpr float kMinArg = -0x1.5d589ep+6f;
constexpr float kMaxArg = 0x1.62e42ep+6f;

// |y - ref| in units of the last place of the float nearest ref (ref >= FLT_MIN).
double ulp_error(float y, double ref) {
  const int e = std::max(std::ilogb(ref), -126);
  return std::fabs(static_cast<double>(y) - ref) / std::ldexp(1.0, e - 23);
}

// The bits of f.
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The float with bits u.
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Accuracy of `fn` on arguments `t` (shift 0, so the argument is exact), in
// chunks of 4096 so the vector loops do the work: the largest ulp error
// where exp(t) >= FLT_MIN, and a count of results that break the contract
// elsewhere (not exactly 0 below FLT_MIN, not +inf above FLT_MAX).
struct Accuracy {
  double max_ulp = 0;
  float worst_t = 0;
  std::size_t bad_specials = 0;
};

// Adds the accuracy of fn on t to `acc`.
void measure(ExpSumFn fn, const std::vector<float>& t, Accuracy& acc) {
  constexpr std::size_t kChunk = 4096;
  std::vector<float> x(kChunk);
  for (std::size_t begin = 0; begin < t.size(); begin += kChunk) {
    const std::size_t n = std::min(kChunk, t.size() - begin);
    std::copy(t.begin() + begin, t.begin() + begin + n, x.begin());
    fn(x.data(), n, 0.0f);
    for (std::size_t i = 0; i < n; ++i) {
      const double ref = std::exp(static_cast<double>(t[begin + i]));
      if (ref < FLT_MIN) {
        acc.bad_specials += x[i] != 0.0f;
      } else if (ref > FLT_MAX) {
        acc.bad_specials += x[i] != kInf;
      } else {
        const double e = ulp_error(x[i], ref);
        if (e > acc.max_ulp) {
          acc.max_ulp = e;
          acc.worst_t = t[begin + i];
        }
      }
    }
  }
}

// `count` evenly spaced arguments from lo to hi.
std::vector<float> sweep(double lo, double hi, std::size_t count) {
  std::vector<float> t(count);
  for (std::size_t i = 0; i < count; ++i) {
    t[i] = static_cast<float>(lo + (hi - lo) * static_cast<double>(i) / (count - 1));
  }
  return t;
}

// `count` uniform random floats in [lo, hi).
std::vector<float> random_floats(std::size_t count, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& f : v) f = dist(gen);
  return v;
}

// Runs fn on a copy of x and returns the copy; `sum` receives the result.
std::vector<float> run(ExpSumFn fn, std::vector<float> x, float shift, float& sum) {
  sum = fn(x.data(), x.size(), shift);
  return x;
}

// Checks fn on x against double std::exp: each element within 2 ulp (or the
// exact 0 / +inf of an out-of-range argument), and the returned sum within
// 1e-6 relative of both the double sum of its outputs and the double sum of
// the exact values.
void check_against_reference(ExpSumFn fn, const std::vector<float>& x, float shift) {
  float sum = 0;
  const std::vector<float> y = run(fn, x, shift, sum);
  double sum_of_outputs = 0, exact_sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float t = x[i] - shift;  // the argument as the implementation forms it
    const double ref = std::exp(static_cast<double>(t));
    INFO("i = " << i << ", t = " << t);
    if (ref < FLT_MIN) {
      REQUIRE(y[i] == 0.0f);
    } else {
      REQUIRE(ulp_error(y[i], ref) <= 2.0);
    }
    sum_of_outputs += y[i];
    exact_sum += ref < FLT_MIN ? 0.0 : ref;
  }
  INFO("n = " << x.size() << ", sum = " << sum << ", double sums " << sum_of_outputs << ", "
              << exact_sum);
  CHECK(std::fabs(sum - sum_of_outputs) <= 1e-6 * sum_of_outputs);
  CHECK(std::fabs(sum - exact_sum) <= 1e-6 * exact_sum);
}

// The plain loop the vector code replaces, for the benchmark.
__attribute__((noinline)) float std_exp_shifted_sum(float* x, std::size_t n, float shift) {
  float sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

}  // namespace

TEST_CASE("exp_shifted_sum implementations are within 2 ulp of exp on [-87, 88]", "[vexp]") {
  // 10^7 evenly spaced arguments (about 2 ulp apart at the ends), random
  // ones, and a dense run up to each end of the representable range.
  std::vector<float> t = sweep(-87.0, 88.0, 10'000'000);
  const std::vector<float> r = random_floats(1'000'000, -87.0f, 88.0f, 1);
  t.insert(t.end(), r.begin(), r.end());
  const std::vector<float> near_zero = random_floats(100'000, -1.0f, 1.0f, 2);
  t.insert(t.end(), near_zero.begin(), near_zero.end());
  for (std::uint32_t k = 0; k < 20'000; ++k) {
    t.push_back(float_of(bits_of(kMinArg) - k));  // from kMinArg up
    t.push_back(float_of(bits_of(kMaxArg) - k));  // from kMaxArg down
  }
  for (const Impl& impl : available_impls()) {
    Accuracy acc;
    measure(impl.fn, t, acc);
    INFO(impl.name << ": max " << acc.max_ulp << " ulp at t = " << acc.worst_t);
    CHECK(acc.bad_specials == 0);
    CHECK(acc.max_ulp <= 2.0);
  }
}

TEST_CASE("exp_shifted_sum gives 0 below the range, +inf above it and NaN for NaN", "[vexp]") {
  const float lowest = std::numeric_limits<float>::lowest();
  const float max = std::numeric_limits<float>::max();
  const std::vector<float> zero_args{
      -kInf,   lowest, -1e30f, -1000.0f,  -104.0f,
      -100.0f, -88.0f, -87.5f, -87.3366f, float_of(bits_of(kMinArg) + 1)};
  const std::vector<float> inf_args{kInf,   max,   1e30f,
                                    100.0f, 89.0f, float_of(bits_of(kMaxArg) + 1)};
  const std::vector<float> nan_args{kNaN, -kNaN, std::numeric_limits<float>::signaling_NaN()};
  for (const Impl& impl : available_impls()) {
    INFO(impl.name);
    // Each special alone (the tail path) and at every position of a 37-long
    // array of ordinary values (vector lanes and tail lanes).
    auto check_all = [&](const std::vector<float>& args, auto&& expect) {
      for (float a : args) {
        INFO("t = " << a);
        float sum = 0;
        std::vector<float> y = run(impl.fn, {a}, 0.0f, sum);
        expect(y[0]);
        expect(sum);
        for (std::size_t pos = 0; pos < 37; ++pos) {
          std::vector<float> x(37, -1.0f);
          x[pos] = a;
          y = run(impl.fn, x, 0.0f, sum);
          expect(y[pos]);
          for (std::size_t i = 0; i < 37; ++i) {
            if (i != pos) REQUIRE(y[i] == std::exp(-1.0f));
          }
        }
      }
    };
    check_all(zero_args, [](float y) { REQUIRE(y == 0.0f); });
    check_all(inf_args, [](float y) { REQUIRE(y == kInf); });
    check_all(nan_args, [](float y) { REQUIRE(std::isnan(y)); });

    // A row with masked (-inf) entries: the sum is that of the others.
    std::vector<float> x(50, 0.0f);
    for (std::size_t i = 0; i < x.size(); i += 3) x[i] = -kInf;
    float sum = 0;
    const std::vector<float> y = run(impl.fn, x, 0.0f, sum);
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == (i % 3 == 0 ? 0.0f : 1.0f));
    CHECK(sum == 33.0f);
  }
}

TEST_CASE("exp_shifted_sum never returns a subnormal", "[vexp]") {
  // Across the underflow boundary: either exactly 0 or at least FLT_MIN.
  const std::vector<float> t = sweep(-104.0, -86.0, 1'000'000);
  for (const Impl& impl : available_impls()) {
    INFO(impl.name);
    float sum = 0;
    const std::vector<float> y = run(impl.fn, t, 0.0f, sum);
    std::size_t subnormal = 0;
    for (float v : y) subnormal += v != 0.0f && v < FLT_MIN;
    CHECK(subnormal == 0);
  }
}

TEST_CASE("exp_shifted_sum handles every length from 0 to 70 and a long array", "[vexp]") {
  for (const Impl& impl : available_impls()) {
    INFO(impl.name);
    // Softmax-like scores; a sentinel after the end must survive.
    for (std::size_t n = 0; n <= 70; ++n) {
      INFO("n = " << n);
      std::vector<float> x = random_floats(n + 1, -20.0f, 5.0f, static_cast<unsigned>(n));
      const float sentinel = 12345.0f;
      x[n] = sentinel;
      const float shift = n ? *std::max_element(x.begin(), x.begin() + n) : 0.0f;
      std::vector<float> y = x;
      const float sum = impl.fn(y.data(), n, shift);
      REQUIRE(y[n] == sentinel);
      if (n == 0) {
        REQUIRE(sum == 0.0f);
        continue;
      }
      x.pop_back();
      check_against_reference(impl.fn, x, shift);
    }
    // Long enough for rounding in the running sums to show if they were one chain.
    check_against_reference(impl.fn, random_floats(100'003, -20.0f, 0.0f, 99), 0.0f);
    check_against_reference(impl.fn, random_floats(100'003, -3.0f, 3.0f, 98), 3.0f);
  }
}

TEST_CASE("exp_shifted_sum does not depend on the alignment of x", "[vexp]") {
  for (const Impl& impl : available_impls()) {
    INFO(impl.name);
    for (std::size_t n : {1u, 7u, 15u, 16u, 17u, 31u, 33u, 64u, 100u, 1000u}) {
      INFO("n = " << n);
      const std::vector<float> x = random_floats(n, -10.0f, 0.0f, static_cast<unsigned>(n));
      float aligned_sum = 0;
      const std::vector<float> aligned = run(impl.fn, x, -1.0f, aligned_sum);
      for (std::size_t offset = 1; offset < 4; ++offset) {
        std::vector<float> buffer(n + offset);
        std::copy(x.begin(), x.end(), buffer.begin() + offset);
        const float sum = impl.fn(buffer.data() + offset, n, -1.0f);
        CHECK(sum == aligned_sum);
        CHECK(std::equal(aligned.begin(), aligned.end(), buffer.begin() + offset));
      }
    }
  }
}

TEST_CASE("exp_shifted_sum with shift = max gives 1 for the largest value", "[vexp]") {
  for (const Impl& impl : available_impls()) {
    INFO(impl.name);
    std::vector<float> x = random_floats(45, -30.0f, 30.0f, 7);
    x[29] = 40.0f;
    float sum = 0;
    const std::vector<float> y = run(impl.fn, x, 40.0f, sum);
    CHECK(y[29] == 1.0f);
    for (float v : y) CHECK(v <= 1.0f);
    CHECK(sum >= 1.0f);
    CHECK(sum <= 45.0f);
    // exp(0) is exact at every position.
    float zsum = 0;
    const std::vector<float> ones = run(impl.fn, std::vector<float>(45, 2.5f), 2.5f, zsum);
    CHECK(std::all_of(ones.begin(), ones.end(), [](float v) { return v == 1.0f; }));
    CHECK(zsum == 45.0f);
  }
}

TEST_CASE("exp_shifted_sum implementations agree to 2 ulp", "[vexp]") {
  const std::vector<Impl> impls = available_impls();
  // Elements over the whole range; sums of a softmax-like row (the sum of
  // the wide one overflows).
  const std::vector<float> wide = random_floats(200'001, -87.0f, 88.0f, 3);
  const std::vector<float> row = random_floats(10'007, -30.0f, 0.0f, 4);
  float base_sum = 0;
  const std::vector<float> base = run(impls[0].fn, wide, 0.0f, base_sum);
  run(impls[0].fn, row, 0.0f, base_sum);
  for (std::size_t k = 1; k < impls.size(); ++k) {
    INFO(impls[k].name << " vs " << impls[0].name);
    float sum = 0;
    const std::vector<float> y = run(impls[k].fn, wide, 0.0f, sum);
    double worst = 0;
    for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, ulp_error(y[i], base[i]));
    CHECK(worst <= 2.0);
    run(impls[k].fn, row, 0.0f, sum);
    CHECK(std::fabs(sum - base_sum) <= 1e-6 * base_sum);
  }
}

TEST_CASE("vexp_isa and MHA_VEXP select the implementation", "[vexp]") {
  using mha::detail::select_vexp_isa;
  const bool avx2 = mha::detail::cpu_has_avx2();
  const bool avx512 = mha::detail::cpu_has_avx512();
  const std::string best = avx512 ? "avx512" : avx2 ? "avx2" : "scalar";
  CHECK(std::string(select_vexp_isa(nullptr)) == best);
  CHECK(std::string(select_vexp_isa("")) == best);
  CHECK(std::string(select_vexp_isa("bogus")) == best);
  CHECK(std::string(select_vexp_isa("scalar")) == "scalar");
  CHECK(std::string(select_vexp_isa("avx2")) == (avx2 ? "avx2" : "scalar"));
  CHECK(std::string(select_vexp_isa("avx512")) == best);

  // This process's choice follows its MHA_VEXP (run the tests with
  // MHA_VEXP=scalar|avx2|avx512 to send the public function down each path).
  const std::string isa = mha::vexp_isa();
  CHECK(isa == select_vexp_isa(std::getenv("MHA_VEXP")));
  ExpSumFn chosen = isa == "avx512" ? mha::detail::exp_shifted_sum_avx512
                    : isa == "avx2" ? mha::detail::exp_shifted_sum_avx2
                                    : mha::detail::exp_shifted_sum_scalar;
  const std::vector<float> x = random_floats(1001, -50.0f, 10.0f, 5);
  std::vector<float> via_public = x;
  const float public_sum = mha::exp_shifted_sum(via_public.data(), via_public.size(), 10.0f);
  float direct_sum = 0;
  const std::vector<float> direct = run(chosen, x, 10.0f, direct_sum);
  CHECK(public_sum == direct_sum);
  CHECK(via_public == direct);
}

TEST_CASE("exp_shifted_sum<double> is the std::exp loop", "[vexp]") {
  std::vector<double> x{0.5, -1.0, -std::numeric_limits<double>::infinity(), 2.0, -700.0};
  const std::vector<double> orig = x;
  const double sum = mha::exp_shifted_sum(x.data(), x.size(), 2.0);
  double expected_sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(x[i] == std::exp(orig[i] - 2.0));
    expected_sum += x[i];
  }
  CHECK(sum == expected_sum);
  CHECK(x[3] == 1.0);
  CHECK(mha::exp_shifted_sum(x.data(), 0, 0.0) == 0.0);
}

TEST_CASE("exp_shifted_sum exhaustive accuracy", "[.vexp-exhaustive]") {
  // Every float argument from kMinArg to kMaxArg (about 2.2e9 of them).
  for (const Impl& impl : available_impls()) {
    Accuracy acc;
    std::vector<float> t;
    t.reserve(1u << 22);
    auto flush = [&] {
      measure(impl.fn, t, acc);
      t.clear();
    };
    for (std::uint32_t u = bits_of(kMinArg); u >= 0x80000000u; --u) {
      t.push_back(float_of(u));
      if (t.size() == t.capacity()) flush();
    }
    for (std::uint32_t u = 0; u <= bits_of(kMaxArg); ++u) {
      t.push_back(float_of(u));
      if (t.size() == t.capacity()) flush();
    }
    flush();
    std::printf("%-7s max %.3f ulp at t = %.9g, contract breaks %zu\n", impl.name, acc.max_ulp,
                acc.worst_t, acc.bad_specials);
    CHECK(acc.bad_specials == 0);
    CHECK(acc.max_ulp <= 2.0);
  }
}

TEST_CASE("exp_shifted_sum micro-benchmark", "[.vexp-bench]") {
  // A softmax row of 4096 scores, restored before every call (the copy is
  // timed on its own and subtracted).
  constexpr std::size_t kN = 4096;
  constexpr int kReps = 20'000;
  const std::vector<float> src = random_floats(kN, -20.0f, 0.0f, 11);
  std::vector<float> x(kN);
  volatile float sink = 0;
  auto time_ns_per_elem = [&](ExpSumFn fn) {
    double best = 1e30;
    for (int trial = 0; trial < 5; ++trial) {
      const auto start = std::chrono::steady_clock::now();
      for (int rep = 0; rep < kReps; ++rep) {
        std::memcpy(x.data(), src.data(), kN * sizeof(float));
        if (fn) sink = sink + fn(x.data(), kN, 0.0f);
      }
      const std::chrono::duration<double, std::nano> dt = std::chrono::steady_clock::now() - start;
      best = std::min(best, dt.count() / (double(kReps) * kN));
    }
    return best;
  };
  const double copy = time_ns_per_elem(nullptr);
  std::printf("n = %zu, best of 5 x %d calls; copy of the row %.3f ns/elem (subtracted)\n", kN,
              kReps, copy);
  std::vector<Impl> impls{{"std::exp", std_exp_shifted_sum}};
  for (const Impl& impl : available_impls()) impls.push_back(impl);
  for (const Impl& impl : impls) {
    std::printf("%-9s %.3f ns/elem\n", impl.name, time_ns_per_elem(impl.fn) - copy);
  }
}

TEST_CASE("max_of: every build, every length, NaN skipped", "[vexp]") {
  using MaxFn = float (*)(const float*, std::size_t);
  std::vector<std::pair<const char*, MaxFn>> impls{{"scalar", mha::detail::max_of_scalar}};
  if (mha::detail::cpu_has_avx2()) impls.push_back({"avx2", mha::detail::max_of_avx2});
  if (mha::detail::cpu_has_avx512()) impls.push_back({"avx512", mha::detail::max_of_avx512});
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t n = 0; n <= 70; ++n)
    for (int trial = 0; trial < 4; ++trial) {
      // Offset by one float so that the loads are unaligned.
      std::vector<float> buffer(n + 1);
      float* x = buffer.data() + 1;
      for (std::size_t i = 0; i < n; ++i) x[i] = u(rng);
      if (trial == 1 && n > 0) x[rng() % n] = nan;  // skipped
      if (trial == 2) std::fill(x, x + n, -inf);    // a fully masked row
      if (trial == 3 && n > 0) x[n - 1] = inf;
      float want = -inf;
      for (std::size_t i = 0; i < n; ++i)
        if (!std::isnan(x[i])) want = std::max(want, x[i]);
      for (const auto& [name, fn] : impls) {
        CAPTURE(name, n, trial);
        CHECK(fn(x, n) == want);
      }
      CHECK(mha::max_of(x, n) == want);
    }
}
