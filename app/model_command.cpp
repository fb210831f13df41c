#include "model_command.hpp"

#include <iostream>

#include <spdlog/spdlog.h>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/io/json_text.hpp"
#include "mha/run/model_run.hpp"
#include "mha/run/run_json.hpp"

namespace mha::cli {

const char* const kEveryRunGroup = "Every run";
const char* const kLayerRunGroup =
    "Layer runs: one attention layer or a stack of Transformer layers (docs/config.md)";
const char* const kModelRunGroup = "Model runs: a whole checkpoint, --model DIR (docs/models.md)";

const char* run_group(RunKind applies) {
  return applies == RunKind::model   ? kModelRunGroup
         : applies == RunKind::layer ? kLayerRunGroup
                                     : kEveryRunGroup;
}

bool ModelArgs::given(const std::string& name) const {
  const auto it = options.find(name);
  return it != options.end() && it->second->count() > 0;
}

std::vector<std::string> ModelArgs::given_names() const {
  std::vector<std::string> names;
  for (const ModelRunKey& key : model_run_keys())
    if (given(key.name)) names.push_back(std::string("--") + key.name);
  return names;
}

void add_model_options(CLI::App& run, ModelArgs& args) {
  for (const ModelRunKey& key : model_run_keys()) {
    if (key.applies != RunKind::model) continue;  // the others are the Config's flags
    const std::string flag = std::string("--") + key.name;
    CLI::Option* opt = nullptr;
    if (key.value == FlagValue::texts)
      opt = run.add_option(flag, args.lists[key.name], key.help)->allow_extra_args(false);
    else
      opt = run.add_option(flag, args.values[key.name], key.help);
    if (key.value == FlagValue::flag) opt->expected(0, 1);
    opt->type_name(key.value_hint)->group(kModelRunGroup);
    args.options[key.name] = opt;
  }
}

namespace {

// "--a", "--a and --b", "--a, --b and --c".
std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

// Refuses the Config's flags given with --model that the table does not
// share with layer runs, naming them all.
void refuse_layer_options(const std::map<std::string, CLI::Option*>& config_options) {
  std::vector<std::string> refused;
  for (const auto& [name, opt] : config_options) {
    if (!opt->count() || find_model_run_key(name)) continue;
    if (name == "repeat")
      fail_input(
          "--repeat: not supported with --model (it times one layer or stack's compute; "
          "bench/model_forward.py --repeat times a whole model)");
    refused.push_back("--" + name);
  }
  if (refused.empty()) return;
  std::vector<std::string> shared;
  for (const ModelRunKey& key : model_run_keys())
    if (key.applies == RunKind::both) shared.push_back(key.name);
  std::string list;
  for (std::size_t i = 0; i < shared.size(); ++i) list += (i ? ", " : "") + shared[i];
  fail_input(name_list(refused) + ": not used with --model (the model's config.json sets " +
             (refused.size() == 1 ? "it" : "them") + "); with --model give " + list +
             " and the options mha run --help lists under \"Model runs\"");
}

}  // namespace

int do_model_run(const ModelArgs& model, const std::map<std::string, CLI::Option*>& config_options,
                 bool html, bool print_json) {
  if (!model.given("model")) {
    const std::vector<std::string> names = model.given_names();
    fail_input(name_list(names) + (names.size() == 1 ? ": an option" : ": options") +
               " of whole-model runs (mha run --help lists them under \"Model runs\"); give "
               "--model DIR");
  }
  refuse_layer_options(config_options);
  ModelRunConfig mc;
  for (const ModelRunKey& key : model_run_keys()) {
    const auto& options = key.applies == RunKind::model ? model.options : config_options;
    const auto it = options.find(key.name);
    if (it == options.end() || !it->second->count()) continue;
    key.set(mc, model_flag_value(key, it->second->results()), std::string("--") + key.name);
  }
  // q and k are written for the maps written, and the page draws the maps: either turns them on.
  mc.save_attention = mc.save_attention || mc.save_qk || html;
  return run_model_job(mc, print_json, model.given("top_k"));
}

int run_model_job(const ModelRunConfig& mc, bool print_json, bool print_top_k) {
  const ModelRunReport r = run_model(mc);
  for (const std::string& f : r.outputs) spdlog::info("wrote {}/{}", mc.out_dir, f);
  if (print_top_k) {
    if (r.top_k.empty())
      spdlog::info("top_k: {} has no LM head or classifier to rank", r.model.model_type);
    for (std::size_t b = 0; b < r.top_k.size(); ++b) {
      std::string line;
      for (std::size_t i = 0; i < r.top_k[b].size(); ++i) {
        const bool named = b < r.top_k_tokens.size() && i < r.top_k_tokens[b].size();
        line += fmt::format(
            "{}{} {:.4f}", i ? ", " : "",
            named ? echo(r.top_k_tokens[b][i], 24) : "id " + std::to_string(r.top_k[b][i].id),
            r.top_k[b][i].p);
      }
      spdlog::info("row {} next: {}", b, line);
    }
  }
  spdlog::info(
      "{} ({} layers, d_model {}, h {}), B={} T={}: {:.1f} ms forward ({:.1f} ms reading weights)",
      r.model.model_type, r.model.num_layers, r.model.d_model, r.model.h, r.input.B, r.input.T,
      r.forward_ms, r.read_ms);
  if (print_json) std::cout << dump_json(to_json(r), 2) << std::endl;
  return 0;
}

}  // namespace mha::cli
