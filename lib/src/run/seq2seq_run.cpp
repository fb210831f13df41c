// `mha run --model DIR --text SOURCE --target_text TARGET` on an
// encoder-decoder (T5, BART): the encoder over the source, the decoder
// teacher-forced over the target shifted right (pipeline/seq2seq.hpp), the
// three kinds of maps and both stacks' hidden states, all-or-nothing as every
// run writes.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/config/memory.hpp"
#include "mha/io/checksum.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/out_dir.hpp"
#include "mha/io/output_set.hpp"
#include "mha/pipeline/seq2seq.hpp"
#include "mha/pipeline/site_hooks.hpp"
#include "mha/run/model_run.hpp"
#include "mha/run/run_json.hpp"
#include "mha/run/site_files.hpp"

namespace mha {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

Seq2SeqInput seq2seq_target(const Model& model, const ModelInput& labels) {
  Seq2SeqInput in;
  in.labels = labels;
  ModelInput& dec = in.decoder;
  dec.B = labels.B;
  dec.T = labels.T;
  dec.lengths = labels.lengths;
  dec.tokenizer = labels.tokenizer;
  dec.ids = decoder_inputs(model.config(), labels.ids.data(), labels.B, labels.T);
  model.name_tokens(dec);
  // Past each row's real inputs the shift leaves target ids or padding: shown as padding.
  for (std::size_t b = 0; b < dec.B; ++b)
    for (std::size_t t = dec.lengths[b]; t < dec.T; ++t)
      dec.tokens[b][t] = dec.pieces[b][t] = "<pad>";
  return in;
}

void check_seq2seq_flags(const Model& model, const std::string& dir, const Seq2SeqFlags& f) {
  const ModelConfig& c = model.config();
  const bool target = f.target_tokens || !f.target_texts.empty();
  if (target && !c.encoder_decoder)
    fail_input(std::string(f.target_tokens ? "--target_tokens" : "--target_text") + ": a " +
               c.model_type + " (" + dir +
               ") is not an encoder-decoder; a target is for T5 and BART checkpoints");
  if (!target)
    fail_input("--model " + dir + ": a " + c.model_type +
               " is an encoder-decoder; give the decoder's side as --target_text \"...\" (one per "
               "--text) or --target_tokens FILE.npy");
  if (f.target_tokens && !f.target_texts.empty())
    fail_input("--target_tokens and --target_text: give one of them, not both");
  if (f.images) fail_input("--image: a " + c.model_type + " reads text, not images");
  if (!f.target_texts.empty() && f.target_texts.size() != f.texts.size())
    fail_input("--target_text: given " + std::to_string(f.target_texts.size()) + " times for " +
               std::to_string(f.texts.size()) + " --text; expected one target per source text");
}

Seq2SeqSides read_seq2seq_sides(const Model& model, const Seq2SeqFlags& f) {
  Seq2SeqSides sides;
  sides.source = f.tokens ? read_token_ids(model, *f.tokens) : model.encode(f.texts);
  const ModelInput labels =
      f.target_tokens ? read_token_ids(model, *f.target_tokens) : model.encode(f.target_texts);
  if (labels.B != sides.source.B)
    fail_input(std::string(f.target_tokens ? *f.target_tokens : "--target_text") + ": " +
               std::to_string(labels.B) + " target rows for " + std::to_string(sides.source.B) +
               " source rows; expected one target per source");
  sides.target = seq2seq_target(model, labels);
  model.name_tokens(sides.target.labels);
  return sides;
}

ModelCall check_seq2seq_call(const ModelConfig& c, const ModelCallOptions& o) {
  ModelConfig both = c;
  both.num_layers = std::min(c.num_layers, c.num_decoder_layers);
  ModelCall call = check_model_call(both, o);
  if (o.attention && !o.layers) {
    call.map_layers.clear();
    for (std::size_t l = 0; l < std::max(c.num_layers, c.num_decoder_layers); ++l)
      call.map_layers.push_back(l);
  }
  return call;
}

ModelRunReport run_seq2seq(const ModelRunConfig& config, const Model& whole) {
  const auto start = Clock::now();
  const Checkpoint& model = whole.checkpoint();
  const ModelConfig& c = model.config();
  check_seq2seq_flags(whole, config.model,
                      {config.texts, config.tokens, config.target_texts, config.target_tokens,
                       !config.images.empty()});
  if (config.save_qk) fail_input("--save_qk: not supported for encoder-decoder models");
  ModelRunReport report;
  report.config = config;
  report.model = c;
  report.dir = config.model;
  Seq2SeqSides sides = read_seq2seq_sides(
      whole, {config.texts, config.tokens, config.target_texts, config.target_tokens});
  report.input = std::move(sides.source);
  const ModelInput& labels = sides.target.labels;
  const ModelCall call = check_seq2seq_call(
      c, {config.save_attention, config.layers, config.heads, config.top_k, config.threads});
  report.map_layers = call.map_layers;
  report.map_heads = call.map_heads;
  report.threads = resolve_threads(call.threads);
  const std::size_t B = report.input.B, S = report.input.T, T = labels.T, d = c.d_model;
  report.memory_estimate = seq2seq_memory(c, model.layer_float32_bytes(), B, S, T, report.threads);
  report.max_memory = config.max_memory ? *config.max_memory : default_max_memory();
  if (report.memory_estimate > report.max_memory)
    fail_input(config.model + ": the run needs about " + format_bytes(report.memory_estimate) +
               " (one layer's weights in float32, " + format_bytes(model.layer_float32_bytes()) +
               ", plus activations for " + std::to_string(B) + " x (" + std::to_string(S) + " + " +
               std::to_string(T) + ") tokens), over max_memory " + format_bytes(report.max_memory));
  // --save_sites: checked against both stacks' sites before any weight is read
  const std::vector<SiteShape> sites = sites_to_save(c, B, S, T, config.save_sites);
  if (config.check_only) return report;
  report.files.push_back(file_record(config.model + "/config.json"));
  if (!whole.tokenizer_path().empty()) report.files.push_back(file_record(whole.tokenizer_path()));
  const std::vector<std::string> weights = model.weight_files();
  const std::vector<std::uint64_t> headers = model.weight_header_bytes();
  for (std::size_t i = 0; i < weights.size(); ++i)
    report.files.push_back(file_record(weights[i], headers[i]));
  report.stored_dtypes = model.stored_dtypes();

  // Each stack's maps: the layers selected that it has.
  auto layers_of = [&](std::size_t n) {
    return static_cast<std::size_t>(
        std::lower_bound(report.map_layers.begin(), report.map_layers.end(), n) -
        report.map_layers.begin());
  };
  const std::size_t Le = layers_of(c.num_layers), Ld = layers_of(c.num_decoder_layers),
                    Hs = report.map_heads.size();
  OutputSet out(config.out_dir);
  const OutputSet::NpyStream* maps[3] = {nullptr, nullptr, nullptr};
  if (config.save_attention) {
    maps[0] = &out.stage_npy_stream("encoder_attention.npy", DType::f4, {Le, B, Hs, S, S});
    maps[1] = &out.stage_npy_stream("decoder_attention.npy", DType::f4, {Ld, B, Hs, T, T});
    maps[2] = &out.stage_npy_stream("cross_attention.npy", DType::f4, {Ld, B, Hs, T, S});
  }
  // Each stack's hidden states (layers + 1, B, L, d), streamed as the stacks run.
  const OutputSet::NpyStream* hidden[2] = {nullptr, nullptr};
  if (config.save_hidden_states) {
    hidden[0] =
        &out.stage_npy_stream("encoder_hidden_states.npy", DType::f4, {c.num_layers + 1, B, S, d});
    hidden[1] = &out.stage_npy_stream("decoder_hidden_states.npy", DType::f4,
                                      {c.num_decoder_layers + 1, B, T, d});
  }
  ForwardOptions so;
  so.threads = report.threads;
  so.top_k = call.top_k;
  HookList hooks;
  MapHook map_hook(c.h, report.map_layers, report.map_heads,
                   [&](MapKind kind, std::size_t slot, std::size_t b, std::size_t head,
                       std::size_t t0, std::size_t rows, const float* block) {
                     const std::size_t queries = kind == MapKind::encoder ? S : T,
                                       keys = kind == MapKind::decoder ? T : S;
                     maps[static_cast<int>(kind)]->write_elements(
                         (((slot * B + b) * Hs + head) * queries + t0) * keys, block, rows * keys);
                   });
  if (config.save_attention) hooks.add(&map_hook);
  HiddenHook hidden_hook(model, [&](Stack stack, std::size_t i, const float* x) {
    const std::size_t n = B * (stack == Stack::decoder ? T : S) * d;
    hidden[stack == Stack::decoder ? 1 : 0]->write_elements(i * n, x, n);
  });
  if (config.save_hidden_states) hooks.add(&hidden_hook);
  SiteFiles site_files(out, sites);  // --save_sites: each site to sites/<name>.npy
  if (!sites.empty()) hooks.add(&site_files);
  so.hook = hooks.empty() ? nullptr : &hooks;
  const Seq2SeqInput& target_in = sides.target;
  const auto t0 = Clock::now();
  ForwardResult r =
      forward(model, report.input.ids.data(), B, S, report.input.lengths,
              DecoderInput{target_in.decoder.ids.data(), T, target_in.decoder.lengths}, so);
  report.forward_ms = ms_since(t0);
  report.read_ms = r.seconds_read * 1e3;
  report.top_k = std::move(r.top_k);
  if (report.input.tokens.empty()) whole.name_tokens(report.input);
  report.target = target_in.decoder;
  report.labels = labels.ids;
  name_top_k(whole, report);
  check_finite_output(r, config.model);
  site_files.check_complete();
  out.stage_npy("output.npy", r.output.data(), {B, T, d});
  out.stage_bytes("tokens.json",
                  dump_json(seq2seq_tokens_json(report.input, report.target, labels)) + "\n");
  report.outputs = {"tokens.json", "output.npy"};
  if (config.save_attention)
    report.outputs.insert(report.outputs.end(), {"encoder_attention.npy", "decoder_attention.npy",
                                                 "cross_attention.npy"});
  if (config.save_hidden_states)
    report.outputs.insert(report.outputs.end(),
                          {"encoder_hidden_states.npy", "decoder_hidden_states.npy"});
  for (const std::string& name : site_files.filenames()) report.outputs.push_back(name);
  for (const std::string& name : report.outputs) report.checksums[name] = out.checksum(name);
  report.outputs.push_back("run.json");
  report.total_ms = ms_since(start);
  out.stage_bytes("run.json", dump_json(to_json(report), 2) + "\n");
  // An earlier run's outputs in out_dir go in the same commit (the ids files stay).
  const auto is_input = [&](const std::string& p) {
    std::error_code ec;
    return (config.tokens && std::filesystem::equivalent(*config.tokens, p, ec)) ||
           (config.target_tokens && std::filesystem::equivalent(*config.target_tokens, p, ec));
  };
  out.remove_on_commit(
      earlier_site_files(out.dir(), is_input, earlier_run_outputs(out.dir(), is_input)));
  out.commit();
  return report;
}

}  // namespace mha
