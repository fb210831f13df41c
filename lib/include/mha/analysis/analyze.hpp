// `mha analyze --model DIR` and mha.Model's analysis methods: a loop over the
// registry (analysis.hpp) for the methods given, writing to out_dir
// all-or-nothing (the CLI) or returning the arrays (Python). The files each
// method writes are in docs/analyses.md and its file in lib/src/analysis/;
// tokens.json and run.json (the arrays' shapes and meanings, the summary)
// come with every method.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/io/npy.hpp"
#include "mha/run/analyze.hpp"
#include "mha/run/model_job.hpp"
#include "mha/run/model_run.hpp"

namespace mha {

// The methods the registry knows, in the order they run.
std::vector<std::string> analysis_methods();

// Every check (inputs, methods and their options, memory) runs before any
// weight is read; errors are mha::Error (invalid_input) naming the flag.
AnalyzeReport run_analyze(const AnalyzeConfig& config);

// The same methods on rows already read (mha.Model: texts, ids or images),
// the arrays kept in memory by their file names ("rollout.npy"), with the
// summary run.json would hold. The same checks and messages as the CLI; the
// estimate counts the arrays returned.
struct AnalysisResult {
  std::map<std::string, NpyArray> arrays;
  nlohmann::json summary;
};
AnalysisResult analyze_input(const Model& model, const AnalyzeConfig& config, ModelInput in,
                             std::uint64_t max_memory);
// An encoder-decoder's (T5, BART): both sides read (read_seq2seq_sides or the
// caller's own); the methods that take one (loss, rollout, norms, ablation),
// through the same loop and entries.
AnalysisResult analyze_seq2seq_input(const Model& model, const AnalyzeConfig& config,
                                     Seq2SeqSides sides, std::uint64_t max_memory);

// Every check the job's command makes before any weight is read (inputs,
// options, methods, tokens, memory), and nothing written: run_analyze or
// run_model with check_only. What `mha sweep` hands validate_sweep.
void check_model_job(const ModelJob& job);

}  // namespace mha
