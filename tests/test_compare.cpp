#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/inspect/compare.hpp"
#include "mha/io/npy.hpp"

using mha::Comparison;
using mha::DType;
using mha::NpyArray;

namespace {

using Shape = std::vector<std::size_t>;
using Index = std::vector<std::size_t>;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

NpyArray f8(const std::vector<double>& v, Shape shape) {
  return NpyArray::of(v.data(), std::move(shape));
}
NpyArray f8(const std::vector<double>& v) {
  return f8(v, {v.size()});
}

NpyArray f4(const std::vector<float>& v) {
  return NpyArray::of(v.data(), {v.size()});
}

// float16 from raw IEEE half bit patterns.
NpyArray f2(const std::vector<std::uint16_t>& bits) {
  NpyArray a;
  a.dtype = DType::f2;
  a.shape = {bits.size()};
  a.data.resize(bits.size() * 2);
  if (!bits.empty()) std::memcpy(a.data.data(), bits.data(), a.data.size());
  return a;
}

NpyArray b1(const std::vector<int>& v) {
  std::unique_ptr<bool[]> buf(new bool[v.size() + 1]);
  for (std::size_t i = 0; i < v.size(); ++i) buf[i] = v[i] != 0;
  return NpyArray::of(buf.get(), {v.size()});
}

NpyArray i4(const std::vector<std::int32_t>& v) {
  return NpyArray::of(v.data(), {v.size()});
}
NpyArray i8(const std::vector<std::int64_t>& v) {
  return NpyArray::of(v.data(), {v.size()});
}

}  // namespace

TEST_CASE("identical arrays are close", "[compare]") {
  const NpyArray a = f8({1.0, -2.5, 0.0, 1e300, -1e-300}, {5});
  const Comparison c = mha::compare(a, a, 0.0, 0.0);
  CHECK(c.same_shape);
  CHECK(c.close);
  CHECK(c.count == 5);
  CHECK(c.mismatches == 0);
  CHECK(c.max_abs_diff == 0.0);
  CHECK(c.max_rel_diff == 0.0);
  CHECK(c.nan_a == 0);
  CHECK(c.nan_b == 0);
  CHECK(c.nan_mismatches == 0);
  CHECK(c.worst_index.size() == 1);
}

TEST_CASE("difference just inside and just outside atol", "[compare]") {
  // atol = 0.25 and every value below is exact in binary.
  const NpyArray ref = f8({1.0});
  SECTION("exactly at the tolerance is close (<=)") {
    const Comparison c = mha::compare(f8({1.25}), ref, 0.0, 0.25);
    CHECK(c.close);
    CHECK(c.mismatches == 0);
    CHECK(c.max_abs_diff == 0.25);
  }
  SECTION("inside") {
    CHECK(mha::compare(f8({1.125}), ref, 0.0, 0.25).close);
    CHECK(mha::compare(f8({0.75}), ref, 0.0, 0.25).close);
  }
  SECTION("one ulp outside") {
    const double a = std::nextafter(1.25, 2.0);
    const Comparison c = mha::compare(f8({a}), ref, 0.0, 0.25);
    CHECK_FALSE(c.close);
    CHECK(c.mismatches == 1);
    CHECK(c.max_abs_diff == a - 1.0);
    CHECK(c.worst_index == Index{0});
    CHECK(c.worst_a == a);
    CHECK(c.worst_b == 1.0);
  }
  SECTION("below the reference, one ulp outside") {
    CHECK_FALSE(mha::compare(f8({std::nextafter(0.75, 0.0)}), ref, 0.0, 0.25).close);
  }
}

TEST_CASE("rtol scales with |b|, the reference", "[compare]") {
  // |1 - 2| = 1 <= 0.5 * |2|, but 1 > 0.5 * |1|: the order of the arguments matters.
  const NpyArray one = f8({1.0}), two = f8({2.0});
  CHECK(mha::compare(one, two, 0.5, 0.0).close);
  const Comparison swapped = mha::compare(two, one, 0.5, 0.0);
  CHECK_FALSE(swapped.close);
  CHECK(swapped.mismatches == 1);

  SECTION("atol and rtol add up") {
    // 1 <= 0.5 + 0.25 * 2 exactly; neither term alone is enough.
    CHECK(mha::compare(one, two, 0.25, 0.5).close);
    CHECK_FALSE(mha::compare(one, two, 0.25, 0.4375).close);
    CHECK_FALSE(mha::compare(one, two, 0.1875, 0.5).close);
  }
  SECTION("atol alone ignores magnitude") {
    CHECK(mha::compare(f8({1000.5}), f8({1000.0}), 0.0, 0.5).close);
    CHECK_FALSE(mha::compare(f8({1000.5}), f8({1000.0}), 0.0, 0.25).close);
  }
  SECTION("with b = 0 only atol counts") {
    CHECK_FALSE(mha::compare(f8({1e-9}), f8({0.0}), 1.0, 0.0).close);
    CHECK(mha::compare(f8({0.0}), f8({1e-9}), 1.0, 0.0).close);
  }
}

TEST_CASE("NaN is never close by default, as numpy.allclose(equal_nan=False)", "[compare]") {
  // NaN at the same index: close only with equal_nan.
  const NpyArray a = f8({kNaN, 3.0}), b = f8({kNaN, 3.0});
  const Comparison c = mha::compare(a, b, 0.0, 0.0);
  CHECK_FALSE(c.close);
  CHECK(c.mismatches == 1);
  CHECK(c.nan_a == 1);
  CHECK(c.nan_b == 1);
  CHECK(c.nan_mismatches == 0);  // same positions: not a NaN mismatch, still not close
  CHECK(c.worst_index == Index{0});
  CHECK_FALSE(mha::compare(a, b, mha::AllClose{}).close);  // numpy's defaults
  CHECK(mha::compare(a, b, mha::AllClose{0.0, 0.0, true}).close);
  // Huge tolerances do not make NaN close.
  CHECK_FALSE(mha::compare(f8({kNaN}), f8({kNaN}), 1e300, 1e300).close);
}

TEST_CASE("with equal_nan, NaN equals NaN at the same index, and nothing else", "[compare]") {
  const mha::AllClose equal_nan{1e-5, 1e-8, true};
  const NpyArray a = f8({kNaN, 1.0, kNaN, 4.0});
  const NpyArray b = f8({kNaN, 1.0, 2.0, kNaN});
  const Comparison c = mha::compare(a, b, equal_nan);
  CHECK_FALSE(c.close);
  CHECK(c.count == 4);
  CHECK(c.nan_a == 2);
  CHECK(c.nan_b == 2);
  CHECK(c.nan_mismatches == 2);
  CHECK(c.mismatches == 2);
  CHECK(c.max_abs_diff == 0.0);      // NaN pairs do not count
  CHECK(c.worst_index == Index{2});  // the first NaN mismatch wins
  CHECK(std::isnan(c.worst_a));
  CHECK(c.worst_b == 2.0);
  // Without equal_nan the NaN pair at 0 is a mismatch too, and the first.
  const Comparison d = mha::compare(a, b, 1e-5, 1e-8);
  CHECK(d.mismatches == 3);
  CHECK(d.nan_mismatches == 2);
  CHECK(d.worst_index == Index{0});

  const mha::AllClose exact_nan{0.0, 0.0, true};
  SECTION("NaN at the same positions only is close") {
    const Comparison e = mha::compare(f8({kNaN, 3.0}), f8({kNaN, 3.0}), exact_nan);
    CHECK(e.close);
    CHECK(e.nan_a == 1);
    CHECK(e.nan_b == 1);
    CHECK(e.nan_mismatches == 0);
    CHECK(e.worst_index == Index{1});
  }
  SECTION("all NaN is close") {
    const Comparison e = mha::compare(f8({kNaN, kNaN}), f8({kNaN, kNaN}), exact_nan);
    CHECK(e.close);
    CHECK(e.worst_index == Index{0});
  }
  SECTION("a NaN mismatch beats any finite excess") {
    const Comparison e = mha::compare(f8({100.0, kNaN}), f8({0.0, 1.0}), exact_nan);
    CHECK(e.mismatches == 2);
    CHECK(e.nan_mismatches == 1);
    CHECK(e.worst_index == Index{1});
    CHECK(e.max_abs_diff == 100.0);
  }
}

TEST_CASE("tolerances must be finite and >= 0", "[compare]") {
  const NpyArray a = f8({1.0});
  for (const double bad : {-1.0, -1e-300, kNaN, kInf, -kInf}) {
    for (const bool rtol : {true, false}) {
      try {
        mha::compare(a, a, rtol ? bad : 0.0, rtol ? 0.0 : bad);
        FAIL("no exception for " << bad);
      } catch (const mha::Error& e) {
        CHECK(e.kind() == mha::ErrorKind::invalid_input);
        const std::string what = e.what();
        CHECK(what.find(rtol ? "rtol" : "atol") != std::string::npos);
        CHECK(what.find("expected a finite number >= 0") != std::string::npos);
      }
    }
  }
  CHECK(mha::compare(a, a, 0.0, 0.0).close);
  CHECK(mha::compare(a, a, 1e300, 1e300).close);
}

TEST_CASE("infinities match only themselves", "[compare]") {
  const NpyArray a = f8({kInf, -kInf, kInf, 1.0, 5.0});
  const NpyArray b = f8({kInf, -kInf, -kInf, kInf, 5.5});
  const Comparison c = mha::compare(a, b, 1e6, 1e6);  // huge tolerances do not help
  CHECK_FALSE(c.close);
  CHECK(c.mismatches == 2);
  CHECK(c.nan_mismatches == 0);
  CHECK(c.worst_index == Index{2});
  CHECK(c.worst_a == kInf);
  CHECK(c.worst_b == -kInf);
  CHECK(c.max_abs_diff == 0.5);  // only the finite pair
  CHECK(c.max_rel_diff == Approx(0.5 / 5.5));

  CHECK(mha::compare(f8({kInf, -kInf}), f8({kInf, -kInf}), 0.0, 0.0).close);
  CHECK_FALSE(mha::compare(f8({1e308}), f8({kInf}), 1.0, 1.0).close);
  CHECK_FALSE(mha::compare(f8({-kInf}), f8({0.0}), 1.0, 1.0).close);
}

TEST_CASE("arrays of different shapes are not close", "[compare]") {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6};
  const Comparison c = mha::compare(f8(v, {2, 3}), f8(v, {3, 2}), 1.0, 1.0);
  CHECK_FALSE(c.same_shape);
  CHECK_FALSE(c.close);
  CHECK(c.count == 0);
  CHECK(c.mismatches == 0);
  CHECK(c.worst_index.empty());

  // A 0-d array is not a 1-element 1-d array.
  const Comparison d = mha::compare(f8({1.0}, {}), f8({1.0}, {1}), 0.0, 0.0);
  CHECK_FALSE(d.same_shape);
  CHECK_FALSE(d.close);
  CHECK_FALSE(mha::compare(f8({}, {0}), f8({}, {0, 1}), 0.0, 0.0).same_shape);
}

TEST_CASE("worst_index unravels a 3-D index and ranks by excess", "[compare]") {
  const Shape shape = {2, 3, 4};
  std::vector<double> a(24, 1.0), b(24, 1.0);
  // rtol = 0.1, atol = 0:
  //   (0, 1, 1): b = 100, a = 105 -> |a - b| = 5, excess 5 - 10 = -5 (close)
  //   (1, 0, 2): b = 1,   a = 2   -> |a - b| = 1, excess 1 - 0.1 = 0.9
  //   (1, 2, 3): b = 1,   a = 1.5 -> |a - b| = 0.5, excess 0.4
  b[0 * 12 + 1 * 4 + 1] = 100.0;
  a[0 * 12 + 1 * 4 + 1] = 105.0;
  a[1 * 12 + 0 * 4 + 2] = 2.0;
  a[1 * 12 + 2 * 4 + 3] = 1.5;
  const Comparison c = mha::compare(f8(a, shape), f8(b, shape), 0.1, 0.0);
  CHECK_FALSE(c.close);
  CHECK(c.count == 24);
  CHECK(c.mismatches == 2);
  CHECK(c.worst_index == Index{1, 0, 2});
  CHECK(c.worst_a == 2.0);
  CHECK(c.worst_b == 1.0);
  CHECK(c.max_abs_diff == 5.0);  // the largest difference need not be the worst
  CHECK(c.max_rel_diff == 1.0);

  SECTION("when all are close, worst is still the largest excess") {
    // rtol = 1: excesses are 5 - 100, 1 - 1 = 0 (close: <=), 0.5 - 1 and 0 - 1 elsewhere.
    const Comparison d = mha::compare(f8(a, shape), f8(b, shape), 1.0, 0.0);
    CHECK(d.close);
    CHECK(d.mismatches == 0);
    CHECK(d.worst_index == Index{1, 0, 2});
  }
  SECTION("ties keep the first") {
    std::vector<double> x(24, 0.0);
    x[5] = 1.0;
    x[17] = 1.0;
    const Comparison d = mha::compare(f8(x, shape), f8(std::vector<double>(24, 0.0), shape), 0, 0);
    CHECK(d.mismatches == 2);
    CHECK(d.worst_index == Index{0, 1, 1});
  }
  SECTION("0-d arrays have an empty index") {
    const Comparison d = mha::compare(f8({3.0}, {}), f8({2.0}, {}), 0.0, 0.0);
    CHECK(d.count == 1);
    CHECK(d.mismatches == 1);
    CHECK(d.worst_index.empty());
    CHECK(d.worst_a == 3.0);
  }
}

TEST_CASE("max_rel_diff is |a - b| / |b| over finite b != 0", "[compare]") {
  const NpyArray a = f8({1.5, 3.0, 7.0, -3.0, kNaN});
  const NpyArray b = f8({1.0, 4.0, 0.0, -2.0, 1.0});
  const Comparison c = mha::compare(a, b, 0.0, 0.0);
  CHECK(c.max_abs_diff == 7.0);  // from b = 0, which has no relative difference
  CHECK(c.max_rel_diff == 0.5);  // 0.5 / 1 and 1 / |-2|
  CHECK(c.mismatches == 5);
  CHECK(c.nan_mismatches == 1);
}

TEST_CASE("float16, float32 and float64 compare by value", "[compare]") {
  // float16 bits: 1.0 = 0x3c00, 0.5 = 0x3800, -2.0 = 0xc000, inf = 0x7c00, NaN = 0x7e00.
  const NpyArray h = f2({0x3c00, 0x3800, 0xc000, 0x7c00, 0x7e00});
  const NpyArray s = f4({1.0f, 0.5f, -2.0f, std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()});
  const NpyArray d = f8({1.0, 0.5, -2.0, kInf, kNaN});
  for (const NpyArray* x : {&h, &s, &d})
    for (const NpyArray* y : {&h, &s, &d}) {
      const Comparison c = mha::compare(*x, *y, mha::AllClose{0.0, 0.0, true});
      CHECK(c.close);
      CHECK(c.nan_a == 1);
      CHECK(c.nan_b == 1);
    }

  SECTION("float32 rounding is visible against float64") {
    const NpyArray a = f4({0.1f});
    const NpyArray b = f8({0.1});
    const Comparison c = mha::compare(a, b, 0.0, 0.0);
    CHECK_FALSE(c.close);
    CHECK(c.max_abs_diff == std::fabs(static_cast<double>(0.1f) - 0.1));
    CHECK(mha::compare(a, b, 0.0, 1e-8).close);
    CHECK(mha::compare(a, b, 1e-7, 0.0).close);
  }
  SECTION("float16 rounding") {
    // 0x2e66 is the float16 nearest 0.1 (0.0999755859375).
    const NpyArray a = f2({0x2e66});
    const Comparison c = mha::compare(a, f8({0.1}), 0.0, 0.0);
    CHECK_FALSE(c.close);
    CHECK(c.worst_a == 0.0999755859375);
    CHECK(mha::compare(a, f8({0.1}), 1e-3, 0.0).close);
  }
}

TEST_CASE("bool and integer arrays compare as numbers", "[compare]") {
  SECTION("bool") {
    const NpyArray t = b1({1, 0, 1});
    CHECK(mha::compare(t, t, 0.0, 0.0).close);
    const Comparison c = mha::compare(b1({1, 0, 1}), b1({1, 1, 1}), 0.0, 0.0);
    CHECK_FALSE(c.close);
    CHECK(c.mismatches == 1);
    CHECK(c.worst_index == Index{1});
    CHECK(c.worst_a == 0.0);
    CHECK(c.worst_b == 1.0);
    CHECK(c.max_abs_diff == 1.0);
    CHECK(mha::compare(b1({1, 0, 1}), b1({1, 1, 1}), 0.0, 1.0).close);
  }
  SECTION("int32 and int64") {
    const Comparison c = mha::compare(i4({1, -2, 3, 40}), i8({1, -2, 4, 40}), 0.0, 0.0);
    CHECK(c.count == 4);
    CHECK(c.mismatches == 1);
    CHECK(c.worst_index == Index{2});
    CHECK(c.worst_a == 3.0);
    CHECK(c.worst_b == 4.0);
    CHECK(c.max_abs_diff == 1.0);
    CHECK(c.max_rel_diff == 0.25);
    CHECK(mha::compare(i4({-7, 0, 123456789}), i8({-7, 0, 123456789}), 0.0, 0.0).close);
    CHECK(mha::compare(i8({INT64_C(1) << 40}), i8({(INT64_C(1) << 40) + 1}), 1e-12, 0.0).close);
    CHECK_FALSE(mha::compare(i8({INT64_C(1) << 40}), i8({(INT64_C(1) << 40) + 1}), 0.0, 0.0).close);
  }
  SECTION("bool against int and float") {
    CHECK(mha::compare(b1({1, 0}), i4({1, 0}), 0.0, 0.0).close);
    CHECK(mha::compare(i4({1, 0}), f8({1.0, 0.0}), 0.0, 0.0).close);
    CHECK_FALSE(mha::compare(b1({1, 0}), f4({1.0f, 0.5f}), 0.0, 0.0).close);
  }
  SECTION("other integer widths") {
    NpyArray u = i4({0});
    u.dtype = DType::u2;  // 4 bytes = two uint16
    u.shape = {2};
    const std::uint16_t vals[2] = {65535, 7};
    std::memcpy(u.data.data(), vals, 4);
    CHECK(mha::compare(u, i4({65535, 7}), 0.0, 0.0).close);
  }
}

TEST_CASE("empty arrays are close", "[compare]") {
  for (const Shape& shape : {Shape{0}, Shape{2, 0, 3}}) {
    const Comparison c = mha::compare(f8({}, shape), f8({}, shape), 0.0, 0.0);
    CHECK(c.same_shape);
    CHECK(c.close);
    CHECK(c.count == 0);
    CHECK(c.mismatches == 0);
    CHECK(c.worst_index.empty());
  }
  CHECK(mha::compare(i4({}), f4({}), 0.0, 0.0).close);
}

TEST_CASE("compare refuses unsupported dtypes and names the array", "[compare]") {
  NpyArray bad = f8({1.0});
  bad.dtype = static_cast<DType>(99);
  try {
    mha::compare(f8({1.0}), bad, 0.0, 0.0, "expected.npy", "actual.npy");
    FAIL("no exception");
  } catch (const mha::Error& e) {
    CHECK(e.kind() == mha::ErrorKind::invalid_input);
    CHECK(std::string(e.what()).find("actual.npy") != std::string::npos);
  }
}

TEST_CASE("large arrays: counts and worst_index span every element", "[compare]") {
  const Shape shape = {3, 5000};
  std::vector<float> a(15000, 1.0f), b(15000, 1.0f);
  a[4095] = 2.0f;   // last of the first chunk
  a[4096] = 3.0f;   // first of the second
  a[12345] = 5.0f;  // the worst, well past the first chunk
  b[14999] = std::numeric_limits<float>::quiet_NaN();
  const Comparison c =
      mha::compare(NpyArray::of(a.data(), shape), NpyArray::of(b.data(), shape), 0.0, 0.5);
  CHECK(c.count == 15000);
  CHECK(c.mismatches == 4);
  CHECK(c.nan_b == 1);
  CHECK(c.nan_mismatches == 1);
  CHECK(c.worst_index == Index{2, 4999});  // NaN mismatch: infinite excess
  CHECK(c.max_abs_diff == 4.0);

  b[14999] = 1.0f;
  const Comparison d =
      mha::compare(NpyArray::of(a.data(), shape), NpyArray::of(b.data(), shape), 0.0, 0.5);
  CHECK(d.mismatches == 3);
  CHECK(d.worst_index == Index{2, 2345});
  CHECK(d.worst_a == 5.0);
}
