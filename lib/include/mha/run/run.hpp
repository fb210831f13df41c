// One `mha run`: resolve the config against its files, compute multi-head
// attention, and write output.npy, attention.npy (on request) and run.json
// to config.out_dir, all-or-nothing.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/model/config.hpp"

namespace mha {

struct RunResult {
  nlohmann::json report;           // the contents of run.json
  std::vector<std::string> files;  // paths written, run.json last
};

// Warnings (nothing wrong, but probably not what was meant) go to `warn`.
RunResult run(const Config& config, const std::function<void(const std::string&)>& warn = {});

}  // namespace mha
