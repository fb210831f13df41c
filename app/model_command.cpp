#include "model_command.hpp"

#include <iostream>
#include <set>

#include <spdlog/spdlog.h>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/io/json_text.hpp"
#include "mha/run/model_run.hpp"
#include "mha/run/run_json.hpp"

namespace mha::cli {

// "3,5" -> {3, 5}.
std::vector<std::int64_t> index_list(const std::string& text, const char* option) {
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0)
      throw Error(ErrorKind::invalid_input,
                  std::string("--") + option + ": expected indices such as 3,5, got " + echo(text));
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

void add_model_options(CLI::App& run, ModelArgs& args) {
  run.add_option("--model", args.model,
                 "a checkpoint directory (config.json, model.safetensors or its index, "
                 "tokenizer.json): run the whole model (docs/models.md)")
      ->type_name("DIR");
  run.add_option("--text", args.texts, "--model: a text to tokenize (repeat for a batch)")
      ->type_name("TEXT")
      ->allow_extra_args(false);
  run.add_option("--image", args.images,
                 "--model: a PNG or JPEG file for an image model (vit; repeat for a batch)")
      ->type_name("FILE")
      ->allow_extra_args(false);
  run.add_option("--tokens", args.tokens, "--model: .npy of token ids, (T) or (B, T)")
      ->type_name("PATH");
  run.add_option("--target_text", args.target_texts,
                 "--model: encoder-decoders (t5, bart): the decoder's text, teacher-forced (one "
                 "per --text)")
      ->type_name("TEXT")
      ->allow_extra_args(false);
  run.add_option("--target_tokens", args.target_tokens,
                 "--model: encoder-decoders: .npy of the target's token ids, (T) or (B, T)")
      ->type_name("PATH");
  run.add_option("--layer_indices", args.layers, "--model: layers whose maps are written, e.g. 3,5")
      ->type_name("LIST");
  run.add_option("--head_indices", args.heads, "--model: heads whose maps are written, e.g. 0,2")
      ->type_name("LIST");
  run.add_flag("--save_qk", args.save_qk,
               "--model: also write q.npy and k.npy, the queries and keys of the maps written "
               "(the view's neuron view)");
  run.add_option("--save_sites", args.save_sites,
                 "--model: write these activation sites to sites/NAME.npy: names or globs, "
                 "comma-separated, e.g. 'blocks.*.attn.hook_z,hook_resid_post' (docs/models.md)")
      ->type_name("PATTERNS");
  run.add_option("--top_k", args.top_k,
                 "--model: next tokens reported for causal LMs (default 5; given: printed per row)")
      ->type_name("INT");
}

int do_model_run(const ModelArgs& args, const Config& config, const std::vector<std::string>& given,
                 bool print_json) {
  static const std::set<std::string> apply = {"out_dir", "save_attention", "save_hidden_states",
                                              "threads", "max_memory",     "dtype"};
  for (const std::string& key : given) {
    if (key == "repeat")
      throw Error(ErrorKind::invalid_input,
                  "--repeat: not supported with --model (it times one layer or stack's compute; "
                  "bench/model_forward.py --repeat times a whole model)");
    if (!apply.count(key))
      throw Error(ErrorKind::invalid_input,
                  "--" + key +
                      ": not used with --model (the model's config.json sets it); "
                      "with --model give out_dir, save_attention, save_hidden_states, threads, "
                      "max_memory, dtype");
  }
  ModelRunConfig mc;
  mc.model = args.model;
  mc.texts = args.texts;
  mc.images = args.images;
  mc.target_texts = args.target_texts;
  if (!args.target_tokens.empty()) mc.target_tokens = args.target_tokens;
  if (!args.tokens.empty()) mc.tokens = args.tokens;
  mc.out_dir = config.out_dir;
  // q and k are written for the maps written, and the page draws the maps: either turns them on.
  mc.save_attention = config.save_attention || args.save_qk || args.html;
  mc.save_hidden_states = config.save_hidden_states;
  mc.save_qk = args.save_qk;
  mc.save_sites = args.save_sites;
  mc.threads = config.threads;
  mc.max_memory = config.max_memory;
  mc.dtype = to_string(config.dtype);
  mc.top_k = args.top_k.value_or(mc.top_k);
  if (args.layers) mc.layers = index_list(*args.layers, "layer_indices");
  if (args.heads) mc.heads = index_list(*args.heads, "head_indices");
  return run_model_job(mc, print_json, args.top_k.has_value());
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
