// `mha run --model DIR`: a whole checkpoint from text or token ids
// (run/model_run.hpp, docs/models.md). The options are `mha run`'s, plus the
// model's own; of the config keys, out_dir, save_attention,
// save_hidden_states, threads and max_memory apply, and any other is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "mha/model/config.hpp"
#include "mha/run/model_run.hpp"

namespace mha::cli {

struct ModelArgs {
  std::string model, tokens;
  std::optional<std::string> layers, heads;  // given but empty is refused, not "all"
  std::vector<std::string> texts;
  std::vector<std::string> images;  // PNG or JPEG files (image models)
  // Encoder-decoders: the decoder's side (one per --text), or its ids.
  std::vector<std::string> target_texts;
  std::string target_tokens;
  // Checked by check_model_call, with mha.Model's; given: each row's top tokens are printed.
  std::optional<std::int64_t> top_k;
  bool save_qk = false;
  std::string save_sites;  // --save_sites PATTERNS
  bool html = false;       // --html: view.html beside the outputs (turns on save_attention)
};

void add_model_options(CLI::App& run, ModelArgs& args);

// "3,5" -> {3, 5}; throws mha::Error (invalid_input) naming --option.
std::vector<std::int64_t> index_list(const std::string& text, const char* option);

// `config` holds the config keys given (flags, already checked), `given`
// their names. Exit codes as `mha run`'s: 0 written, 2 bad input (nothing
// written), 1 anything else.
int do_model_run(const ModelArgs& args, const Config& config, const std::vector<std::string>& given,
                 bool print_json);
// The run itself, logged as `mha run --model` logs it (also for `mha run
// --config FILE` with a model job, run/model_job.hpp).
// `print_top_k`: log each row's top next tokens (classes) with their probabilities.
int run_model_job(const ModelRunConfig& config, bool print_json, bool print_top_k = false);

}  // namespace mha::cli
