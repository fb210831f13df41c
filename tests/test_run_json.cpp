// run.json as a struct (run/report.hpp) and its one JSON file
// (run/run_json.hpp): a real run's run.json read back into a RunReport and
// written again gives the same bytes (attention, stack and attention_axes
// runs), the sizes read back are the run's, and a file missing a required key
// or holding one of the wrong type is refused naming the file and the key.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/io/npy.hpp"
#include "mha/run/run.hpp"
#include "mha/run/run_json.hpp"
#include "test_util.hpp"

using json = nlohmann::json;
using mha::test::read_file;
using mha::test::TempDir;

namespace {

// Runs `c` and holds its run.json to the report the run returned and to the
// report read back from the file.
mha::RunReport round_trip(const mha::Config& c) {
  const mha::RunResult result = mha::run(c);
  const std::string path = c.out_dir + "/run.json";
  const std::string text = read_file(path);
  CHECK(mha::to_json(result.report).dump(2) + "\n" == text);  // what run() returns is the file
  const mha::RunReport read = mha::read_run_report(path);
  CHECK(mha::to_json(read).dump(2) + "\n" == text);
  const json j = json::parse(text);
  CHECK(mha::to_json(mha::run_report_from_json(j, path)) == j);

  // The typed fields read back are the run's own.
  const mha::Dims &want = result.report.dims, &got = read.dims;
  CHECK(got.B == want.B);
  CHECK(got.T == want.T);
  CHECK(got.S == want.S);
  CHECK(got.h == want.h);
  CHECK(got.d_k == want.d_k);
  CHECK(got.kv() == want.kv());
  CHECK(got.key_is_query == want.key_is_query);
  CHECK(got.value_is_key == want.value_is_key);
  CHECK(read.flops == result.report.flops);
  CHECK(read.timings.compute_ms == result.report.timings.compute_ms);
  CHECK(read.stack.has_value() == result.report.stack.has_value());
  if (read.stack && result.report.stack) {
    CHECK(read.stack->kind == result.report.stack->kind);
    CHECK(read.stack->num_layers == result.report.stack->num_layers);
    CHECK(read.stack->d_ff == result.report.stack->d_ff);
    CHECK(read.stack->cross.S == result.report.stack->cross.S);
    CHECK(read.stack->self.S == result.report.stack->self.S);
    // flops are recomputed from the sizes read back as the run counted them.
    CHECK(mha::run_flops(read.dims, read.stack) == read.flops);
  }
  return read;
}

}  // namespace

TEST_CASE("run.json round-trips through RunReport: attention runs", "[run_json]") {
  TempDir dir("run_json_attention");
  mha::Config c;
  c.h = 2;
  c.d_model = 8;
  c.batch = 2;
  c.seq_len = 5;
  c.causal = mha::Causal::top_left;
  c.save_attention = true;
  c.plot = true;
  c.save_weights = true;
  c.out_dir = dir / "random";
  const mha::RunReport random = round_trip(c);
  CHECK(random.sources.at("key").kind == mha::Source::Kind::same_as);
  CHECK(random.sources.at("b_q").kind == mha::Source::Kind::zeros);
  CHECK(random.sources.at("W_q").random == "glorot_uniform");
  REQUIRE(random.attention_stats);
  CHECK(random.attention_stats->heads.size() == 2);
  CHECK(random.attention_stats->mean.causal);
  REQUIRE(random.outputs.at("attention.png").plot);
  CHECK(random.outputs.at("attention.png").plot->panels == 2);
  CHECK(random.outputs.at("weights.npz").layout == "native");
  REQUIRE(random.output_stats);
  CHECK(random.output_stats->crc32.size() == 8);

  // Cross-attention from files, the first run's weights, float64 written as
  // float16, maps averaged over heads, bfloat16 GEMMs.
  std::vector<float> q(2 * 5 * 8), k(2 * 7 * 8);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * static_cast<float>(i % 13);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = 0.02f * static_cast<float>(i % 11);
  mha::Config x = c;
  x.query = dir.write("q.npy", mha::encode_npy(mha::NpyArray::of(q.data(), {2, 5, 8})));
  x.key = dir.write("k.npy", mha::encode_npy(mha::NpyArray::of(k.data(), {2, 7, 8})));
  x.value = x.key;
  x.weights = c.out_dir + "/weights.npz";
  x.causal = mha::Causal::none;
  x.save_weights = false;
  x.plot = false;
  x.average_heads = true;
  x.dtype = mha::ComputeType::bfloat16;
  x.output_dtype = mha::OutputType::float16;
  x.out_dir = dir / "files";
  const mha::RunReport files = round_trip(x);
  CHECK_FALSE(files.dims.key_is_query);
  CHECK(files.sources.at("query").kind == mha::Source::Kind::file);
  CHECK(files.sources.at("W_o").layout == "native");
  REQUIRE(files.attention_stats);
  CHECK(files.attention_stats->averaged_over_heads);
  CHECK(files.bf16_gemm);
  CHECK(files.outputs.at("output.npy").dtype == "float16");
}

TEST_CASE("run.json round-trips through RunReport: Transformer stacks", "[run_json]") {
  TempDir dir("run_json_stack");
  mha::Config c;
  c.layer = mha::LayerKind::decoder;
  c.h = 2;
  c.d_model = 8;
  c.d_ff = 12;
  c.num_layers = 2;
  c.batch = 2;
  c.seq_len = 4;
  c.kv_seq_len = 6;  // the memory's length
  c.save_attention = true;
  c.save_hidden_states = true;
  c.out_dir = dir / "decoder";
  const mha::RunReport decoder = round_trip(c);
  REQUIRE(decoder.layer_stats.size() == 2);
  CHECK(decoder.layer_stats[1].cross_attention);
  CHECK(decoder.dims.S == 4);  // the self-attention's keys are its queries
  CHECK(decoder.sources.at("memory").kind == mha::Source::Kind::random);

  mha::Config e = c;
  e.layer = mha::LayerKind::encoder;
  e.kv_seq_len.reset();
  e.save_attention = false;
  e.out_dir = dir / "encoder";
  const mha::RunReport encoder = round_trip(e);
  CHECK(encoder.layer_stats.empty());
  CHECK_FALSE(encoder.attention_stats);
}

TEST_CASE("run.json round-trips through RunReport: repeat", "[run_json]") {
  TempDir dir("run_json_repeat");
  mha::Config c;
  c.h = 2;
  c.d_model = 8;
  c.seq_len = 5;
  c.save_attention = true;
  c.repeat = 4;
  c.out_dir = dir / "repeat";
  const mha::RunReport r = round_trip(c);
  CHECK(r.config.repeat == 4);
  REQUIRE(r.timings.compute_repeat);
  const mha::RepeatTimes& t = *r.timings.compute_repeat;
  REQUIRE(t.samples.size() == 4);
  CHECK(t.min == *std::min_element(t.samples.begin(), t.samples.end()));
  CHECK(t.max == *std::max_element(t.samples.begin(), t.samples.end()));
  CHECK(t.min <= t.median);
  CHECK(t.median <= t.max);

  c.repeat = 1;  // today's run.json: no compute_repeat
  c.out_dir = dir / "once";
  CHECK_FALSE(round_trip(c).timings.compute_repeat);

  // A samples list that does not match repeat is an error naming the key.
  json j = json::parse(read_file(dir / "repeat/run.json"));
  j["timings_ms"]["compute_repeat"]["samples"].push_back(1.0);
  mha::test::require_invalid([&] { mha::run_report_from_json(j, "r.json"); },
                             "r.json: key 'timings_ms.compute_repeat.samples'");
}

TEST_CASE("RepeatTimes: the median of an odd and an even count, min and max", "[run_json]") {
  const mha::RepeatTimes odd = mha::RepeatTimes::of({5, 1, 4});
  CHECK(odd.median == 4);
  CHECK(odd.min == 1);
  CHECK(odd.max == 5);
  CHECK(odd.samples == std::vector<double>{5, 1, 4});  // in call order
  const mha::RepeatTimes even = mha::RepeatTimes::of({3, 10, 1, 2});
  CHECK(even.median == 2.5);
  CHECK(even.min == 1);
  CHECK(even.max == 10);
}

TEST_CASE("run.json round-trips through RunReport: attention_axes", "[run_json]") {
  TempDir dir("run_json_axes");
  // (B, 3, 4, F) over axis 2: 2 x 3 sequences of 4 positions.
  std::vector<float> q(2 * 3 * 4 * 8);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.03f * static_cast<float>(i % 7);
  mha::Config c;
  c.h = 2;
  c.query = dir.write("q.npy", mha::encode_npy(mha::NpyArray::of(q.data(), {2, 3, 4, 8})));
  c.attention_axes = std::vector<std::int64_t>{2};
  c.save_attention = true;
  c.out_dir = dir / "out";
  const mha::RunReport r = round_trip(c);
  REQUIRE(r.attention_axes);
  CHECK(r.attention_axes->axes == std::vector<std::size_t>{2});
  CHECK(r.attention_axes->query_shape == std::vector<std::size_t>{2, 3, 4, 8});
  CHECK(r.dims.B == 6);
  CHECK(r.outputs.at("attention.npy").shape == std::vector<std::size_t>{2, 3, 2, 4, 4});
}

TEST_CASE("run.json: a missing or mistyped key is an error naming the file and the key",
          "[run_json]") {
  TempDir dir("run_json_errors");
  mha::Config c;
  c.h = 2;
  c.d_model = 8;
  c.seq_len = 3;
  c.save_attention = true;
  c.out_dir = dir / "out";
  mha::run(c);
  const json good = json::parse(read_file(dir / "out/run.json"));
  auto refused = [](const json& j, const std::string& message) {
    mha::test::require_invalid([&] { mha::run_report_from_json(j, "x/run.json"); }, message);
  };
  json j = good;
  j.erase("flops");
  refused(j, "x/run.json: key 'flops' is missing; expected the run.json `mha run` writes");
  j = good;
  j["timings_ms"].erase("compute");
  refused(j, "x/run.json: key 'timings_ms.compute' is missing");
  j = good;
  j["sources"]["query"].erase("seed");
  refused(j, "x/run.json: key 'sources.query.seed' is missing");
  j = good;
  j["attention_stats"]["heads"][1].erase("rows");
  refused(j, "x/run.json: key 'attention_stats.heads[1].rows' is missing");
  j = good;
  j["timings_ms"]["compute"] = "fast";
  refused(j, "x/run.json: key 'timings_ms.compute': expected a number, got \"fast\"");
  j = good;
  j["config"]["h"] = "two";
  refused(j, "x/run.json: config: key 'h'");
  j = good;
  j["status"] = "running";
  refused(j, "x/run.json: key 'status': expected \"complete\", got \"running\"");
  refused(json::array(), "x/run.json: not a JSON object");

  // Optional keys may be missing, as in a file of an older mha.
  j = good;
  for (const char* key : {"attention_stats", "output_stats", "kernels"}) j.erase(key);
  j["blas"].erase("config");
  const mha::RunReport old = mha::run_report_from_json(j, "x/run.json");
  CHECK_FALSE(old.attention_stats);
  CHECK_FALSE(old.kernels);
  CHECK(old.dims.h == 2);

  mha::test::write_file(dir / "bad.json", "{\"status\": \"compl");
  mha::test::require_invalid([&] { mha::read_run_report(dir / "bad.json"); },
                             "bad.json:1:18: invalid JSON: ");
}
