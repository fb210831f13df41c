// `mha analyze --model DIR`'s options and report (docs/analyses.md): what a
// model job (model_job.hpp) holds for an analysis. The analyses themselves,
// one file each, and the loop that runs them are in analysis/ (a layer above
// run/: analysis/analysis.hpp, analysis/analyze.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/kernel/compute_type.hpp"

namespace mha {

struct AnalyzeConfig {
  std::string model;
  ComputeType dtype = ComputeType::float32;  // or bfloat16 (Model; parse_model_dtype)
  std::vector<std::string> texts;
  std::optional<std::string> tokens;
  // an image model's input (rollout, flow, norms; ablation of an image classifier)
  std::vector<std::string> images;
  // An encoder-decoder's target (analysis/seq2seq.cpp): one text per text,
  // or an ids file.
  std::vector<std::string> target_texts;
  std::optional<std::string> target_tokens;
  std::vector<std::string> methods;
  std::string out_dir = "out";
  std::optional<std::vector<std::int64_t>> layers, heads;
  std::int64_t top_k = 5, threads = 0;
  std::optional<std::uint64_t> max_memory;
  std::string ablation = "zero";              // zero | mean
  std::string metric;                         // loss | logit_diff | kl; default: logit_diff with
                                              // target and foil, else loss
  std::optional<std::string> target, foil;    // single-token texts (images: class labels)
  std::optional<std::string> clean, corrupt;  // patching's texts
  std::optional<std::string> texts_file;      // corpus: one text a line, or .jsonl
  std::int64_t batch = 8;                     // corpus: texts per pass
  // corpus: called after each batch with the texts done and their total.
  std::function<void(std::size_t done, std::size_t total)> progress;
  // Every check of the plan, then return: no weight read, nothing written.
  bool check_only = false;
};

struct AnalyzeReport {
  nlohmann::json run;                // run.json as written
  std::vector<std::string> outputs;  // file names written, run.json last
  std::vector<std::string> summary;  // lines for stdout
};

}  // namespace mha
