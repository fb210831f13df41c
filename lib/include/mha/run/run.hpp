// One `mha run`: resolve the config against its files, compute multi-head
// attention, and write output.npy, attention.npy (on request) and run.json
// to config.out_dir, all-or-nothing.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mha/base/progress.hpp"
#include "mha/config/config.hpp"
#include "mha/run/report.hpp"

namespace mha {

struct RunResult {
  RunReport report;                // what run.json says (run_json.hpp's to_json makes it)
  std::vector<std::string> files;  // paths written, run.json last
};

// Warnings (nothing wrong, but probably not what was meant) go to `warn`.
// `progress`, if given, follows the stages (plan, load, compute, write, done)
// and counts the kernel's attention blocks, for a display on another thread.
RunResult run(const Config& config, const std::function<void(const std::string&)>& warn = {},
              StageProgress* progress = nullptr);

}  // namespace mha
