// run.json: what a run did, enough to reproduce it and to trust its outputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/config.hpp"
#include "mha/dims.hpp"

namespace mha {

struct RunReport {
  Config config;           // as given
  Dims dims;               // as resolved
  double scale = 0;        // the logit scale used
  bool use_bias = true;    // as resolved
  int threads = 1;         // worker threads used
  nlohmann::json sources;  // tensor -> {"file": path} | {"random": ..., "seed": n}
  nlohmann::json outputs;  // file -> {"shape": [...], "dtype": ...}
  double load_ms = 0, compute_ms = 0, write_ms = 0;
  std::uint64_t peak_rss_bytes = 0;

  nlohmann::json to_json() const;
};

// Peak resident set size of this process so far, in bytes.
std::uint64_t peak_rss_bytes();

}  // namespace mha
