// `mha analyze --model DIR`: analyses of attention inside a whole model
// (docs/analyses.md), on the forward of `mha run --model`, writing to
// out_dir all-or-nothing. Methods (--method, repeatable):
//   loss        loss.npy (B, T): each next token's cross-entropy; perplexity in run.json
//   logit_lens  logit_lens_p_next.npy, logit_lens_rank.npy (layers + 1, B, T);
//               logit_lens_top_ids.npy (int32), logit_lens_top_p.npy (layers + 1, B, T, k);
//               logit_lens.json: the top tokens' strings
//   rollout     rollout.npy (layers, B, T, T)
//   norms       attention_norms.npy (layers, B, h, T, T)
//   detectors   head_scores.npy (detectors, layers, heads)
//   ablation    ablation.npy (B, layers, heads)
//   patching    patch_heads.npy (layers, heads), patch_resid.npy (layers, T)
//   corpus      with --texts FILE: corpus_heads.npy (statistics, layers, heads) and
//               corpus_heads.csv, per-head statistics averaged over every text, batch
//               after batch (memory: one batch)
// tokens.json and run.json (the arrays' shapes and meanings, the summary)
// come with every method. An encoder-decoder (T5, BART) with --target_text
// takes loss, rollout, norms and ablation, each map kind its own array
// (run_analyze_seq2seq).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/checkpoint/ablation.hpp"
#include "mha/run/model_run.hpp"

namespace mha {

class OutputSet;

struct AnalyzeConfig {
  std::string model;
  ComputeType dtype = ComputeType::float32;  // or bfloat16 (Model; parse_model_dtype)
  std::vector<std::string> texts;
  std::optional<std::string> tokens;
  // an image model's input (rollout, flow, norms; ablation of an image classifier)
  std::vector<std::string> images;
  // An encoder-decoder's target (run/analyze_seq2seq.cpp): one text per text,
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

// A file of texts, as `mha analyze --texts` and `mha tokenize --texts` take
// it: a JSON array of strings (a .json file, or any file starting with '['),
// one text per line (empty lines skipped), or, for a .jsonl file, one JSON
// object with a "text" string per line. Throws
// mha::Error (invalid_input) naming the file and line (or for text that is
// not UTF-8), or for no text at all. `lines`, if given, gets each text's line
// number (1-based); it stays empty for a JSON array (text i is element i).
std::vector<std::string> read_corpus(const std::string& path,
                                     std::vector<std::size_t>* lines = nullptr);

// The metric named (loss, logit_diff, kl; "": logit_diff with a target and
// foil, else loss); throws mha::Error (invalid_input) naming --metric.
Metric metric_of(const std::string& name, const std::optional<std::string>& target,
                 const std::optional<std::string>& foil);
// Ablation's and patching's options from the flags (or mha.Model's
// keywords): the metric, the target and foil tokens (one token each, refused
// by name otherwise; an image classifier's: labels of its classes, or their
// ids), the layers and heads checked by check_model_call.
InterventionOptions intervention_options(const Model& model, const ModelCall& call,
                                         const std::string& metric,
                                         const std::optional<std::string>& target,
                                         const std::optional<std::string>& foil);

// The methods analyze knows, in the order they run.
const std::vector<std::string>& analysis_methods();

struct AnalyzeReport {
  nlohmann::json run;                // run.json as written
  std::vector<std::string> outputs;  // file names written, run.json last
  std::vector<std::string> summary;  // lines for stdout
};

// Every check (inputs, methods and their options, memory) runs before any
// weight is read; errors are mha::Error (invalid_input) naming the flag.
AnalyzeReport run_analyze(const AnalyzeConfig& config);

// run_analyze's part for an encoder-decoder, or a target given to any model
// (refused there; run/analyze_seq2seq.cpp): the methods checked by
// run_analyze, `model` opened, out_dir's lock held. Writes
//   loss      loss.npy (B, T): each target token's cross-entropy
//   rollout   encoder_rollout.npy (layers, B, S, S), decoder_rollout.npy
//             (layers, B, T, T), cross_rollout.npy (layers, B, T, S)
//   norms     encoder_attention_norms.npy (layers, B, h, S, S),
//             decoder_attention_norms.npy (.., T, T), cross_attention_norms.npy (.., T, S)
//   ablation  encoder_ablation.npy, decoder_ablation.npy, cross_ablation.npy
//             (B, layers, heads)
// with tokens.json of both sides and run.json.
AnalyzeReport run_analyze_seq2seq(const AnalyzeConfig& config, const Model& model);

// The end every analysis shares: run.json's dtype, compute, memory (`need`
// against `max_memory`), every output's checksum and total_ms (since
// `start`) added to `run`, written beside the outputs, the outputs of an earlier run in out_dir
// removed (the input ids files kept), and all of it committed; report.run and report.outputs
// filled.
void commit_analysis(const AnalyzeConfig& config, nlohmann::json run, OutputSet& out,
                     AnalyzeReport& report, std::uint64_t need, std::uint64_t max_memory,
                     std::chrono::steady_clock::time_point start);

}  // namespace mha
