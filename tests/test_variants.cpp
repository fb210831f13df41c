// The attention variants' plumbing: config keys and their errors, kv_heads
// resolved from the config or the weights, ALiBi slopes against the paper's
// values, the broadcast bias loaded from .npy, and the window's key range.
// Their numbers are held against the reference in test_kernel.cpp and against
// NumPy in tests/interop/variants_crosscheck.py.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/config/config.hpp"
#include "mha/config/dims.hpp"
#include "mha/config/mask_file.hpp"
#include "mha/io/npy.hpp"
#include "mha/kernel/mask.hpp"
#include "test_util.hpp"

using json = nlohmann::json;
using mha::Config;
using namespace mha::test;  // test_util.hpp

namespace {

Config config_of(const json& j) {
  Config c;
  c.apply(j, "run.json");
  return c;
}

}  // namespace

TEST_CASE("variant keys parse from files and flags", "[variants]") {
  Config c = config_of({{"kv_heads", 2},
                        {"window", 16},
                        {"alibi", true},
                        {"bias", "b.npy"},
                        {"softcap", 30.0},
                        {"attention_axes", {2, 3}},
                        {"output_dtype", "float16"},
                        {"dtype", "bfloat16"}});
  CHECK(*c.kv_heads == 2);
  CHECK(*c.window == 16);
  CHECK(c.alibi);
  CHECK(*c.bias == "b.npy");
  CHECK(*c.softcap == 30.0);
  CHECK(*c.attention_axes == std::vector<std::int64_t>{2, 3});
  CHECK(*c.output_dtype == mha::OutputType::float16);
  CHECK(c.dtype == mha::ComputeType::bfloat16);
  const json j = c.to_json();
  CHECK(j["kv_heads"] == 2);
  CHECK(j["softcap"] == 30.0);
  CHECK(j["output_dtype"] == "float16");
  CHECK(j["dtype"] == "bfloat16");

  Config f;
  f.apply_flag("kv_heads", "4");
  f.apply_flag("alibi", "true");
  f.apply_flag("softcap", "50");
  f.apply_flag("attention_axes", "1,-2");
  CHECK(*f.kv_heads == 4);
  CHECK(f.alibi);
  CHECK(*f.softcap == 50.0);
  CHECK(*f.attention_axes == std::vector<std::int64_t>{1, -2});

  require_invalid([] { config_of({{"kv_heads", 0}}); }, "key 'kv_heads': expected an integer in");
  require_invalid([] { config_of({{"window", -3}}); }, "key 'window'");
  require_invalid([] { config_of({{"softcap", 0}}); }, "expected a finite positive number");
  require_invalid([] { config_of({{"softcap", -1.5}}); }, "expected a finite positive number");
  require_invalid([] { config_of({{"alibi", "yes"}}); }, "key 'alibi': expected true or false");
  require_invalid(
      [] {
        config_of({{"attention_axes", json::array()}});
      },
      "expected a non-empty list of axis indices");
  require_invalid(
      [] {
        config_of({{"output_dtype", "bfloat16"}});
      },
      "expected 'float16', 'float32' or 'float64'");
  require_invalid(
      [] {
        Config x;
        x.apply_flag("attention_axes", "2,");
      },
      "expected comma-separated axis indices");
}

TEST_CASE("kv_heads: from the config, from W_k, and divisibility", "[variants][dims]") {
  mha::FileShapes none;
  Config c = config_of({{"h", 8}, {"d_model", 64}, {"seq_len", 4}});
  CHECK(mha::resolve_dims(c, none).kv() == 8);
  c.kv_heads = 2;
  const mha::Dims d = mha::resolve_dims(c, none);
  CHECK(d.kv() == 2);
  CHECK(d.group() == 4);
  // FLOPs: the K and V projections shrink by h / kv_heads.
  mha::Dims full = d;
  full.kv_heads = 0;
  CHECK(full.flops() - d.flops() == 2 * 4 * (64 * 6 * 8 + 64 * 6 * 8));
  c.kv_heads = 3;
  require_invalid([&] { mha::resolve_dims(c, none); }, "kv_heads = 3 does not divide h = 8");

  // Weights with W_k of (d_model, 2*d_k) columns imply kv_heads = 2.
  mha::FileShapes w;
  w.weights_name = "w.npz";
  w.weights = {{"W_q", {64, 64}}, {"W_k", {64, 16}}, {"W_v", {64, 16}}, {"W_o", {64, 64}}};
  Config from_file = config_of({{"h", 8}, {"seq_len", 4}});
  const mha::Dims g = mha::resolve_dims(from_file, w);
  CHECK(g.kv() == 2);
  CHECK(g.d_k == 8);
  CHECK(g.d_v == 8);  // W_v's 16 columns over 2 key/value heads
  // A width that is no whole number of heads is left to the shape check.
  w.weights["W_k"] = {64, 12};
  CHECK(mha::resolve_dims(from_file, w).kv() == 8);
}

TEST_CASE("ALiBi slopes follow the paper's recipe", "[variants]") {
  // Powers of two: 2^(-8i/h).
  const auto s8 = mha::alibi_slopes(8);
  REQUIRE(s8.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) CHECK(s8[i] == std::exp2(-1.0 * (i + 1)));
  const auto s1 = mha::alibi_slopes(1);
  CHECK(s1 == std::vector<double>{1.0 / 256});
  // h = 6: the 4 slopes of h = 4 (2^-2, 2^-4, 2^-6, 2^-8), then slopes 1 and 3
  // of h = 8 (2^-1, 2^-3).
  const auto s6 = mha::alibi_slopes(6);
  const std::vector<double> want6 = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  CHECK(s6 == want6);
  // h = 12: those of 8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 from h = 16.
  const auto s12 = mha::alibi_slopes(12);
  REQUIRE(s12.size() == 12);
  CHECK(s12[8] == Approx(std::pow(2.0, -0.5)).epsilon(1e-15));
  CHECK(s12[11] == Approx(std::pow(2.0, -3.5)).epsilon(1e-15));
}

TEST_CASE("window: key ranges per query row", "[variants][mask]") {
  mha::Dims d;
  d.B = 1, d.T = 6, d.S = 10, d.h = 1;
  mha::Mask<float> m;
  m.window = 3;
  // No causality: |t - s| < 3.
  CHECK(m.key_begin(d, 0) == 0);
  CHECK(m.key_end(d, 0, 0) == 3);
  CHECK(m.key_begin(d, 5) == 3);
  CHECK(m.key_end(d, 0, 5) == 8);
  // Bottom-right causality aligns t' = t + S - T = t + 4: keys t'-2 .. t'.
  m.causal = mha::Causal::bottom_right;
  CHECK(m.key_begin(d, 0) == 2);
  CHECK(m.key_end(d, 0, 0) == 5);
  CHECK(m.key_begin(d, 5) == 7);
  CHECK(m.key_end(d, 0, 5) == 10);
  // Applied to logits: exactly keys [begin, end) stay finite.
  std::vector<float> row(d.S, 0.f);
  m.apply(d, 0, 0, 2, 3, row.data(), d.S);
  for (std::size_t s = 0; s < d.S; ++s) CHECK(std::isinf(row[s]) == (s < 4 || s > 6));
}

TEST_CASE("bias: NumPy broadcasting to (B, h, T, S) from .npy", "[variants][mask]") {
  TempDir dir("variants_bias");
  mha::Dims d;
  d.B = 2, d.T = 3, d.S = 4, d.h = 2;
  auto load = [&](const std::vector<float>& values, std::vector<std::size_t> shape) {
    Config c;
    c.bias = dir.write_npy(mha::NpyArray::of(values.data(), shape), "bias");
    return mha::load_mask<float>(c, d);
  };
  // (h, 1, S): per head and key.
  std::vector<float> hs(2 * 4);
  for (std::size_t i = 0; i < hs.size(); ++i) hs[i] = static_cast<float>(i);
  const auto m = load(hs, {2, 1, 4});
  std::vector<float> row(4, 0.f);
  m.apply(d, 1, 1, 2, 3, row.data(), 4);  // batch 1, head 1, query 2
  CHECK(row == std::vector<float>{4, 5, 6, 7});
  // (B, h, T, S) in full.
  std::vector<float> full(2 * 2 * 3 * 4);
  for (std::size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
  const auto f = load(full, {2, 2, 3, 4});
  std::fill(row.begin(), row.end(), 0.f);
  f.apply(d, 1, 0, 1, 2, row.data(), 4);  // element ((1*2 + 0)*3 + 1)*4 = 28
  CHECK(row == std::vector<float>{28, 29, 30, 31});
  // A scalar-like (1,) broadcasts everywhere.
  const auto one = load({0.5f}, {1});
  std::fill(row.begin(), row.end(), 0.f);
  one.apply(d, 0, 1, 0, 1, row.data(), 4);
  CHECK(row == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f});

  require_invalid([&] { load(hs, {2, 4, 1}); }, "does not broadcast; expected");
  require_invalid([&] { load(std::vector<float>(5 * 4), {5, 1, 1, 4}); }, "does not broadcast");
  const std::vector<float> bad = {0.f, NAN, 0.f, 0.f};
  require_invalid([&] { load(bad, {4}); }, "expected finite values or -inf");
  Config ints;
  const std::vector<std::int64_t> iv = {1, 2, 3, 4};
  ints.bias = dir.write_npy(mha::NpyArray::of(iv.data(), {4}), "ibias");
  require_invalid([&] { mha::load_mask<float>(ints, d); }, "expected a float array broadcastable");
}
