// `mha run --model DIR`: a whole checkpoint from text or token ids
// (run/model_run.hpp, docs/models.md). Its options are one key table
// (run/model_options.hpp): the table's model-only keys become flags here, its
// keys of both kinds of runs are the Config's flags (out_dir, save_attention,
// save_hidden_states, threads, max_memory, dtype), and every other Config key
// is refused with --model, as the model-only flags are without it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "mha/run/model_options.hpp"
#include "mha/run/model_run.hpp"

namespace mha::cli {

// `mha run --help`'s headings: the options of every run, of layer runs, of model runs.
extern const char* const kEveryRunGroup;
extern const char* const kLayerRunGroup;
extern const char* const kModelRunGroup;
// The heading of an option of `applies`.
const char* run_group(RunKind applies);

// The table's model-only options as CLI11 options of `mha run`; their values
// stay text until the table's setters check them (model_flag_value).
struct ModelArgs {
  std::map<std::string, CLI::Option*> options;            // by name, without "--"
  std::map<std::string, std::string> values;              // a single value's storage
  std::map<std::string, std::vector<std::string>> lists;  // a repeated option's
  bool given(const std::string& name) const;
  // The model-only options given ("--text", ...), in the table's order.
  std::vector<std::string> given_names() const;
};

void add_model_options(CLI::App& run, ModelArgs& args);

// A model run from the flags: `model` the model-only options, `config_options`
// the Config's flags by name (those of both kinds of runs are taken, any
// other given is refused naming it), `html` for view.html. Exit codes as
// `mha run`'s: 0 written, 2 bad input (nothing written), 1 anything else.
int do_model_run(const ModelArgs& model, const std::map<std::string, CLI::Option*>& config_options,
                 bool html, bool print_json);
// The run itself, logged as `mha run --model` logs it (also for `mha run
// --config FILE` with a model job, run/model_job.hpp).
// `print_top_k`: log each row's top next tokens (classes) with their probabilities.
int run_model_job(const ModelRunConfig& config, bool print_json, bool print_top_k = false);

}  // namespace mha::cli
