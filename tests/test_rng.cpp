// mha::RandomStream: the documented counter-based formula (rng.hpp),
// determinism, independence of streams, and the uniform conversions.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "mha/config/rng.hpp"

namespace {

// The formula of rng.hpp, implemented again from its comment:
//   x_i = mix64(key + (i + 1) * 0x9E3779B97F4A7C15), key = mix64(seed ^ fnv1a64(name))
// with mix64 the SplitMix64 finalizer and fnv1a64 the 64-bit FNV-1a hash.
std::uint64_t splitmix64_finalizer(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 14695981039346656037ull;  // FNV offset basis
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;  // FNV prime
  }
  return h;
}

std::uint64_t documented_bits(std::uint64_t seed, const std::string& name, std::uint64_t i) {
  const std::uint64_t key = splitmix64_finalizer(seed ^ fnv1a64(name));
  return splitmix64_finalizer(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}

}  // namespace

TEST_CASE("RandomStream::bits pins the documented formula", "[rng]") {
  // Values computed outside C++ (Python integers) from the formula above.
  const mha::RandomStream query(0, "query");
  CHECK(query.bits(0) == 0xa64ab1af2c2d4880ull);
  CHECK(query.bits(1) == 0x5576a97260bab63dull);
  CHECK(query.bits(2) == 0x088fb5e43207e192ull);
  CHECK(query.bits(1000) == 0x997089f20376cd04ull);
  CHECK(mha::RandomStream(42, "W_q").bits(0) == 0x66444b88cd7ccf3cull);
  CHECK(mha::RandomStream(42, "W_q").bits(7) == 0x8a81716df0a6a8a2ull);
  CHECK(mha::RandomStream(~std::uint64_t{0}, "key").bits(3) == 0x79af2d3ba1296b67ull);
  // The test's own reimplementation agrees with those values ...
  CHECK(fnv1a64("query") == 0xb1068f146c4596c3ull);
  CHECK(documented_bits(0, "query", 0) == 0xa64ab1af2c2d4880ull);
}

TEST_CASE("RandomStream::bits follows the formula for many seeds, names and indices", "[rng]") {
  // ... and with the library everywhere else, including the empty name,
  // names with non-ASCII bytes and indices near 2^64.
  const std::vector<std::string> names = {"",
                                          "query",
                                          "key",
                                          "value",
                                          "W_q",
                                          "W_k",
                                          "W_v",
                                          "W_o",
                                          "b_o",
                                          "\xff\x80 name",
                                          std::string(1, '\0')};
  const std::vector<std::uint64_t> seeds = {0, 1, 2, 42, 0xDEADBEEF, ~std::uint64_t{0}};
  const std::vector<std::uint64_t> indices = {
      0, 1, 2, 3, 1000, 123456789, ~std::uint64_t{0} - 1, ~std::uint64_t{0}};
  for (const auto& name : names)
    for (auto seed : seeds) {
      const mha::RandomStream rs(seed, name);
      for (auto i : indices) {
        INFO("seed " << seed << " name '" << name << "' i " << i);
        CHECK(rs.bits(i) == documented_bits(seed, name, i));
      }
    }
}

TEST_CASE("RandomStream is deterministic and streams are independent", "[rng]") {
  const mha::RandomStream a(7, "query"), b(7, "query");
  const mha::RandomStream other_name(7, "key"), other_seed(8, "query");
  std::set<std::uint64_t> seen;
  std::size_t same_name = 0, same_seed = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    CHECK(a.bits(i) == b.bits(i));
    CHECK(a.uniform_float(i) == b.uniform_float(i));
    CHECK(a.uniform_double(i) == b.uniform_double(i));
    same_name += a.bits(i) == other_name.bits(i);
    same_seed += a.bits(i) == other_seed.bits(i);
    seen.insert(a.bits(i));
  }
  CHECK(same_name == 0);
  CHECK(same_seed == 0);
  CHECK(seen.size() == 1000);  // no repeats within a stream
  // Element i does not depend on what was drawn before (counter-based).
  const mha::RandomStream fresh(7, "query");
  CHECK(fresh.bits(999) == a.bits(999));
  // Seed and name are not simply interchangeable: seed ^ fnv(name) is mixed.
  CHECK(mha::RandomStream(1, "a").bits(0) != mha::RandomStream(0, "a").bits(0));
}

TEST_CASE("uniform_float and uniform_double are exact truncations of the bits", "[rng]") {
  const mha::RandomStream rs(3, "value");
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const std::uint64_t x = rs.bits(i);
    // 24 and 53 top bits, scaled by 2^-24 and 2^-53: exact in each type.
    CHECK(rs.uniform_float(i) == std::ldexp(static_cast<float>(x >> 40), -24));
    CHECK(rs.uniform_double(i) == std::ldexp(static_cast<double>(x >> 11), -53));
  }
  CHECK(mha::RandomStream(0, "query").uniform_float(0) == 0.6495772004127502f);
  CHECK(mha::RandomStream(0, "query").uniform_double(0) == 0.6495772411982915);
}

TEST_CASE("uniform values lie in the half-open unit interval with mean 1/2", "[rng]") {
  const std::size_t n = 1 << 20;
  const mha::RandomStream rs(0, "uniformity");
  double sum_f = 0, sum_d = 0, sum_sq = 0;
  float min_f = 1, max_f = 0;
  std::size_t bins[10] = {}, outside = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float f = rs.uniform_float(i);
    const double d = rs.uniform_double(i);
    outside += !(f >= 0.0f && f < 1.0f) + !(d >= 0.0 && d < 1.0);
    min_f = std::min(min_f, f);
    max_f = std::max(max_f, f);
    sum_f += f;
    sum_d += d;
    sum_sq += d * d;
    ++bins[static_cast<int>(d * 10)];
  }
  CHECK(outside == 0);
  // Standard error of the mean is sqrt(1/12 / n) ~ 2.8e-4: 0.002 is > 7 sigma.
  CHECK(sum_f / n == Approx(0.5).margin(0.002));
  CHECK(sum_d / n == Approx(0.5).margin(0.002));
  CHECK(sum_sq / n == Approx(1.0 / 3).margin(0.002));
  CHECK(min_f < 1e-4f);
  CHECK(max_f > 1 - 1e-4f);
  for (std::size_t b : bins) CHECK(double(b) / n == Approx(0.1).margin(0.003));
}

TEST_CASE("the largest float draw is 1 - 2^-24, never 1", "[rng]") {
  // Found by search: element 25215303 of (0, "query") and element 0 of
  // (15919125, "query") have their top 24 bits all set.
  const mha::RandomStream a(0, "query"), b(15919125, "query");
  REQUIRE((a.bits(25215303) >> 40) == 0xFFFFFFu);
  REQUIRE((b.bits(0) >> 40) == 0xFFFFFFu);
  CHECK(a.uniform_float(25215303) == 1.0f - 0x1p-24f);
  CHECK(b.uniform_float(0) == 1.0f - 0x1p-24f);
  CHECK(b.uniform_float(0) < 1.0f);
  CHECK(b.uniform_double(0) < 1.0);
  float out = 1;
  b.fill_uniform<float>(&out, 1, 0.0f, 1.0f);
  CHECK(out < 1.0f);
  // Glorot ranges [-limit, limit) stay below limit at the top draw.
  for (std::size_t fan_in : {1, 3, 8, 64, 512, 4096})
    for (std::size_t fan_out : {1, 2, 7, 64, 1000}) {
      const float limit = static_cast<float>(mha::glorot_limit(fan_in, fan_out));
      b.fill_uniform<float>(&out, 1, -limit, limit);
      INFO("fan_in " << fan_in << " fan_out " << fan_out);
      CHECK(out < limit);
      CHECK(out >= -limit);
    }
  // The smallest draw is exactly 0: element 36194937 of (0, "query").
  REQUIRE((a.bits(36194937) >> 40) == 0u);
  CHECK(a.uniform_float(36194937) == 0.0f);
}

TEST_CASE("fill_uniform is low + (high - low) * u element by element", "[rng]") {
  const mha::RandomStream rs(5, "fill");
  std::vector<float> f(257);
  std::vector<double> d(257);
  rs.fill_uniform<float>(f.data(), f.size(), -2.0f, 3.0f);
  rs.fill_uniform<double>(d.data(), d.size(), -0.25, 0.25);
  for (std::size_t i = 0; i < f.size(); ++i) {
    // volatile: a multiply and an add, each rounded, as in rng.cpp (which is
    // built with -ffp-contract=off); no fused multiply-add here either.
    volatile float pf = 5.0f * rs.uniform_float(i);
    volatile double pd = 0.5 * rs.uniform_double(i);
    CHECK(f[i] == -2.0f + pf);
    CHECK(d[i] == -0.25 + pd);
    CHECK(f[i] >= -2.0f);
    CHECK(f[i] < 3.0f);
    CHECK(d[i] >= -0.25);
    CHECK(d[i] < 0.25);
  }
  // n = 0 writes nothing.
  float untouched = 42;
  rs.fill_uniform<float>(&untouched, 0, 0.0f, 1.0f);
  CHECK(untouched == 42);
}

TEST_CASE("glorot_limit is sqrt(6 / (fan_in + fan_out))", "[rng]") {
  CHECK(mha::glorot_limit(1, 5) == 1.0);
  CHECK(mha::glorot_limit(3, 3) == 1.0);
  CHECK(mha::glorot_limit(512, 64) == std::sqrt(6.0 / 576));
  CHECK(mha::glorot_limit(64, 512) == mha::glorot_limit(512, 64));
  CHECK(mha::glorot_limit(4, 8) == Approx(0.7071067811865476));
  CHECK(mha::glorot_limit(3000, 3000) == Approx(0.03162277660168379));
}
