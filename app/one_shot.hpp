// `mha bench --one_shot`: a case timed as people run it, one `mha run`
// process per call, next to the warm in-process time of the same case.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "mha/run/bench.hpp"

namespace mha::cli {

// The run config of a bench case: its dims as keys, its variant as options
// (weights: save_attention, streamed to attention.npy with its statistics, as
// `mha run` does; causal, window, alibi, softcap, gqa as their keys).
// `base` (a --config file's contents) is kept where it sets more.
nlohmann::json one_shot_config(const BenchShape& shape, const std::string& variant, int threads,
                               const nlohmann::json& base);

struct OneShot {
  int repeat = 0;
  // Medians over the processes: wall time of the whole process (start to
  // exit, as a shell sees it) and the stages its run.json reports.
  double wall_ms = 0, load_ms = 0, compute_ms = 0, write_ms = 0;
  nlohmann::json to_json() const;
};

// Runs `exe run --config CFG` `repeat` times in a temporary directory (removed
// afterwards); any failed process is an error naming its exit status.
OneShot time_one_shot(const std::string& exe, const nlohmann::json& config, int repeat);

}  // namespace mha::cli
