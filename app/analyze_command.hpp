// `mha analyze --model DIR --method M ...`: analyses of attention inside a
// whole model (lib/include/mha/analysis/analyze.hpp, docs/analyses.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mha::cli {

struct AnalyzeArgs {
  CLI::App* command = nullptr;  // to tell which options were given
  std::string config_file;
  std::string model, tokens, out_dir = "out", max_memory, ablation = "zero", metric,
                             dtype = "float32";
  std::vector<std::string> texts, methods, images, target_texts;
  std::optional<std::string> layers, heads, target, foil, clean, corrupt, texts_file, target_tokens;
  std::int64_t top_k = 5, threads = 0, batch = 8;
  bool json = false;
};

void add_analyze_command(CLI::App& app, AnalyzeArgs& args);

// Exit codes: 0 done, 2 an invalid input, flag or file (one stderr line naming
// it; nothing written), 1 anything else.
int do_analyze(const AnalyzeArgs& args);

}  // namespace mha::cli
