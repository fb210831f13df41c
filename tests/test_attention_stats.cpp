// AttentionStats: hand-computed values on small maps, skipped rows, blocks
// from many threads, float against double, the fast row pass against a plain
// reference, and the real binary's run.json (attention_stats, output_stats)
// against the files it wrote.
//
// The binary is MHA_BIN_PATH (a compile definition), or $MHA_BIN if set.
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/inspect/attention_stats.hpp"
#include "mha/io/npy.hpp"
#include "test_util.hpp"

#ifndef MHA_BIN_PATH
#error "test_attention_stats.cpp needs MHA_BIN_PATH, the path of the built mha binary"
#endif

using mha::AttentionStats;
using mha::HeadStats;
using namespace mha::test;  // test_util.hpp

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Maps of one head: (T, S) rows, row-major.
using Map = std::vector<std::vector<double>>;

// The plain definitions, row by row, for maps (B, heads, T, S) in C order.
std::vector<HeadStats> reference(const std::vector<double>& a, std::size_t B, std::size_t heads,
                                 std::size_t T, std::size_t S) {
  std::vector<HeadStats> out(heads);
  for (std::size_t i = 0; i < heads; ++i) {
    HeadStats& h = out[i];
    double entropy = 0, max_weight = 0, distance = 0, diagonal = 0, first_key = 0;
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t t = 0; t < T; ++t) {
        const double* row = &a[((b * heads + i) * T + t) * S];
        double sum = 0;
        bool ok = true;
        for (std::size_t s = 0; s < S; ++s) {
          sum += row[s];
          ok = ok && row[s] >= 0;
        }
        if (!ok || !(std::abs(sum - 1) <= 1e-3)) {
          ++h.skipped_rows;
          continue;
        }
        ++h.rows;
        double row_max = 0;
        for (std::size_t s = 0; s < S; ++s) {
          if (row[s] > 0) entropy -= row[s] * std::log(row[s]);
          row_max = std::max(row_max, row[s]);
          distance += row[s] * std::abs(double(t) - double(s));
          if (s > t) h.max_above_diagonal = std::max(h.max_above_diagonal, row[s]);
        }
        max_weight += row_max;
        diagonal += t < S ? row[t] : 0;
        first_key += row[0];
      }
    }
    const double n = h.rows ? double(h.rows) : kNaN;
    h.entropy = entropy / n;
    h.entropy_fraction = S > 1 ? h.entropy / std::log(double(S)) : h.rows ? 0 : kNaN;
    h.max_weight = max_weight / n;
    h.distance = distance / n;
    h.diagonal = diagonal / n;
    h.first_key = first_key / n;
    h.causal = h.max_above_diagonal == 0;
  }
  return out;
}

// |got - want| <= tol (1 + |want|) field by field; NaN where want is NaN.
void check_close(const HeadStats& got, const HeadStats& want, double tol) {
  auto close = [tol](double g, double w) {
    return std::isnan(w) ? std::isnan(g) : std::abs(g - w) <= tol * (1 + std::abs(w));
  };
  INFO("got " << got.to_json().dump() << "\nwant " << want.to_json().dump());
  CHECK(close(got.entropy, want.entropy));
  CHECK(close(got.entropy_fraction, want.entropy_fraction));
  CHECK(close(got.max_weight, want.max_weight));
  CHECK(close(got.distance, want.distance));
  CHECK(close(got.diagonal, want.diagonal));
  CHECK(close(got.first_key, want.first_key));
  CHECK(close(got.max_above_diagonal, want.max_above_diagonal));
  CHECK(got.causal == want.causal);
  CHECK(got.rows == want.rows);
  CHECK(got.skipped_rows == want.skipped_rows);
}

template <class T>
std::vector<T> flatten(const Map& map) {
  std::vector<T> flat;
  for (const auto& row : map)
    for (double x : row) flat.push_back(static_cast<T>(x));
  return flat;
}

// One head's (T, S) map fed as one block.
template <class T = double>
HeadStats stats_of(const Map& map) {
  const std::size_t rows = map.size(), S = map.empty() ? 0 : map[0].size();
  const std::vector<T> flat = flatten<T>(map);
  AttentionStats stats(1, rows, S);
  stats.add_rows(0, 0, rows, flat.data());
  return stats.head(0);
}

// A random (B, heads, T, S) map: softmax of logits of spread `spread`, with
// top-left causal masking when `causal` (row t over s <= t, zero beyond).
std::vector<double> random_maps(std::size_t B, std::size_t heads, std::size_t T, std::size_t S,
                                double spread, bool causal, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-spread, spread);
  std::vector<double> a(B * heads * T * S, 0.0);
  for (std::size_t r = 0; r < B * heads * T; ++r) {
    const std::size_t t = r % T, keys = causal ? std::min(S, t + 1) : S;
    double sum = 0;
    for (std::size_t s = 0; s < keys; ++s) sum += a[r * S + s] = std::exp(u(rng));
    for (std::size_t s = 0; s < keys; ++s) a[r * S + s] /= sum;
  }
  return a;
}

std::vector<double> doubles_of(const mha::NpyArray& a, const std::string& name) {
  std::vector<double> v(a.size());
  mha::convert<double>(a, v.data(), name);
  return v;
}

}  // namespace

TEST_CASE("attention stats: one-hot diagonal map", "[attention_stats]") {
  const Map map = {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}};
  const HeadStats h = stats_of(map);
  CHECK(h.entropy == 0);
  CHECK(h.entropy_fraction == 0);
  CHECK(h.max_weight == 1);
  CHECK(h.distance == 0);
  CHECK(h.diagonal == 1);
  CHECK(h.first_key == 0.25);  // only row 0 attends to key 0
  CHECK(h.max_above_diagonal == 0);
  CHECK(h.causal);
  CHECK(h.rows == 4);
  CHECK(h.skipped_rows == 0);
}

TEST_CASE("attention stats: uniform map", "[attention_stats]") {
  const Map map(4, std::vector<double>(4, 0.25));
  const HeadStats h = stats_of(map);
  CHECK(h.entropy == Approx(std::log(4.0)).epsilon(1e-15));
  CHECK(h.entropy_fraction == Approx(1).epsilon(1e-15));
  CHECK(h.max_weight == 0.25);
  // Row t: sum_s |t - s| / 4 = 6/4, 4/4, 4/4, 6/4 for t = 0..3; mean 20/16.
  CHECK(h.distance == 1.25);
  CHECK(h.diagonal == 0.25);
  CHECK(h.first_key == 0.25);
  CHECK(h.max_above_diagonal == 0.25);
  CHECK_FALSE(h.causal);
  CHECK(h.rows == 4);
}

TEST_CASE("attention stats: causal map", "[attention_stats]") {
  // Row t uniform over s <= t.
  Map map(4, std::vector<double>(4, 0.0));
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t s = 0; s <= t; ++s) map[t][s] = 1.0 / double(t + 1);
  const HeadStats h = stats_of(map);
  // Entropies log 1, log 2, log 3, log 4: mean log(24) / 4.
  CHECK(h.entropy == Approx(std::log(24.0) / 4).epsilon(1e-15));
  CHECK(h.entropy_fraction == Approx(std::log(24.0) / 4 / std::log(4.0)).epsilon(1e-15));
  // max, diagonal and first key are all 1/(t+1): (1 + 1/2 + 1/3 + 1/4) / 4 = 25/48.
  CHECK(h.max_weight == Approx(25.0 / 48).epsilon(1e-15));
  CHECK(h.diagonal == Approx(25.0 / 48).epsilon(1e-15));
  CHECK(h.first_key == Approx(25.0 / 48).epsilon(1e-15));
  // Row t: mean of t - s over s <= t is t/2; mean over t 0.75.
  CHECK(h.distance == Approx(0.75).epsilon(1e-15));
  CHECK(h.max_above_diagonal == 0);
  CHECK(h.causal);
}

TEST_CASE("attention stats: rows that are not distributions are skipped", "[attention_stats]") {
  const Map map = {
      {0.25, 0.25, 0.25, 0.25},    // counted
      {0, 0, 0, 0},                // fully masked, masked_rows zero
      {kNaN, kNaN, kNaN, kNaN},    // masked_rows nan
      {0, 0, 0, 1},                // counted: all on the diagonal
      {0.5, 0, 0, 0},              // sums to 0.5
      {1.5, -0.5, 0, 0},           // sums to 1, but a negative weight
      {kInf, 0, 0, 0},             // not finite
      {0.25, 0.25, 0.25, 0.2505},  // within 1e-3 of 1: counted
  };
  const HeadStats h = stats_of(map);
  CHECK(h.rows == 3);
  CHECK(h.skipped_rows == 5);
  // Rows 0, 3 and 7 count.
  check_close(h, reference(flatten<double>(map), 1, 1, map.size(), 4)[0], 1e-14);
  CHECK(h.max_above_diagonal == 0.25);  // row 0; row 7 (t >= S) has nothing above
  CHECK(h.first_key == Approx((0.25 + 0 + 0.25) / 3).epsilon(1e-15));

  SECTION("no counted row: means are NaN, JSON null") {
    const HeadStats none = stats_of(Map{{0, 0, 0}, {kNaN, 0, 0}});
    CHECK(none.rows == 0);
    CHECK(none.skipped_rows == 2);
    CHECK(std::isnan(none.entropy));
    CHECK(std::isnan(none.entropy_fraction));
    CHECK(none.causal);
    const nlohmann::json j = none.to_json();
    CHECK(j["entropy"].is_null());
    CHECK(j["distance"].is_null());
    CHECK(j["max_above_diagonal"] == 0.0);
    CHECK(j["skipped_rows"] == 2);
  }
}

TEST_CASE("attention stats: query rows beyond S and a single key", "[attention_stats]") {
  // T = 3 > S = 2: row 2 has no diagonal weight.
  const HeadStats h = stats_of(Map{{0.5, 0.5}, {0.5, 0.5}, {0.5, 0.5}});
  CHECK(h.diagonal == Approx((0.5 + 0.5 + 0) / 3).epsilon(1e-15));
  // distances: row 0: 0.5, row 1: 0.5, row 2: 0.5*2 + 0.5*1 = 1.5.
  CHECK(h.distance == Approx(2.5 / 3).epsilon(1e-15));
  CHECK(h.max_above_diagonal == 0.5);  // row 0, key 1

  const HeadStats one = stats_of(Map{{1}, {1}});
  CHECK(one.entropy == 0);
  CHECK(one.entropy_fraction == 0);  // log S = 0
  CHECK(one.distance == 0.5);        // row 1 attends to key 0
  CHECK(one.causal);
}

TEST_CASE("attention stats: a padded batch row counts its real keys only", "[attention_stats]") {
  // A (4, 4) map of a row padded from 3 tokens: its first 3 rows over the first 3 keys are
  // the (3, 3) map of the row alone; entropy_fraction divides by log 3, not log 4.
  const std::vector<double> alone = {1, 0, 0, 0.25, 0.75, 0, 0.2, 0.3, 0.5};
  std::vector<double> padded(16, 0.0);
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t s = 0; s < 3; ++s) padded[t * 4 + s] = alone[t * 3 + s];
  padded[12] = 1;  // the padded query row attends somewhere
  AttentionStats a(1, 3, 3), p(1, 4, 4);
  a.add_rows(0, 0, 3, alone.data());
  p.add_rows(0, 0, 3, padded.data(), 3);
  const HeadStats x = a.head(0), y = p.head(0);
  CHECK(y.rows == 3);
  for (auto [u, v] : {std::pair{x.entropy, y.entropy},
                      {x.entropy_fraction, y.entropy_fraction},
                      {x.max_weight, y.max_weight},
                      {x.distance, y.distance},
                      {x.diagonal, y.diagonal},
                      {x.first_key, y.first_key}})
    CHECK(u == v);
  // Rows of different key counts: each row's entropy over the log of its own keys.
  AttentionStats mixed(1, 4, 4);
  const std::vector<double> half = {0.5, 0.5, 0, 0};
  const std::vector<double> quarter = {0.25, 0.25, 0.25, 0.25};
  mixed.add_rows(0, 1, 1, half.data(), 2);
  mixed.add_rows(0, 1, 1, quarter.data(), 4);
  CHECK(mixed.head(0).entropy_fraction == Approx(1.0).epsilon(1e-15));
  require_runtime([&] { mixed.add_rows(0, 0, 1, quarter.data(), 5); }, "of 5 keys");
}

TEST_CASE("attention stats: the fast row pass matches the plain definitions", "[attention_stats]") {
  // S across the lane widths and their tails; spread 30 gives weights down to
  // e^-60, causal zeros too.
  for (std::size_t S : {1, 2, 3, 7, 8, 9, 15, 16, 17, 40, 129}) {
    for (bool causal : {false, true}) {
      INFO("S = " << S << ", causal " << causal);
      const std::size_t B = 2, heads = 3, T = 11;
      const std::vector<double> a = random_maps(B, heads, T, S, S > 20 ? 30 : 2, causal, 7 * S);
      AttentionStats stats(heads, T, S);
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t i = 0; i < heads; ++i)
          stats.add_rows(i, 0, T, a.data() + (b * heads + i) * T * S);
      const auto want = reference(a, B, heads, T, S);
      for (std::size_t i = 0; i < heads; ++i) check_close(stats.head(i), want[i], 1e-13);
    }
  }

  SECTION("tiny weights: float subnormals, double subnormals") {
    const float tiny_f = std::numeric_limits<float>::denorm_min();
    const HeadStats f = stats_of<float>({{1, tiny_f, tiny_f, 0}});
    CHECK(f.entropy == Approx(-2.0 * tiny_f * std::log(double(tiny_f))).margin(1e-60));
    CHECK(f.entropy > 0);
    const HeadStats d = stats_of(Map{{1, 0, 0, 1e-310}});
    CHECK(d.entropy == 0);  // below DBL_MIN: adds nothing
    CHECK(d.max_above_diagonal == 1e-310);
    CHECK_FALSE(d.causal);
  }
}

TEST_CASE("attention stats: blocks from many threads give the same bits as one block",
          "[attention_stats]") {
  const std::size_t B = 3, heads = 4, T = 37, S = 29;
  const std::vector<double> a = random_maps(B, heads, T, S, 3, false, 1);
  AttentionStats whole(heads, T, S);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < heads; ++i)
      whole.add_rows(i, 0, T, a.data() + (b * heads + i) * T * S);

  // Blocks of 1-7 rows, shuffled, dealt to 4 threads.
  struct Block {
    std::size_t b, head, t0, rows;
  };
  std::vector<Block> blocks;
  std::mt19937 rng(3);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < heads; ++i)
      for (std::size_t t0 = 0, rows; t0 < T; t0 += rows) {
        rows = std::min<std::size_t>(T - t0, 1 + rng() % 7);
        blocks.push_back({b, i, t0, rows});
      }
  std::shuffle(blocks.begin(), blocks.end(), rng);
  AttentionStats pieces(heads, T, S);
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (std::size_t j = k; j < blocks.size(); j += 4) {
        const Block& x = blocks[j];
        pieces.add_rows(x.head, x.t0, x.rows, a.data() + ((x.b * heads + x.head) * T + x.t0) * S);
      }
    });
  for (auto& th : threads) th.join();

  CHECK(pieces.to_json() == whole.to_json());
  for (std::size_t i = 0; i < heads; ++i) {
    const HeadStats p = pieces.head(i), w = whole.head(i);
    CHECK(p.entropy == w.entropy);  // bit for bit, not just close
    CHECK(p.distance == w.distance);
    CHECK(p.rows == B * T);
  }
}

TEST_CASE("attention stats: float and double input", "[attention_stats]") {
  // Weights exact in float: the same bits.
  const Map exact = {{0.25, 0.25, 0.5, 0}, {0.125, 0.875, 0, 0}, {0, 0, 0, 1}};
  CHECK(stats_of<float>(exact).to_json() == stats_of<double>(exact).to_json());

  // Random weights: float rounding only.
  const std::size_t T = 9, S = 13;
  const std::vector<double> a = random_maps(1, 1, T, S, 2, true, 5);
  Map map(T, std::vector<double>(S));
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t s = 0; s < S; ++s) map[t][s] = a[t * S + s];
  check_close(stats_of<float>(map), stats_of<double>(map), 1e-6);
}

TEST_CASE("attention stats: JSON layout and the mean over heads", "[attention_stats]") {
  AttentionStats stats(3, 2, 2);
  const double diagonal[] = {1, 0, 0, 1}, uniform[] = {0.5, 0.5, 0.5, 0.5}, masked[] = {0, 0, 0, 0};
  stats.add_rows(0, 0, 2, diagonal);
  stats.add_rows(1, 0, 1, uniform);  // blocks of one row each
  stats.add_rows(1, 1, 1, uniform + 2);
  stats.add_rows(2, 0, 2, masked);  // no counted row

  const nlohmann::json j = stats.to_json();
  REQUIRE(j["heads"].size() == 3);
  for (const auto& key : {"entropy", "entropy_fraction", "max_weight", "distance", "diagonal",
                          "first_key", "max_above_diagonal", "causal", "rows", "skipped_rows"}) {
    INFO(key);
    CHECK(j["heads"][0].contains(key));
    CHECK(j["mean"].contains(key));
  }
  CHECK(j["heads"][0].size() == 10);
  CHECK(j.size() == 2);
  CHECK(j["heads"][1]["entropy"].get<double>() == Approx(std::log(2.0)).epsilon(1e-15));
  CHECK(j["heads"][1]["causal"] == false);
  CHECK(j["heads"][2]["entropy"].is_null());
  CHECK(j["heads"][2]["skipped_rows"] == 2);

  // Heads 0 and 1 have rows; head 2 only adds to the totals.
  const HeadStats m = stats.mean();
  CHECK(m.entropy == Approx(std::log(2.0) / 2).epsilon(1e-15));
  CHECK(m.entropy_fraction == Approx(0.5).epsilon(1e-15));
  CHECK(m.max_weight == 0.75);
  CHECK(m.distance == 0.25);
  CHECK(m.diagonal == 0.75);
  CHECK(m.first_key == 0.5);
  CHECK(m.max_above_diagonal == 0.25);  // averaged over heads like the rest: (0 + 0.5) / 2
  CHECK_FALSE(m.causal);
  CHECK(m.rows == 4);
  CHECK(m.skipped_rows == 2);
  CHECK(j["mean"] == m.to_json());
}

TEST_CASE("attention stats: blocks outside the maps are refused", "[attention_stats]") {
  AttentionStats stats(2, 4, 3);
  const std::vector<float> block(12, 1.0f / 3);
  require_runtime([&] { stats.add_rows(2, 0, 1, block.data()); }, "head 2");
  require_runtime([&] { stats.add_rows(0, 3, 2, block.data()); }, "rows [3, 5)");
  require_runtime([&] { stats.head(2); }, "head 2 of 2");
  stats.add_rows(1, 0, 4, block.data());  // the whole map is fine
  CHECK(stats.head(1).rows == 4);
}

TEST_CASE("attention stats: exact sums do not depend on the order", "[attention_stats]") {
  std::vector<double> xs = {1e100, 1.0, -1e100, 1e-20, 0.1, 0.1, 0.1, -0.3, 3.5e-310};
  AttentionStats::ExactSum forward, backward;
  for (double x : xs) forward.add(x);
  for (auto it = xs.rbegin(); it != xs.rend(); ++it) backward.add(*it);
  CHECK(forward.value() == backward.value());
  // 1 + 1e-20 + (0.1 + 0.1 + 0.1 - 0.3 as doubles, 2^-54 + ...) rounds to 1.
  CHECK(forward.value() == 1.0);

  AttentionStats::ExactSum tenths, halves;
  for (int i = 0; i < 10; ++i) tenths.add(0.1);
  CHECK(tenths.value() == 1.0);  // as math.fsum([0.1] * 10)
  halves.add(tenths);
  halves.add(tenths);
  CHECK(halves.value() == 2.0);
  CHECK(AttentionStats::ExactSum().value() == 0);
}

// The real binary: run.json's attention_stats against the attention.npy it
// wrote (the plain definitions to 1e-12, and AttentionStats over the file to
// the bit), and output_stats against output.npy's bytes.
TEST_CASE("attention stats: run.json of the real binary", "[attention_stats][golden]") {
  struct Case {
    std::string name, flags;
    bool averaged;
  };
  // Cross-attention with top-left causality and a batch whose keys are all
  // padding (skipped rows); then float64 with the mean over heads.
  const std::vector<Case> cases = {
      {"per_head",
       "--h 3 --d_model 12 --batch 3 --seq_len 7 --kv_seq_len 9 --kdim 5 --vdim 5 --causal "
       "--key_lengths 9,4,0 --seed 11",
       false},
      {"averaged",
       "--h 4 --d_model 16 --batch 2 --seq_len 6 --dtype float64 --key_lengths 6,3 --seed 12 "
       "--average_heads",
       true},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      TempDir tmp("attention_stats_" + c.name);
      const std::string out = tmp / "out";
      const std::string command = sh_quote(mha_binary()) + " run -q " + c.flags +
                                  " --save_attention --out_dir " + sh_quote(out) + " 2> " +
                                  sh_quote(tmp / "stderr.txt");
      const int status = std::system(command.c_str());
      INFO("command: " << command);
      INFO("stderr: " << read_file(tmp / "stderr.txt"));
      REQUIRE(status == 0);
      const nlohmann::json report = nlohmann::json::parse(read_file(out + "/run.json"));
      REQUIRE(report.contains("attention_stats"));
      nlohmann::json got = report["attention_stats"];

      const mha::NpyArray attention = mha::read_npy(out + "/attention.npy");
      const auto& shape = attention.shape;
      const std::size_t B = shape[0], heads = c.averaged ? 1 : shape[1];
      const std::size_t T = shape[shape.size() - 2], S = shape.back();
      const std::vector<double> a = doubles_of(attention, "attention.npy");
      const auto want = reference(a, B, heads, T, S);
      REQUIRE(got["heads"].size() == heads);
      CHECK(got.value("averaged_over_heads", false) == c.averaged);
      std::uint64_t skipped = 0;
      for (std::size_t i = 0; i < heads; ++i) {
        const nlohmann::json& h = got["heads"][i];
        HeadStats g;
        g.entropy = h["entropy"];
        g.entropy_fraction = h["entropy_fraction"];
        g.max_weight = h["max_weight"];
        g.distance = h["distance"];
        g.diagonal = h["diagonal"];
        g.first_key = h["first_key"];
        g.max_above_diagonal = h["max_above_diagonal"];
        g.causal = h["causal"];
        g.rows = h["rows"];
        g.skipped_rows = h["skipped_rows"];
        check_close(g, want[i], 1e-12);
        skipped += g.skipped_rows;
      }
      // key_lengths 0 masks whole rows; bottom-right or not, causal only when asked.
      if (!c.averaged) {
        CHECK(skipped == heads * T);
        CHECK(got["mean"]["causal"] == true);
      } else {
        CHECK(skipped == 0);
        CHECK(got["mean"]["causal"] == false);
      }

      // Fed from the file, AttentionStats gives exactly what the run reported.
      AttentionStats from_file(heads, T, S);
      const std::vector<float> a_float =
          attention.dtype == mha::DType::f4 ? values_of<float>(attention) : std::vector<float>();
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t i = 0; i < heads; ++i) {
          const std::size_t at = (b * heads + i) * T * S;
          if (!a_float.empty())
            from_file.add_rows(i, 0, T, a_float.data() + at);
          else
            from_file.add_rows(i, 0, T, a.data() + at);
        }
      got.erase("averaged_over_heads");
      CHECK(got == from_file.to_json());

      // output_stats: zlib's crc32 of output.npy's bytes, and its moments.
      REQUIRE(report.contains("output_stats"));
      const nlohmann::json& o = report["output_stats"];
      const std::string bytes = read_file(out + "/output.npy");
      const unsigned long crc =
          ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                  static_cast<uInt>(bytes.size()));
      char hex[9];
      std::snprintf(hex, sizeof hex, "%08lx", crc);
      CHECK(o["crc32"] == hex);
      const std::vector<double> y = doubles_of(mha::read_npy(out + "/output.npy"), "output.npy");
      double sum = 0, squares = 0;
      for (double x : y) sum += x;
      const double mean = sum / double(y.size());
      for (double x : y) squares += (x - mean) * (x - mean);
      CHECK(o["mean"].get<double>() == Approx(mean).epsilon(1e-12).margin(1e-15));
      CHECK(o["std"].get<double>() == Approx(std::sqrt(squares / double(y.size()))).epsilon(1e-12));
      CHECK(o["min"].get<double>() == *std::min_element(y.begin(), y.end()));
      CHECK(o["max"].get<double>() == *std::max_element(y.begin(), y.end()));
      CHECK(o.size() == 5);
    }
  }

  SECTION("without save_attention: output_stats only") {
    TempDir tmp("attention_stats_none");
    const std::string out = tmp / "out";
    const std::string command = sh_quote(mha_binary()) + " run -q --h 2 --d_model 8 --seq_len 3" +
                                " --out_dir " + sh_quote(out);
    REQUIRE(std::system(command.c_str()) == 0);
    const nlohmann::json report = nlohmann::json::parse(read_file(out + "/run.json"));
    CHECK_FALSE(report.contains("attention_stats"));
    CHECK(report["output_stats"]["crc32"].get<std::string>().size() == 8);
  }
}
