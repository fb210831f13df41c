// run.json and results rows: the one place a RunReport becomes JSON and JSON
// becomes a RunReport. Everything else reads the report's fields.
//
//   const mha::RunReport r = mha::read_run_report("out/default/run.json");
//   double ms = r.timings.compute_ms;                   // a field, not a key
//   std::string text = mha::to_json(r).dump(2) + "\n";  // run.json's bytes again
//
// The keys are those of schemas/run.schema.json and docs/outputs.md; nlohmann::json
// keeps object keys sorted, so the bytes depend only on the values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/run/model_run.hpp"
#include "mha/run/report.hpp"
#include "mha/run/sweep.hpp"

namespace mha {

// run.json's "blas" and "kernels" objects, which `mha bench --json` shares:
// the one place the kernel's BlasInfo and the vector kernels become JSON.
nlohmann::json to_json(const BlasInfo& blas);
nlohmann::json to_json(const KernelReport& kernels);
// What this process computes with, for a model run's or an analysis's
// run.json: {"blas": ..., "kernels": ...} as an attention run's, and
// "bf16_gemm" (the backend) when `dtype` is bfloat16.
nlohmann::json compute_json(ComputeType dtype);

// A model run's run.json (`mha run --model`, docs/models.md): "mode":
// "model", the model (type, sizes, files with their crc32s), the input's
// shape, the maps' layers and heads, the top-k next tokens, memory and
// timings, the outputs. And its tokens.json: {"ids", "lengths", "tokens"}.
nlohmann::json to_json(const ModelRunReport& report);
// A model run's "attention": the maps' layers and heads, and how their weights
// follow from q.npy and k.npy (the view's neuron view): softmax, over the keys
// the mask keeps (causal, key padding, each layer's window; 0 = none), of the
// logits scale * q.k, soft-capped (softcap > 0: c tanh(logits / c)).
// An image model's input as run.json's "input" adds it: each image file (path,
// bytes, crc32, stored size, format, what was converted), patch_grid, patch_size and
// prefix_tokens (the tokens before the patches: [CLS], and DeiT's [DIST]).
nlohmann::json image_input_json(const ModelInput& in, const ModelConfig& c);
nlohmann::json attention_json(const ModelConfig& c, const std::vector<std::size_t>& layers,
                              const std::vector<std::size_t>& heads);
nlohmann::json tokens_json(const ModelInput& input);
// An encoder-decoder run's tokens.json: the source as tokens_json's keys,
// and "target": the decoder's inputs as tokens_json's keys plus "labels",
// the target's ids as given (each row's real ones), and "label_tokens" their
// display texts when `labels` holds them (Model::name_tokens).
nlohmann::json seq2seq_tokens_json(const ModelInput& source, const ModelInput& decoder,
                                   const ModelInput& labels);
// An image model's preprocessing, as run.json's "preprocessing" records it.
nlohmann::json preprocessing_json(const ImageProcessor& p);
// A model run's run.json as the viewer shows it, with the token strings of
// the tokens.json beside it; nullopt when `path` is not a model run's.
struct ModelRunView {
  nlohmann::json run_json;
  std::vector<std::vector<std::string>> tokens;  // display texts
  std::vector<std::vector<std::string>> pieces;  // tokenizer.json's pieces (empty if absent)
  // An encoder-decoder's decoder inputs (tokens.json's "target"); empty otherwise.
  std::vector<std::vector<std::string>> target_tokens, target_pieces;
  std::vector<std::vector<std::string>> label_tokens;  // the target's own tokens ("label_tokens")
  // Each row's real tokens ("lengths", and the target's): rows are padded on the right.
  // When tokens.json has none, each row's count of tokens.
  std::vector<std::size_t> lengths, target_lengths;
};
std::optional<ModelRunView> read_model_run_view(const std::string& path);

// run.json's contents. Optional parts (output_stats, attention_stats,
// layer_stats, attention_axes, bf16_gemm, kernels) are left out when unset.
nlohmann::json to_json(const RunReport& report);

// The report a run.json holds, from this or an older mha of the same
// schema_version: optional keys may be missing. Throws mha::Error
// (invalid_input) naming `path` and the key when a required key is missing or
// of the wrong type, or a config key is refused (Config::apply's message).
RunReport run_report_from_json(const nlohmann::json& j, const std::string& path);

// The file at `path` read and parsed as above; a file that cannot be read or
// is not a JSON object is an error naming it.
RunReport read_run_report(const std::string& path);

// One line of results: run identity, swept values, resolved sizes, timings,
// GFLOP/s, output checksum and statistics, and attention statistics when the
// run computed attention. `extra` adds or overrides fields (wall_ms,
// finished_at, status, exit_code, error).
nlohmann::ordered_json result_row(const Sweep& sweep, const SweepRun& run, const RunReport& report,
                                  const nlohmann::json& extra);
// One line of results of a model job (`mha run --model`, `mha analyze`) from
// its run.json: run identity, swept values, the model's sizes, the input's
// shape, timings and each method's summary (loss and perplexity, the logit
// lens's top-1 agreement per layer, the corpus's per-layer head statistics).
nlohmann::ordered_json model_result_row(const Sweep& sweep, const SweepRun& run,
                                        const nlohmann::json& run_json,
                                        const nlohmann::json& extra);
// A row for a run that failed: identity, swept values, exit code and error.
nlohmann::ordered_json failed_row(const Sweep& sweep, const SweepRun& run, int exit_code,
                                  const std::string& error, const nlohmann::json& extra);

}  // namespace mha
