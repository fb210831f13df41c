// mha inspect's library: header info as written (versions, byte orders,
// memory orders, dtypes) with read_npy's checks and messages; value
// statistics against hand-computed values, whatever the chunk size and
// layout; attention statistics of small maps against hand-computed numbers;
// the attention detection rules, axis conventions and .npz members.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/inspect/inspect.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/npz.hpp"
#include "test_util.hpp"

using mha::DType;
using mha::HeadStats;
using mha::InspectOptions;
using mha::InspectResult;
using mha::NpyArray;
using namespace mha::test;  // test_util.hpp

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

InspectOptions with_chunk(std::size_t bytes) {
  InspectOptions o;
  o.chunk_bytes = bytes;
  return o;
}

// |got - want| <= 1e-12 (1 + |want|); NaN where want is NaN.
bool close(double got, double want) {
  return std::isnan(want) ? std::isnan(got) : std::abs(got - want) <= 1e-12 * (1 + std::abs(want));
}

void check_head(const HeadStats& h, double entropy, double fraction, double max_weight,
                double distance, double diagonal, double first_key, bool causal,
                std::uint64_t rows) {
  INFO(h.to_json().dump());
  CHECK(close(h.entropy, entropy));
  CHECK(close(h.entropy_fraction, fraction));
  CHECK(close(h.max_weight, max_weight));
  CHECK(close(h.distance, distance));
  CHECK(close(h.diagonal, diagonal));
  CHECK(close(h.first_key, first_key));
  CHECK(h.causal == causal);
  CHECK(h.rows == rows);
}

// The three hand-computed maps of 3 queries over 3 keys, row-major.
const std::vector<double> kDiagonal = {1, 0, 0, 0, 1, 0, 0, 0, 1};
const std::vector<double> kUniform(9, 1.0 / 3);
const std::vector<double> kCausal = {1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3};

// Their statistics, worked out by hand for T = S = 3:
// one-hot diagonal: no entropy, weight 1 at distance 0 on the diagonal; only
// row 0's first key is its diagonal, so first_key = 1/3.
void check_diagonal(const HeadStats& h, std::uint64_t rows) {
  check_head(h, 0, 0, 1, 0, 1, 1.0 / 3, true, rows);
}
// uniform: entropy log 3 (fraction 1), max 1/3; distances of rows 0, 1, 2 are
// (0+1+2)/3, (1+0+1)/3, (2+1+0)/3, mean 8/9; 1/3 on the diagonal and key 0.
void check_uniform(const HeadStats& h, std::uint64_t rows) {
  check_head(h, std::log(3.0), 1, 1.0 / 3, 8.0 / 9, 1.0 / 3, 1.0 / 3, false, rows);
}
// causal, row t uniform over keys 0..t: entropies 0, log 2, log 3; max,
// diagonal and first key are all 1, 1/2, 1/3 (mean 11/18); distances 0,
// 1/2, 1 (mean 1/2); nothing above the diagonal.
void check_causal(const HeadStats& h, std::uint64_t rows) {
  const double entropy = (std::log(2.0) + std::log(3.0)) / 3;
  check_head(h, entropy, entropy / std::log(3.0), 11.0 / 18, 0.5, 11.0 / 18, 11.0 / 18, true, rows);
}

std::vector<double> concat(std::initializer_list<const std::vector<double>*> parts) {
  std::vector<double> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

}  // namespace

TEST_CASE("inspect: header info of every version, byte order, memory order and dtype",
          "[inspect]") {
  TempDir dir("inspect_header");
  struct Case {
    std::string descr, shape;
    bool fortran;
    int major;
    std::string data;
    DType dtype;
    bool big_endian;
    std::vector<std::size_t> dims;
  };
  const std::vector<Case> cases = {
      {"<f4", "(2, 3)", false, 1, bytes_of(std::vector<float>(6, 1.f)), DType::f4, false, {2, 3}},
      {">f4",
       "(2, 3)",
       false,
       2,
       bytes_of(std::vector<float>(6, 1.f), true),
       DType::f4,
       true,
       {2, 3}},
      {"<f8", "(3,)", false, 3, bytes_of(std::vector<double>(3, 1.)), DType::f8, false, {3}},
      {">f8",
       "(2, 3)",
       true,
       1,
       bytes_of(std::vector<double>(6, 1.), true),
       DType::f8,
       true,
       {2, 3}},
      {"<f2",
       "(2, 2)",
       true,
       1,
       bytes_of(std::vector<std::uint16_t>(4, 0x3c00)),
       DType::f2,
       false,
       {2, 2}},
      {"|b1", "(4,)", false, 1, std::string(4, '\1'), DType::b1, false, {4}},
      {"<i8", "()", false, 1, bytes_of(std::vector<std::int64_t>{7}), DType::i8, false, {}},
      {">i2", "(0, 5)", false, 2, "", DType::i2, true, {0, 5}},
      {"|u1", "(3,)", false, 1, "abc", DType::u1, false, {3}},
  };
  for (const auto& c : cases) {
    SECTION(c.descr + " " + c.shape + (c.fortran ? " F" : " C") + " v" + std::to_string(c.major)) {
      const std::string d = dict(c.descr, c.shape, c.fortran);
      const std::string bytes = raw_npy(d, c.data, c.major);
      const std::string path = dir.write("h.npy", bytes);
      const mha::NpyHeaderInfo h = mha::read_npy_header(path);
      CHECK(h.major == c.major);
      CHECK(h.minor == 0);
      CHECK(h.descr == c.descr);
      CHECK(h.dtype == c.dtype);
      CHECK(h.big_endian == c.big_endian);
      CHECK(h.fortran_order == c.fortran);
      CHECK(h.shape == c.dims);
      CHECK(h.header_bytes == (c.major == 1 ? 10u : 12u) + d.size());
      CHECK(h.data_bytes == c.data.size());
      CHECK(h.size() * mha::itemsize(h.dtype) == h.data_bytes);
      // From bytes (an .npz member) the same.
      const mha::NpyHeaderInfo from_bytes = mha::parse_npy_header(bytes, path);
      CHECK(from_bytes.descr == h.descr);
      CHECK(from_bytes.shape == h.shape);
      CHECK(from_bytes.header_bytes == h.header_bytes);
      // The JSON spelling.
      const nlohmann::json j = mha::header_json(h);
      CHECK(j["version"] == std::to_string(c.major) + ".0");
      CHECK(j["descr"] == c.descr);
      CHECK(j["dtype"] == mha::dtype_name(c.dtype));
      CHECK(j["byte_order"] == (mha::itemsize(c.dtype) == 1 ? "none"
                                : c.big_endian              ? "big"
                                                            : "little"));
      CHECK(j["fortran_order"] == c.fortran);
      CHECK(j["shape"] == nlohmann::json(c.dims));
      CHECK(j["data_bytes"] == c.data.size());
    }
  }
  SECTION("a file NumPy's padding would write: data 64-byte aligned") {
    std::vector<float> v(6, 0.5f);
    const std::string path = dir.write_npy(NpyArray::of(v.data(), {2, 3}));
    const mha::NpyHeaderInfo h = mha::read_npy_header(path);
    CHECK(h.header_bytes == 128);
    CHECK(h.data_bytes == 24);
    CHECK(h.descr == "<f4");
  }
}

TEST_CASE("inspect: header errors are read_npy's, without reading the data", "[inspect]") {
  TempDir dir("inspect_header_errors");
  const std::vector<std::string> files = {
      raw_npy(dict("<f4", "(2, 3)"), std::string(20, '\0')),               // truncated data
      raw_npy(dict("<f4", "(2, 3)"), std::string(28, '\0')),               // extra data
      raw_npy(dict("<c8", "(2,)"), std::string(16, '\0')),                 // complex
      raw_npy("{'descr': '<f4', 'shape': (2,), }", std::string(8, '\0')),  // missing key
      std::string("\x93NUMPY\x04\x00", 8),                                 // version 4.0
      "not a npy file at all",
      "",
  };
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string path = dir.write("bad" + std::to_string(i) + ".npy", files[i]);
    std::string expected;
    try {
      mha::read_npy(path);
    } catch (const mha::Error& e) {
      expected = e.what();
    }
    INFO(files[i]);
    REQUIRE(!expected.empty());
    REQUIRE_INPUT_ERROR(mha::read_npy_header(path), Catch::Equals(expected));
    REQUIRE_INPUT_ERROR(mha::inspect_npy(path, {}), Catch::Equals(expected));
    REQUIRE_INPUT_ERROR(mha::parse_npy_header(files[i], path),
                        Catch::Equals(expected));  // parse_npy says the same
  }
  require_invalid([&] { mha::inspect_npy(dir / "missing.npy", {}); }, "missing.npy: cannot open");
  require_invalid([&] { mha::inspect_file(dir / "missing.npz", {}); }, "missing.npz: no such file");
}

TEST_CASE("inspect: value statistics against hand-computed values", "[inspect]") {
  TempDir dir("inspect_stats");
  // Finite values 0, 1, 2, 3, 4: mean 2, variance (4+1+0+1+4)/5 = 2.
  const std::vector<double> v = {1, kNaN, 2, kInf, 3, -kInf, 4, 0, kNaN};
  const std::string path = dir.write_npy(NpyArray::of(v.data(), {3, 3}));
  for (std::size_t chunk :
       {std::size_t{4} << 20, std::size_t{8}, std::size_t{24}, std::size_t{1}}) {
    SECTION("chunks of " + std::to_string(chunk) + " bytes") {
      InspectOptions o = with_chunk(chunk);
      o.attention = InspectOptions::Attention::off;
      const InspectResult r = mha::inspect_npy(path, o);
      const mha::TensorStats& s = r.stats;
      CHECK(s.count == 9);
      CHECK(s.finite == 5);
      CHECK(s.nan == 2);
      CHECK(s.posinf == 1);
      CHECK(s.neginf == 1);
      CHECK(s.zeros == 1);
      CHECK(s.min == 0.0);
      CHECK(s.max == 4.0);
      CHECK(s.mean == 2.0);
      CHECK(s.std == Approx(std::sqrt(2.0)).epsilon(1e-15));
      CHECK(!r.attention);
      const nlohmann::json j = r.to_json();
      CHECK(j["stats"]["nan"] == 2);
      CHECK(j["stats"]["min"] == 0.0);
      CHECK(!j.contains("attention"));
      CHECK(j["file"] == path);
    }
  }
  SECTION("the same values as float16, big-endian float32 and Fortran-order float64") {
    // 0.5, -1.5, 2, NaN, +Inf (float16 bits below). Finite mean 1/3, variance
    // ((0.5 - 1/3)^2 + (-1.5 - 1/3)^2 + (2 - 1/3)^2) / 3 = (1 + 121 + 100) / 36 / 3.
    const std::vector<std::uint16_t> half = {0x3800, 0xbe00, 0x4000, 0x7e00, 0x7c00};
    const std::vector<float> f = {0.5f, -1.5f, 2.f, NAN, INFINITY};
    const std::vector<std::string> files = {
        dir.write("h.npy", raw_npy(dict("<f2", "(5,)"), bytes_of(half))),
        dir.write("be.npy", raw_npy(dict(">f4", "(5,)"), bytes_of(f, true))),
        dir.write("f.npy", raw_npy(dict("<f8", "(5, 1)", true),
                                   bytes_of(std::vector<double>(f.begin(), f.end())))),
    };
    for (const auto& p : files) {
      INFO(p);
      const mha::TensorStats s = mha::inspect_npy(p, with_chunk(4)).stats;
      CHECK(s.count == 5);
      CHECK(s.finite == 3);
      CHECK(s.nan == 1);
      CHECK(s.posinf == 1);
      CHECK(s.min == -1.5);
      CHECK(s.max == 2.0);
      CHECK(s.mean == Approx(1.0 / 3).epsilon(1e-15));
      CHECK(s.std == Approx(std::sqrt(222.0 / 36 / 3)).epsilon(1e-15));
    }
  }
  SECTION("Fortran order of a 2-d array: the values, read whole") {
    // [[1, 2, 3], [4, 5, 6]] stored column by column.
    const std::string p = dir.write(
        "f2d.npy",
        raw_npy(dict("<f8", "(2, 3)", true), bytes_of(std::vector<double>{1, 4, 2, 5, 3, 6})));
    const InspectResult r = mha::inspect_npy(p, with_chunk(8));
    CHECK(r.header.fortran_order);
    CHECK(r.stats.mean == 3.5);
    CHECK(r.stats.min == 1.0);
    CHECK(r.stats.max == 6.0);
  }
  SECTION("integers keep exact min and max; bools count as 0 and 1") {
    const std::vector<std::int64_t> big = {(std::int64_t{1} << 62) + 1, -3, 0};
    const mha::TensorStats s =
        mha::inspect_npy(dir.write_npy(NpyArray::of(big.data(), {3})), {}).stats;
    CHECK(s.min.get<std::int64_t>() == -3);
    CHECK(s.max.get<std::int64_t>() == (std::int64_t{1} << 62) + 1);
    CHECK(s.zeros == 1);
    CHECK(s.nan == 0);
    const std::string u8 = raw_npy(
        dict("<u8", "(2,)"), bytes_of(std::vector<std::uint64_t>{~std::uint64_t{0}, 5}, false));
    const mha::TensorStats su = mha::inspect_npy(dir.write("u8.npy", u8), {}).stats;
    CHECK(su.max.get<std::uint64_t>() == ~std::uint64_t{0});
    CHECK(su.min.get<std::uint64_t>() == 5);
    // Any non-zero byte is true: 3 of 4 true, mean 0.75, std sqrt(0.75 * 0.25).
    const std::string b = raw_npy(dict("|b1", "(2, 2)"), std::string("\x01\x00\x02\xff", 4));
    const InspectResult rb = mha::inspect_npy(dir.write("b.npy", b), {});
    CHECK(rb.stats.min == 0);
    CHECK(rb.stats.max == 1);
    CHECK(rb.stats.zeros == 1);
    CHECK(rb.stats.mean == 0.75);
    CHECK(rb.stats.std == Approx(std::sqrt(0.75 * 0.25)).epsilon(1e-15));
    CHECK(!rb.attention);  // never for bools or integers
    CHECK(rb.to_json()["stats"]["max"].is_number_integer());
  }
  SECTION("no finite value: min, max, mean and std are null") {
    const std::vector<double> nan = {kNaN, kNaN};
    const InspectResult r = mha::inspect_npy(dir.write_npy(NpyArray::of(nan.data(), {2})), {});
    CHECK(r.stats.nan == 2);
    CHECK(std::isnan(r.stats.mean));
    const nlohmann::json j = r.to_json()["stats"];
    CHECK(j["min"].is_null());
    CHECK(j["mean"].is_null());
    CHECK(j["std"].is_null());
    const std::vector<double> none;
    const InspectResult e = mha::inspect_npy(dir.write_npy(NpyArray::of(none.data(), {0, 4})), {});
    CHECK(e.stats.count == 0);
    CHECK(!e.attention);
    // S = 0 (rows of no keys), and a batch axis of 0, forced to be attention too.
    InspectOptions on;
    on.attention = InspectOptions::Attention::on;
    for (const std::vector<std::size_t>& shape :
         {std::vector<std::size_t>{4, 0}, std::vector<std::size_t>{0, 2, 3, 3}}) {
      const std::string p = dir.write_npy(NpyArray::of(none.data(), shape));
      CHECK(!mha::inspect_npy(p, {}).attention);
      const InspectResult f = mha::inspect_npy(p, on);
      REQUIRE(f.attention);
      CHECK(f.attention->stats->mean().rows == 0);
      CHECK(f.to_json()["attention"]["mean"]["entropy"].is_null());
    }
  }
  SECTION("pairwise sums: a constant plus small noise keeps its std") {
    // 1e8 + 0.25 * (+-1): a naive sum of squares loses the 0.25; two passes do not.
    std::vector<double> x(1 << 16);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1e8 + (i % 2 ? 0.25 : -0.25);
    const std::string p = dir.write_npy(NpyArray::of(x.data(), {x.size()}));
    for (std::size_t chunk : {std::size_t{4} << 20, std::size_t{1000}}) {
      const mha::TensorStats s = mha::inspect_npy(p, with_chunk(chunk)).stats;
      CHECK(s.mean == Approx(1e8).epsilon(1e-15));
      CHECK(s.std == Approx(0.25).epsilon(1e-12));
    }
  }
}

TEST_CASE("inspect: attention statistics of hand-computed maps", "[inspect]") {
  TempDir dir("inspect_attention");
  SECTION("(B, h, T, S): heads on axis 1, each a batch of two maps") {
    // Batch 0: heads diagonal, uniform, causal; batch 1 the same.
    const std::vector<double> a =
        concat({&kDiagonal, &kUniform, &kCausal, &kDiagonal, &kUniform, &kCausal});
    const std::string p = dir.write_npy(NpyArray::of(a.data(), {2, 3, 3, 3}));
    for (std::size_t chunk : {std::size_t{4} << 20, std::size_t{1}, std::size_t{48}}) {
      INFO("chunk " << chunk);
      const InspectResult r = mha::inspect_npy(p, with_chunk(chunk));
      REQUIRE(r.attention);
      const mha::AttentionInfo& info = *r.attention;
      CHECK(info.detected_by == "rows");
      CHECK(info.layout == "(B, h, T, S)");
      CHECK(info.heads_axis == std::optional<std::size_t>(1));
      CHECK(info.distribution_rows == 18);
      REQUIRE(info.stats->heads() == 3);
      check_diagonal(info.stats->head(0), 6);
      check_uniform(info.stats->head(1), 6);
      check_causal(info.stats->head(2), 6);
      CHECK(info.stats->mean().causal == false);
      const nlohmann::json j = r.to_json()["attention"];
      CHECK(j["layout"] == "(B, h, T, S)");
      CHECK(j["heads"].size() == 3);
      CHECK(j["heads"][1]["entropy_fraction"] == Approx(1.0));
      CHECK(j["mean"]["rows"] == 18);
    }
  }
  SECTION("float32 maps give the numbers AttentionStats gives for float rows") {
    const std::vector<double> a = concat({&kUniform, &kCausal});
    std::vector<float> f(a.begin(), a.end());
    const std::string p = dir.write_npy(NpyArray::of(f.data(), {1, 2, 3, 3}));
    const InspectResult r = mha::inspect_npy(p, {});
    REQUIRE(r.attention);
    mha::AttentionStats direct(2, 3, 3);
    direct.add_rows(0, 0, 3, f.data());
    direct.add_rows(1, 0, 3, f.data() + 9);
    CHECK(r.attention->stats->to_json() == direct.to_json());
  }
  SECTION("(T, S) and (B, T, S): one head, 'all'") {
    const std::string p2 = dir.write_npy(NpyArray::of(kCausal.data(), {3, 3}));
    const InspectResult r2 = mha::inspect_npy(p2, {});
    REQUIRE(r2.attention);
    CHECK(r2.attention->layout == "(T, S)");
    CHECK(!r2.attention->heads_axis);
    check_causal(r2.attention->stats->head(0), 3);
    const std::vector<double> a = concat({&kUniform, &kUniform});
    const InspectResult r3 = mha::inspect_npy(dir.write_npy(NpyArray::of(a.data(), {2, 3, 3})), {});
    REQUIRE(r3.attention);
    CHECK(r3.attention->layout == "(B, T, S)");
    REQUIRE(r3.attention->stats->heads() == 1);
    check_uniform(r3.attention->stats->head(0), 6);
  }
  SECTION("rank 5 has no heads unless heads_axis names one") {
    // (2, 2, 1, 3, 3): axis 1 is diagonal / uniform.
    const std::vector<double> a = concat({&kDiagonal, &kUniform, &kDiagonal, &kUniform});
    const std::string p = dir.write_npy(NpyArray::of(a.data(), {2, 2, 1, 3, 3}));
    const InspectResult none = mha::inspect_npy(p, {});
    REQUIRE(none.attention);
    CHECK(none.attention->layout == "(B0, B1, B2, T, S)");
    CHECK(none.attention->stats->heads() == 1);
    for (long axis : {1L, -4L}) {
      InspectOptions o;
      o.heads_axis = axis;
      const InspectResult r = mha::inspect_npy(p, o);
      REQUIRE(r.attention);
      CHECK(r.attention->layout == "(B0, h, B1, T, S)");
      REQUIRE(r.attention->stats->heads() == 2);
      check_diagonal(r.attention->stats->head(0), 6);
      check_uniform(r.attention->stats->head(1), 6);
    }
    // Axis 0 of (2, 2, 1, 3, 3): heads (diagonal+uniform) per batch entry: both alike.
    InspectOptions o0;
    o0.heads_axis = 0;
    const InspectResult r0 = mha::inspect_npy(p, o0);
    CHECK(r0.attention->layout == "(h, B0, B1, T, S)");
    CHECK(r0.attention->stats->head(0).to_json() == r0.attention->stats->head(1).to_json());
    // A (B, h, T, S) file read as (h, B, T, S) swaps the roles.
    const std::vector<double> b = concat({&kDiagonal, &kUniform, &kDiagonal, &kUniform});
    const std::string p4 = dir.write_npy(NpyArray::of(b.data(), {2, 2, 3, 3}));
    const InspectResult r4 = mha::inspect_npy(p4, o0);
    CHECK(r4.attention->layout == "(h, B, T, S)");
    check_diagonal(mha::inspect_npy(p4, {}).attention->stats->head(0), 6);
    CHECK(r4.attention->stats->head(0).rows == 6);  // a diagonal and a uniform map
    CHECK(r4.attention->stats->head(0).to_json() == r4.attention->stats->head(1).to_json());
  }
  SECTION("more heads than an attention array may have") {
    // An empty array may claim any shape; a header alone must not allocate per-head sums.
    const std::vector<double> none;
    const std::string p = dir.write_npy(NpyArray::of(none.data(), {1, 100000, 0, 3}));
    CHECK(!mha::inspect_npy(p, {}).attention);
    InspectOptions on;
    on.attention = InspectOptions::Attention::on;
    require_invalid([&] { mha::inspect_npy(p, on); },
                    "100000 heads on axis 1 of the float64 array of shape (1, 100000, 0, 3) are "
                    "too many to inspect as attention (at most 65536");
    on.heads_axis = 0;  // (h, B, T, S): one head
    CHECK(mha::inspect_npy(p, on).attention->stats->heads() == 1);
  }
  SECTION("heads_axis that is not a leading axis") {
    const std::string p = dir.write_npy(NpyArray::of(kUniform.data(), {3, 3}));
    InspectOptions o;
    o.heads_axis = 0;
    // Detected: not attention in that layout, so only value statistics.
    CHECK(!mha::inspect_npy(p, o).attention);
    o.attention = InspectOptions::Attention::on;
    require_invalid([&] { mha::inspect_npy(p, o); }, "heads axis 0 is not a leading axis");
    const std::vector<double> a = concat({&kUniform, &kUniform});
    const std::string p4 = dir.write_npy(NpyArray::of(a.data(), {2, 1, 3, 3}));
    o.heads_axis = 2;
    require_invalid([&] { mha::inspect_npy(p4, o); }, "(expected 0..1, or -4..-3 from the end)");
  }
}

TEST_CASE("inspect: attention detection rules", "[inspect]") {
  TempDir dir("inspect_detect");
  std::vector<std::string> warnings;
  const mha::Warn warn = [&](const std::string& w) { warnings.push_back(w); };
  SECTION("a tensor whose rows are not distributions is not attention") {
    const std::vector<double> a = {0.2, 0.9, 0.1, 0.5, 0.5, 0.0};  // row 0 sums to 1.2
    const InspectResult r = mha::inspect_npy(dir.write_npy(NpyArray::of(a.data(), {2, 3})), {});
    CHECK(!r.attention);
    // Sums to 1 but leaves [0, 1].
    const std::vector<double> b = {1.5, -0.5, 0.0};
    CHECK(!mha::inspect_npy(dir.write_npy(NpyArray::of(b.data(), {1, 3})), {}).attention);
    // Within 1e-6 of [0, 1] and 1e-3 of a sum of 1: still a distribution.
    const std::vector<double> c = {1 + 5e-7, -5e-7, 0.0005};
    CHECK(mha::inspect_npy(dir.write_npy(NpyArray::of(c.data(), {1, 3})), {}).attention);
  }
  SECTION("fully masked rows, all zero or all NaN, do not prevent detection") {
    const std::vector<double> a = {0, 0, 0, kNaN, kNaN, kNaN, 0.25, 0.25, 0.5};
    const InspectResult r = mha::inspect_npy(dir.write_npy(NpyArray::of(a.data(), {1, 3, 3})), {});
    REQUIRE(r.attention);
    CHECK(r.attention->masked_rows == 2);
    CHECK(r.attention->distribution_rows == 1);
    const HeadStats h = r.attention->stats->head(0);
    CHECK(h.rows == 1);
    CHECK(h.skipped_rows == 2);
    CHECK(r.stats.nan == 3);
    CHECK(r.stats.zeros == 3);
    // Masked rows alone are not enough: an all-zero tensor is not attention.
    const std::vector<double> z(9, 0.0);
    CHECK(!mha::inspect_npy(dir.write_npy(NpyArray::of(z.data(), {3, 3})), {}).attention);
  }
  SECTION("a 1-d distribution, integers and bools are never attention") {
    const std::vector<double> a = {0.5, 0.5};
    CHECK(!mha::inspect_npy(dir.write_npy(NpyArray::of(a.data(), {2})), {}).attention);
    const std::vector<std::int32_t> i = {1, 0, 0, 1};
    CHECK(!mha::inspect_npy(dir.write_npy(NpyArray::of(i.data(), {2, 2})), {}).attention);
    InspectOptions on;
    on.attention = InspectOptions::Attention::on;
    require_invalid(
        [&] {
          mha::inspect_npy(dir.write_npy(NpyArray::of(i.data(), {2, 2})), on);
        },
        "cannot inspect the int32 array of shape (2, 2) as attention");
  }
  SECTION("named attention.npy: computed even when rows are not distributions, with a warning") {
    const std::vector<double> a = {0.2, 0.9, 0.1, 0.25, 0.25, 0.5};
    const std::string p =
        dir.write("attention.npy", mha::encode_npy(NpyArray::of(a.data(), {2, 3})));
    const InspectResult r = mha::inspect_npy(p, {}, warn);
    REQUIRE(r.attention);
    CHECK(r.attention->detected_by == "name");
    CHECK(r.attention->other_rows == 1);
    CHECK(r.attention->stats->head(0).rows == 1);
    CHECK(r.attention->stats->head(0).skipped_rows == 1);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains("attention.npy: 1 of 2 rows are not distributions"));
    // --no_attention wins over the name.
    InspectOptions off;
    off.attention = InspectOptions::Attention::off;
    CHECK(!mha::inspect_npy(p, off, warn).attention);
  }
  SECTION("--attention forces it on any float array of rank >= 2") {
    std::vector<double> a(12);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = double(i);
    InspectOptions on;
    on.attention = InspectOptions::Attention::on;
    const InspectResult r =
        mha::inspect_npy(dir.write_npy(NpyArray::of(a.data(), {3, 4})), on, warn);
    REQUIRE(r.attention);
    CHECK(r.attention->detected_by == "forced");
    CHECK(r.attention->other_rows == 3);  // 0 1 2 3, 4 5 6 7, 8 9 10 11
    CHECK(r.attention->masked_rows == 0);
    CHECK(r.attention->stats->head(0).rows == 0);
    CHECK(warnings.size() == 1);
  }
  SECTION("rows that stop being distributions late: detection reads on and then gives up") {
    std::vector<double> a;
    for (int t = 0; t < 100; ++t) a.insert(a.end(), kUniform.begin(), kUniform.begin() + 3);
    a.back() = 2;  // the last row sums to 8/3
    const InspectResult r =
        mha::inspect_npy(dir.write_npy(NpyArray::of(a.data(), {100, 3})), with_chunk(24));
    CHECK(!r.attention);
    CHECK(r.stats.count == 300);
    CHECK(r.stats.max == 2.0);
  }
}

TEST_CASE("inspect: .npz members, big-endian and Fortran-order attention", "[inspect]") {
  TempDir dir("inspect_npz");
  const std::vector<double> a = concat({&kDiagonal, &kCausal});
  const std::vector<std::int64_t> lengths = {3, 2};
  const std::string npz = dir / "maps.npz";
  mha::write_npz(npz, {{"attention", NpyArray::of(a.data(), {1, 2, 3, 3})},
                       {"lengths", NpyArray::of(lengths.data(), {2})}});
  const std::vector<InspectResult> rs = mha::inspect_file(npz, {});
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].file == npz + ":attention");
  REQUIRE(rs[0].attention);
  CHECK(rs[0].attention->detected_by == "name");
  check_diagonal(rs[0].attention->stats->head(0), 3);
  check_causal(rs[0].attention->stats->head(1), 3);
  CHECK(rs[1].file == npz + ":lengths");
  CHECK(rs[1].stats.max.get<std::int64_t>() == 3);
  CHECK(!rs[1].attention);

  // The same maps big-endian, and in Fortran order (axes reversed in memory).
  const std::string be =
      dir.write("be.npy", raw_npy(dict(">f8", "(1, 2, 3, 3)"), bytes_of(a, true)));
  std::vector<double> f(a.size());
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t s = 0; s < 3; ++s) f[s * 6 + t * 2 + h] = a[h * 9 + t * 3 + s];
  const std::string fo =
      dir.write("fo.npy", raw_npy(dict("<f8", "(1, 2, 3, 3)", true), bytes_of(f)));
  for (const auto& p : {be, fo}) {
    INFO(p);
    const InspectResult r = mha::inspect_npy(p, with_chunk(16));
    REQUIRE(r.attention);
    CHECK(r.attention->stats->to_json() == rs[0].attention->stats->to_json());
  }
  // An .npz under another name is recognised by its zip magic.
  const std::string renamed = dir / "maps.bin";
  std::filesystem::copy_file(npz, renamed);
  CHECK(mha::inspect_file(renamed, {}).size() == 2);
}
