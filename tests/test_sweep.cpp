// mha::Sweep: grid expansion (product order, zip groups, names and templates),
// sweep-file errors, validation of every run before anything runs, shard
// partitioning (flags and Slurm variables), resume's notion of a finished
// run, result rows and their CSV. The binary's scheduling, signals and
// concurrent shards are tested end to end in tests/cli/test_sweep.py.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/config/config.hpp"
#include "mha/io/npy.hpp"
#include "mha/run/model_job.hpp"
#include "mha/run/run_json.hpp"
#include "mha/run/sweep.hpp"
#include "test_util.hpp"

using json = nlohmann::json;
using mha::parse_sweep;
using mha::Shard;
using mha::Sweep;
using namespace mha::test;  // test_util.hpp

namespace {

std::vector<std::string> names(const Sweep& s) {
  std::vector<std::string> out;
  for (const auto& r : s.runs) out.push_back(r.name);
  return out;
}

Sweep parse(const std::string& text) {
  return parse_sweep(text, "sweeps/s.json", std::string("outdir"));
}

}  // namespace

TEST_CASE("sweep grid: the last key varies fastest and keys keep file order") {
  // "seq_len" sorts before "h" alphabetically; file order must win.
  const Sweep s = parse(R"({"base": {"d_model": 8},
                            "grid": {"seq_len": [4, 8], "h": [1, 2, 4]}})");
  REQUIRE(s.runs.size() == 6);
  CHECK(s.swept_keys == std::vector<std::string>{"seq_len", "h"});
  CHECK(s.axis_sizes == std::vector<std::size_t>{2, 3});
  CHECK(names(s) == std::vector<std::string>{"seq_len=4_h=1", "seq_len=4_h=2", "seq_len=4_h=4",
                                             "seq_len=8_h=1", "seq_len=8_h=2", "seq_len=8_h=4"});
  for (std::size_t i = 0; i < s.runs.size(); ++i) {
    const auto& r = s.runs[i];
    CHECK(r.index == i);
    CHECK(r.config["seq_len"] == json(i < 3 ? 4 : 8));
    CHECK(r.config["h"] == json(std::vector<int>{1, 2, 4}[i % 3]));
    CHECK(r.config["d_model"] == 8);  // from base
    CHECK(r.config["out_dir"] == "outdir/" + r.name);
    CHECK(r.dir == "outdir/" + r.name);
  }
}

TEST_CASE("sweep zip: lists advance together as one axis after the grid") {
  const Sweep s = parse(R"({"grid": {"h": [1, 2]},
                            "zip": {"seq_len": [16, 64, 256], "batch": [8, 4, 1]}})");
  REQUIRE(s.runs.size() == 6);
  CHECK(s.axis_sizes == std::vector<std::size_t>{2, 3});
  CHECK(s.runs[0].name == "h=1_seq_len=16_batch=8");
  CHECK(s.runs[4].name == "h=2_seq_len=64_batch=4");
  for (const auto& r : s.runs) {
    const int T = r.values["seq_len"], B = r.values["batch"];
    CHECK(T * B == (T == 16 ? 128 : T == 64 ? 256 : 256));  // pairs stay together
  }
  // Several zip groups: a list of objects, each its own axis.
  const Sweep two = parse(R"({"zip": [{"seed": [0, 1], "h": [1, 2]}, {"seq_len": [4, 8, 16]}]})");
  CHECK(two.runs.size() == 6);
  CHECK(two.runs[5].name == "seed=1_h=2_seq_len=16");
}

TEST_CASE("sweep names: templates and value spelling and sanitizing") {
  const Sweep s = parse(R"({"base": {"d_model": 32},
                            "grid": {"h": [2, 4], "causal": [false, "bottom-right"],
                                     "key_lengths": [[3, 2]], "query": ["data/x y.npy"]},
                            "name": "{index}_h{h}_{causal}_d{d_model}"})");
  CHECK(s.runs[0].name == "0_h2_false_d32");
  CHECK(s.runs[1].name == "1_h2_bottom-right_d32");
  // Default names: lists joined with ',', path separators and spaces replaced.
  const Sweep d = parse(R"({"grid": {"key_lengths": [[3, 2]], "query": ["data/x y.npy"],
                                     "scale": [0.125]}})");
  CHECK(d.runs[0].name == "key_lengths=3,2_query=data-x-y.npy_scale=0.125");
  // No swept key at all: a single run named "run".
  CHECK(names(parse(R"({"base": {"h": 2}})")) == std::vector<std::string>{"run"});
  // A name that would be hidden or climb out of out_dir is made safe.
  CHECK(parse(R"({"grid": {"h": [1]}, "name": "../{h}"})").runs[0].name == "run..-1");
}

TEST_CASE("sweep out_dir: flag before the file before base before out/sweeps/STEM") {
  const std::string text = R"({"base": {"out_dir": "b"}, "out_dir": "top", "grid": {"h": [1]}})";
  CHECK(parse_sweep(text, "x/s.json", std::string("flag")).out_dir == "flag");
  CHECK(parse_sweep(text, "x/s.json").out_dir == "top");
  CHECK(parse_sweep(R"({"base": {"out_dir": "b"}})", "x/s.json").out_dir == "b");
  CHECK(parse_sweep(R"({"grid": {"h": [1]}})", "x/my_sweep.json").out_dir == "out/sweeps/my_sweep");
}

TEST_CASE("sweep file errors name the file and the key") {
  auto bad = [](const std::string& text, const std::string& fragment) {
    INFO(text);
    require_invalid([&] { parse(text); }, fragment);
    require_invalid([&] { parse(text); }, "sweeps/s.json");
  };
  bad(R"([1, 2])", "expected a JSON object");
  bad(R"({"grid": {"h": [1]}, "h": 2})", "unknown key 'h'; expected base, grid");
  bad(R"({"grid": {"h": [1]}, "h": 2})", "go inside \"base\"");
  bad(R"({"base": {"hh": 2}})", "'hh'");
  bad(R"({"base": {"h": "two"}})", "base: key 'h'");
  bad(R"({"grid": {"hx": [1]}})", "unknown config key 'hx' (did you mean 'h'?)");
  bad(R"({"grid": {"h": []}})", "grid: 'h': expected a non-empty list");
  bad(R"({"grid": {"h": 4}})", "expected a non-empty list of values, got 4");
  bad(R"({"grid": ["h"]})", "\"grid\" must be an object");
  bad(R"({"grid": {"out_dir": ["a", "b"]}})", "'out_dir' cannot be swept");
  bad(R"({"zip": {"h": [1, 2], "seed": [0]}})", "'seed' has 1 values but 'h' has 2");
  bad(R"({"grid": {"h": [1, 2]}, "zip": {"h": [1, 2]}})", "'h' is swept more than once");
  bad(R"({"zip": [{"h": [1]}, {"h": [2]}]})", "zip[1]: 'h' is swept more than once");
  bad(R"({"grid": {"h": [1, 2]}, "name": "x{hh}"})", "unknown placeholder {hh}");
  bad(R"({"grid": {"h": [1, 2]}, "name": "x{h"})", "'{' without '}'");
  bad(R"({"grid": {"h": [1, 2], "seed": [0, 1]}, "name": "h{h}"})",
      "runs 0 and 1 both get the name 'h1'");
  bad(R"({"name": 3})", "\"name\" must be a non-empty string");
  bad(R"({"grid": {"h": [1, 2],}})", "JSON allows no comma");
  bad(R"({"grid": {"h": [1], "h": [2]}})", "duplicate key \"h\"");
  // 10^7 runs: refused before anything is expanded.
  const std::string ten = "[0,1,2,3,4,5,6,7,8,9]";
  bad(R"({"grid": {"h": )" + ten + R"(, "seed": )" + ten + R"(, "batch": )" + ten +
          R"(, "seq_len": )" + ten + R"(, "d_k": )" + ten + R"(, "d_v": )" + ten + R"(, "kdim": )" +
          ten + "}}",
      "the grid makes 10000000 runs (10 x 10 x 10 x 10 x 10 x 10 x 10), more than 100000");
}

TEST_CASE("sweep validate_sweep: every invalid run is found before anything runs") {
  TempDir dir("sweep_validate");
  std::vector<float> q(2 * 5 * 16, 0.5f);
  const std::string query = dir.write_npy(mha::NpyArray::of(q.data(), {2, 5, 16}), "query");
  Sweep s = parse_sweep(R"({"base": {"query": ")" + query + R"("},
                            "grid": {"h": [2, 3], "d_model": [16, 32]}})",
                        dir / "s.json", dir / "out");
  REQUIRE(s.runs.size() == 4);
  CHECK(mha::validate_sweep(s) == 3);
  CHECK_FALSE(s.runs[0].invalid);  // h=2, d_model=16
  REQUIRE(s.runs[1].invalid);      // the file has d_model 16
  CHECK_THAT(*s.runs[1].invalid, Catch::Contains("d_model mismatch"));
  CHECK_THAT(*s.runs[2].invalid, Catch::Contains("not divisible by h = 3"));
  // Missing files, bad masks and memory limits are found too, per run.
  Sweep m = parse_sweep(R"({"base": {"h": 2, "d_model": 8, "seq_len": 4},
                            "grid": {"mask": [null, "nowhere.npy"], "max_memory": [null, 1000]}})",
                        dir / "m.json", dir / "out");
  CHECK(mha::validate_sweep(m) == 3);
  CHECK_FALSE(m.runs[0].invalid);
  CHECK_THAT(*m.runs[1].invalid, Catch::Contains("max_memory"));
  CHECK_THAT(*m.runs[2].invalid, Catch::Contains("nowhere.npy"));
  // Nothing was written.
  CHECK_FALSE(std::filesystem::exists(dir / "out"));
}

TEST_CASE("sweep shards: I/N partitions the runs with each run exactly once") {
  const Sweep s = parse(R"({"grid": {"h": [1, 2, 3, 4, 5], "seed": [0, 1, 2]}})");
  for (std::size_t n : {1, 2, 4, 7, 15, 16}) {
    std::map<std::size_t, int> seen;
    for (std::size_t i = 0; i < n; ++i) {
      const Shard shard = mha::parse_shard(std::to_string(i) + "/" + std::to_string(n), "--shard");
      for (const auto& r : s.runs)
        if (shard.contains(r.index)) ++seen[r.index];
    }
    CHECK(seen.size() == s.runs.size());
    for (const auto& [index, count] : seen) CHECK(count == 1);
  }
  CHECK(mha::parse_shard("3/8", "--shard").str() == "3/8");
  for (const char* text : {"8/8", "1/0", "x/2", "1", "-1/2", "1/2/3", "", "/2", "1/"})
    require_invalid([&] { mha::parse_shard(text, "--shard"); }, "--shard: expected I/N");
}

namespace {
std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}
}  // namespace

TEST_CASE("sweep shards: from Slurm array variables") {
  g_env = {};
  CHECK_FALSE(mha::shard_from_slurm(fake_getenv));
  g_env = {{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "8"}};
  CHECK(mha::shard_from_slurm(fake_getenv)->str() == "3/8");
  // --array=1-8: ids start at SLURM_ARRAY_TASK_MIN.
  g_env = {
      {"SLURM_ARRAY_TASK_ID", "8"}, {"SLURM_ARRAY_TASK_COUNT", "8"}, {"SLURM_ARRAY_TASK_MIN", "1"}};
  CHECK(mha::shard_from_slurm(fake_getenv)->str() == "7/8");
  g_env = {{"SLURM_ARRAY_TASK_ID", "9"}, {"SLURM_ARRAY_TASK_COUNT", "8"}};
  require_invalid([] { mha::shard_from_slurm(fake_getenv); }, "SLURM_ARRAY_TASK_ID");
  g_env = {{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "8"}};
  require_invalid([] { mha::shard_from_slurm(fake_getenv); }, "expected integers");
}

namespace {
// The variables Slurm 22.05 sets for a task of an array (read off a real one).
void slurm_task(int id, int min, int max, int step, int count) {
  g_env = {{"SLURM_ARRAY_TASK_ID", std::to_string(id)},
           {"SLURM_ARRAY_TASK_MIN", std::to_string(min)},
           {"SLURM_ARRAY_TASK_MAX", std::to_string(max)},
           {"SLURM_ARRAY_TASK_STEP", std::to_string(step)},
           {"SLURM_ARRAY_TASK_COUNT", std::to_string(count)}};
}
}  // namespace

TEST_CASE("sweep shards: every task of an evenly spaced array gets its rank") {
  // --array=0-14:2 (8 tasks): tasks 0, 2, ..., 14 are shards 0/8 ... 7/8.
  for (int id = 0; id <= 14; id += 2) {
    slurm_task(id, 0, 14, 2, 8);
    CHECK(mha::shard_from_slurm(fake_getenv)->str() == std::to_string(id / 2) + "/8");
  }
  // --array=5-12 and --array=5-12%2 (a % limit changes nothing Slurm tells the task).
  for (int id = 5; id <= 12; ++id) {
    slurm_task(id, 5, 12, 1, 8);
    CHECK(mha::shard_from_slurm(fake_getenv)->str() == std::to_string(id - 5) + "/8");
  }
  // --array=3-21:6 (4 tasks).
  slurm_task(15, 3, 21, 6, 4);
  CHECK(mha::shard_from_slurm(fake_getenv)->str() == "2/4");
}

TEST_CASE("sweep shards: arrays whose mapping cannot be known are refused") {
  // --array=1,3,8-10: Slurm says MIN 1, MAX 10, STEP 1, COUNT 5.
  slurm_task(8, 1, 10, 1, 5);
  require_invalid([] { mha::shard_from_slurm(fake_getenv); }, "is not an evenly spaced range");
  require_invalid([] { mha::shard_from_slurm(fake_getenv); }, "--shard I/5");
  // A task id that is not on the step.
  slurm_task(3, 0, 14, 2, 8);
  require_invalid([] { mha::shard_from_slurm(fake_getenv); }, "is not one of the array's");
}

TEST_CASE("sweep run_is_complete: a finished run.json of the same config") {
  TempDir dir("sweep_complete");
  Sweep s = parse_sweep(R"({"base": {"d_model": 8, "seq_len": 3}, "grid": {"h": [2]}})",
                        dir / "s.json", dir / "out");
  const auto& run = s.runs[0];
  CHECK_FALSE(mha::run_is_complete(s, run));  // nothing there
  std::filesystem::create_directories(run.dir);
  // The report of that config, run with other threads and out_dir.
  mha::RunReport report;
  report.config.apply(run.config, "x");
  report.config.out_dir = "elsewhere";
  report.dims.h = 2;
  report.dims.d_model = report.dims.kdim = report.dims.vdim = report.dims.d_out = 8;
  report.dims.d_k = report.dims.d_v = 4;
  report.dims.T = report.dims.S = 3;
  report.scale = 0.5;
  report.threads = 7;
  report.sources["query"] = mha::Source::drawn("uniform[0,1)", 0);
  auto write = [&](const json& j) { write_file(run.dir + "/run.json", j.dump()); };
  write(mha::to_json(report));
  CHECK(mha::run_is_complete(s, run));  // threads and out_dir may differ
  REQUIRE(mha::complete_run(run));
  CHECK(mha::complete_run(run)->threads == 7);
  report.config.seed = 1;
  write(mha::to_json(report));
  CHECK_FALSE(mha::run_is_complete(s, run));  // another seed: another result
  report.config.seed = 0;
  json running = mha::to_json(report);
  running["status"] = "running";
  write(running);
  CHECK_FALSE(mha::run_is_complete(s, run));
  write_file(run.dir + "/run.json", mha::to_json(report).dump().substr(0, 20));  // cut short
  CHECK_FALSE(mha::run_is_complete(s, run));
  json partial = mha::to_json(report);
  partial.erase("timings_ms");  // not a run.json mha writes
  write(partial);
  CHECK_FALSE(mha::run_is_complete(s, run));
}

TEST_CASE("sweep result rows and CSV") {
  const Sweep s = parse(R"({"grid": {"h": [2], "key_lengths": [[3, 1]]}})");
  mha::RunReport report;
  report.config.h = 2;
  report.dims.h = 2;
  report.dims.d_k = 4;
  report.dims.T = 3;
  report.flops = 100;
  report.timings = {1.5, 2.5, 0.5};
  report.gflops_per_s = 0.04;
  report.output_stats = mha::NpyStats{"0a1b2c3d", 0.25, 0.5, -1.0, 1.0};
  mha::AttentionSummary stats;
  stats.mean.entropy = 0.7;
  stats.mean.causal = true;
  stats.heads.resize(3);
  stats.heads[0].entropy = 0.5;
  stats.heads[1].entropy = 0.9;
  stats.heads[2].entropy = NAN;  // no row counted
  report.attention_stats = stats;
  const auto row = mha::result_row(s, s.runs[0], report, {{"wall_ms", 12.0}});
  CHECK(row["index"] == 0);
  CHECK(row["status"] == "ok");
  CHECK(row["key_lengths"].dump() == "[3,1]");
  CHECK(row["d_k"] == 4);
  CHECK(row["causal"] == false);
  CHECK(row["compute_ms"] == 2.5);
  CHECK(row["output_crc32"] == "0a1b2c3d");
  CHECK(row["attention_entropy"] == 0.7);
  CHECK(row["attention_causal"] == true);
  CHECK(row["attention_entropy_per_head"].dump() == "[0.5,0.9,null]");
  CHECK(row["wall_ms"] == 12.0);
  // No attention computed: no attention columns.
  mha::RunReport plain = report;
  plain.attention_stats.reset();
  CHECK_FALSE(mha::result_row(s, s.runs[0], plain, {}).contains("attention_entropy"));

  const auto failed = mha::failed_row(s, s.runs[0], 2, "bad \"mask\", shape (2, 3)", {});
  const std::string csv = mha::results_csv({failed, row});
  const auto header = csv.substr(0, csv.find('\n'));
  // Measured columns first (from the ok row), then the failure's own.
  CHECK(header.rfind("schema_version,index,name,status,h,key_lengths,", 0) == 0);
  CHECK(header.find("compute_ms") < header.find("exit_code"));
  CHECK_THAT(csv, Catch::Contains("\"bad \"\"mask\"\", shape (2, 3)\""));  // RFC 4180 quoting
  CHECK_THAT(csv, Catch::Contains("\"[3,1]\""));
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 3);
}

TEST_CASE("sweep append_row: one line per row and collect keeps the newest") {
  TempDir dir("sweep_collect");
  Sweep s = parse_sweep(R"({"grid": {"h": [1, 2, 4]}})", dir / "s.json", dir / "out");
  const Shard shard = mha::parse_shard("0/1", "--shard");
  const std::string path = mha::shard_results_path(s, shard);
  CHECK(path == dir / "out/results/shard-0-of-1.jsonl");
  mha::append_row(path, mha::failed_row(s, s.runs[1], 1, "first try", {{"finished_at", "1"}}));
  mha::append_row(path, mha::failed_row(s, s.runs[1], 1, "second try", {{"finished_at", "2"}}));
  // A line cut short by a killed process is skipped, not fatal.
  std::ofstream(path, std::ios::app) << "{\"index\": 0, \"na";
  const auto summary = mha::collect_results(s);
  CHECK(summary.ok == 0);
  CHECK(summary.failed == 1);
  CHECK(summary.missing == 2);
  const std::string jsonl = read_file(dir / "out/results.jsonl");
  CHECK_THAT(jsonl, Catch::Contains("second try"));
  CHECK_THAT(jsonl, !Catch::Contains("first try"));
  CHECK(std::count(jsonl.begin(), jsonl.end(), '\n') == 1);
}

TEST_CASE("sweep of models: model job keys, names by the path's last part") {
  const Sweep s = parse(R"({"base": {"method": ["loss"], "text": "the cat"},
                            "grid": {"model": ["ckpt/gpt2/", "/abs/llama"], "top_k": [1, 3]}})");
  CHECK(s.models);
  CHECK(names(s) == std::vector<std::string>{"model=gpt2_top_k=1", "model=gpt2_top_k=3",
                                             "model=llama_top_k=1", "model=llama_top_k=3"});
  CHECK(s.runs[3].config["model"] == "/abs/llama");
  CHECK(s.runs[3].config["out_dir"] == "outdir/model=llama_top_k=3");
  // An attention sweep is not one; keys of the other kind are named as such.
  CHECK_FALSE(parse(R"({"grid": {"h": [1, 2]}})").models);
  require_invalid([] { parse(R"({"base": {"h": 2}, "grid": {"model": ["m"]}})"); },
                  "base: 'h' is not a key of a model run");
  require_invalid([] { parse(R"({"grid": {"h": [2], "text": ["a"]}})"); },
                  "grid: 'text' is a key of model runs; give \"model\"");
  require_invalid([] { parse(R"({"zip": [{"model": ["m"], "metod": ["loss"]}]})"); },
                  "unknown key of a model run 'metod' (did you mean 'method'?)");
}

TEST_CASE("model jobs: JSON in, the same JSON out, wrong kinds and types by name") {
  const json analysis = json::parse(R"({"model": "m", "text": ["a", "b"], "method": ["loss"],
      "out_dir": "o", "layer_indices": [0, 2], "top_k": 3, "threads": 1, "max_memory": 1024,
      "ablation": "mean", "metric": "kl", "target": " P", "foil": " R", "batch": 4})");
  const mha::ModelJob job = mha::model_job_from_json(analysis, "x");
  REQUIRE(std::holds_alternative<mha::AnalyzeConfig>(job));
  const auto& a = std::get<mha::AnalyzeConfig>(job);
  CHECK(a.methods == std::vector<std::string>{"loss"});
  CHECK(a.layers == std::vector<std::int64_t>{0, 2});
  CHECK(*a.max_memory == 1024);
  CHECK(a.batch == 4);
  CHECK(mha::to_json(mha::model_job_from_json(mha::to_json(job), "y")) == mha::to_json(job));
  // Single values become lists; a run without "method" is a model run.
  const mha::ModelJob run = mha::model_job_from_json(
      json::parse(R"({"model": "m", "text": "a", "head_indices": 1, "save_attention": true,
                      "max_memory": "1KiB"})"),
      "x");
  REQUIRE(std::holds_alternative<mha::ModelRunConfig>(run));
  CHECK(mha::to_json(run)["text"] == json::array({"a"}));
  CHECK(mha::to_json(run)["head_indices"] == json::array({1}));
  CHECK(mha::to_json(run)["max_memory"] == 1024);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"text": "a"})", "x: expected \"model\""},
      {R"({"model": "m", "save_attention": true, "method": "loss"})",
       "\"save_attention\": a key of model runs"},
      {R"({"model": "m", "target": " P"})", "\"target\": a key of analyses; give \"method\""},
      {R"({"model": "m", "text": []})", "\"text\": expected a string or a non-empty list"},
      {R"({"model": "m", "layer_indices": [-1]})", "\"layer_indices\": expected an index"},
      {R"({"model": "m", "top_k": 1.5})", "\"top_k\": expected an integer"},
      {R"({"model": "m", "save_attention": "yes"})", "\"save_attention\": expected true or false"},
      {R"({"model": "m", "max_memory": "lots"})", "max_memory"},
      {R"({"model": "m", "txt": "a"})",
       "\"txt\" is not a key of a model run or analysis (did you mean \"text\"?)"},
      {R"([1])", "expected a JSON object"}};
  for (const auto& [text, fragment] : bad) {
    INFO(text);
    require_invalid([&] { mha::model_job_from_json(json::parse(text), "x"); }, fragment);
  }
}
