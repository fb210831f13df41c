// Experiment sweeps: one JSON file describes a grid of `mha run` configs.
//
//   {
//     "base": {"d_model": 64, "batch": 2, "save_attention": true},  // any run config
//     "grid": {"h": [1, 2, 4], "seq_len": [16, 64]},               // Cartesian product
//     "zip":  {"seed": [0, 1], "kv_seq_len": [16, 32]},             // advance together
//     "name": "h{h}_T{seq_len}_s{seed}",                           // run directory names
//     "out_dir": "out/sweeps/example"
//   }
//
// expands to 3 x 2 x 2 = 12 runs. Axes are the grid keys in file order, then
// each zip group; the last axis varies fastest, so run i of a grid
// {a: [..], b: [..]} is (a[i / |b|], b[i % |b|]). Every run gets the directory
// out_dir/NAME with the usual output.npy, attention.npy and run.json, plus the
// config.json it was run from. The library plans, validates, shards and
// collects; executing the runs (child processes, progress) is the
// application's job.
//
// A sweep with "model" in its base, grid or zip sweeps whole models: each run
// is a model job (run/model_job.hpp), `mha run --model` or, with "method",
// `mha analyze`, and its keys are those of a model job:
//
//   {"base": {"text": "The capital of France is", "method": ["loss", "rollout"]},
//    "grid": {"model": ["models/gpt2", "models/qwen"], "text": ["a", "b"]}}
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/run/model_job.hpp"
#include "mha/run/report.hpp"

namespace mha {

// The layout version of a results row (results.jsonl, results.csv;
// schemas/results-row.schema.json): raised when a column is removed, renamed
// or changes meaning; new columns keep it.
constexpr int kResultsSchemaVersion = 1;

struct SweepRun {
  std::size_t index = 0;
  std::string name;                    // directory name under the sweep's out_dir
  nlohmann::json values;               // swept key -> value for this run
  nlohmann::json config;               // base + values, out_dir = the run's directory
  std::string dir;                     // out_dir/name
  std::optional<std::string> invalid;  // why this run cannot run (validate_sweep)
};

struct Sweep {
  std::string path;                     // the sweep file
  bool models = false;                  // runs are model jobs ("model" is given)
  std::string out_dir;                  // where run directories and results go
  std::vector<std::string> swept_keys;  // axis order (grid keys, then zip keys)
  std::vector<std::size_t> axis_sizes;  // one per axis (a zip group is one axis)
  std::vector<SweepRun> runs;
};

// Reads and expands a sweep file. `out_dir_override` (--out_dir) beats the
// file's "out_dir", which beats the base config's, which beats
// "out/sweeps/STEM" (STEM: the file name without extension). Throws mha::Error
// (invalid_input) naming the file and key: unknown top-level or config keys,
// empty or non-list grid values, zip lists of different lengths, a key swept
// twice, unknown {placeholders} in the name template, duplicate run names, and
// more than 100,000 runs (counted from the lists' lengths before any run is
// expanded; the message gives the count), or runs whose configs would hold more
// than 4,000,000 JSON values together.
Sweep load_sweep(const std::string& path,
                 const std::optional<std::string>& out_dir_override = std::nullopt);
// The same from text in memory; `path` names it in errors and gives the STEM.
Sweep parse_sweep(const std::string& text, const std::string& path,
                  const std::optional<std::string>& out_dir_override = std::nullopt);

// Checks every run before anything runs, as `mha run` would: config keys and
// values, the input and weights files and their shapes against the sizes,
// masks, and the memory estimate against max_memory (a model job: every check
// of `check_model_job`, which the caller passes: analysis/analyze.hpp's, as the
// analyses are a layer above run/; without it a model job's keys and values
// alone are checked). Sets `invalid` on each run that would fail; returns how
// many do. Files are read once per path.
std::size_t validate_sweep(Sweep& sweep,
                           const std::function<void(const ModelJob&)>& check_model_job = {});

// Run i belongs to shard I of N when i mod N == I.
struct Shard {
  std::size_t index = 0, count = 1;
  bool contains(std::size_t run_index) const { return run_index % count == index; }
  std::string str() const;  // "2/8"
};
// "I/N" with 0 <= I < N; `where` names the flag or variable in errors.
Shard parse_shard(const std::string& text, const std::string& where);
// The shard of a Slurm array task: its rank in the array, (SLURM_ARRAY_TASK_ID
// - _MIN) / _STEP, of SLURM_ARRAY_TASK_COUNT, for any evenly spaced array
// (--array=0-15, 5-12, 0-14:2, with or without a % limit); nullopt outside an
// array job. An array given as a list (1,3,8-10) is refused: Slurm's variables
// do not say a task's rank in it. `getenv` is injectable for tests.
std::optional<Shard> shard_from_slurm(const char* (*getenv)(const char*) = nullptr);

// The report of dir/run.json when it exists, says "status": "complete" and
// was made from the same config (threads, out_dir and max_memory may differ:
// they do not change results); nullopt otherwise. A run killed part-way never
// has a complete run.json.
std::optional<RunReport> complete_run(const SweepRun& run);

// The results row of a run that is complete: an attention run as complete_run
// says, a model job when its run.json (`mha run --model`, `mha analyze`)
// holds the config the sweep plans for it (threads, out_dir and max_memory
// aside); nullopt otherwise. `extra` adds fields (wall_ms, ...).
std::optional<nlohmann::ordered_json> complete_row(const Sweep& sweep, const SweepRun& run,
                                                   const nlohmann::json& extra);
bool run_is_complete(const Sweep& sweep, const SweepRun& run);  // complete_row has a value

// Results rows are made from reports in run/run_json.hpp (result_row,
// model_result_row, failed_row).

// Where shard I of N appends its rows: out_dir/results/shard-I-of-N.jsonl.
// Each row is one write(2) of one line to a file opened O_APPEND, so shards
// never interleave within a line.
std::string shard_results_path(const Sweep& sweep, const Shard& shard);
void append_row(const std::string& path, const nlohmann::ordered_json& row);

struct CollectSummary {
  std::size_t ok = 0, failed = 0, invalid = 0, missing = 0;
  std::vector<std::string> missing_names;  // runs with no result, in index order
  std::vector<std::string> files;          // written, results.jsonl and results.csv
};
// Merges every shard file under out_dir/results with the runs' own run.json
// into out_dir/results.jsonl and out_dir/results.csv, one row per run in index
// order: a complete run.json wins (the shard row adds wall time); otherwise
// the newest failed row; runs that validate_sweep marked invalid are counted
// as such, others with no result as missing. Both files
// are replaced atomically.
CollectSummary collect_results(const Sweep& sweep);

// The CSV columns of `rows` (the fixed columns in order, then any others in
// first-seen order) and the CSV text: RFC 4180 quoting, lists and objects as
// JSON.
std::string results_csv(const std::vector<nlohmann::ordered_json>& rows);

}  // namespace mha
