// `mha analyze --model DIR --text SOURCE --target_text TARGET` on an
// encoder-decoder (T5, BART): loss, rollout, norms and head ablation on the
// teacher-forced pass (checkpoint/seq2seq_analysis.hpp), each kind of map in
// its own array, all-or-nothing as every analysis writes.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/checkpoint/forward.hpp"
#include "mha/checkpoint/seq2seq_analysis.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/output_set.hpp"
#include "mha/model/memory.hpp"
#include "mha/run/analyze.hpp"
#include "mha/run/model_job.hpp"
#include "mha/run/run_json.hpp"

namespace mha {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

bool wants(const AnalyzeConfig& c, const char* method) {
  return std::find(c.methods.begin(), c.methods.end(), method) != c.methods.end();
}

const char* kind_name(MapKind k) {
  return k == MapKind::encoder ? "encoder" : k == MapKind::decoder ? "decoder" : "cross";
}

}  // namespace

AnalyzeReport run_analyze_seq2seq(const AnalyzeConfig& config, const Model& whole) {
  const auto start = Clock::now();
  const Checkpoint& model = whole.checkpoint();
  const ModelConfig& c = model.config();
  check_seq2seq_flags(whole, config.model,
                      {config.texts, config.tokens, config.target_texts, config.target_tokens,
                       !config.images.empty()});
  for (const std::string& m : config.methods)
    if (m != "loss" && m != "rollout" && m != "norms" && m != "ablation")
      fail_input("--method " + m + ": not for an encoder-decoder (" + c.model_type +
                 "); its analyses are loss, rollout, norms and ablation");
  if (config.texts.empty() && !config.tokens)
    fail_input("--model: expected the source as --text \"...\" (repeatable) or --tokens FILE.npy");
  if (config.ablation != "zero" && config.ablation != "mean")
    fail_input("--ablation " + echo(config.ablation) + ": expected zero or mean");
  const Metric metric = metric_of(config.metric, config.target, config.foil);
  const bool lm_methods = wants(config, "loss") || wants(config, "ablation");
  if (lm_methods && !c.has_lm_head())
    fail_input(config.model + ": a " + c.model_type +
               " has no LM head; loss and ablation need the target's predictions");
  // Layer indices name a layer of both stacks, as `mha run`'s; unset, every layer of each.
  const ModelCall call =
      check_seq2seq_call(c, {true, config.layers, config.heads, config.top_k, config.threads});
  const int threads = resolve_threads(call.threads);
  Seq2SeqSides sides = read_seq2seq_sides(
      whole, {config.texts, config.tokens, config.target_texts, config.target_tokens});
  ModelInput& source = sides.source;
  const ModelInput& labels = sides.target.labels;
  const ModelInput& decoder = sides.target.decoder;
  InterventionOptions io =
      intervention_options(whole, call, config.metric, config.target, config.foil);
  const std::vector<std::size_t>& layers = call.map_layers;
  io.layers = layers;
  const std::size_t B = source.B, S = source.T, T = labels.T, h = c.h, Hs = call.map_heads.size();
  const auto layers_of = [&](std::size_t n) {
    return std::size_t(std::lower_bound(layers.begin(), layers.end(), n) - layers.begin());
  };
  const std::size_t Le = c.num_layers, Ld = c.num_decoder_layers, Les = layers_of(Le),
                    Lds = layers_of(Ld);

  // Memory: the pass, one layer's maps of each kind and their value norms, the
  // rollouts (double), the vocabulary's logits, and a second encoder output.
  const std::uint64_t maps = std::uint64_t(B) * h * (S * S + T * T + T * S);
  std::uint64_t need = seq2seq_memory(c, model.layer_float32_bytes(), B, S, T, threads);
  if (wants(config, "rollout") || wants(config, "norms"))
    need += 4 * maps + 8 * std::uint64_t(B) * h * (S + T + S);
  if (wants(config, "rollout")) need += 8 * 2 * std::uint64_t(B) * (S * S + T * T + T * S);
  if (wants(config, "norms")) need += 4 * std::uint64_t(threads) * std::max(S, T) * std::max(S, T);
  if (lm_methods) need += 4 * std::uint64_t(std::min<std::size_t>(B * T, 256)) * c.vocab_size;
  if (wants(config, "ablation")) need += 8 * std::uint64_t(B) * (S + T) * c.d_model;
  const std::uint64_t max_memory = config.max_memory ? *config.max_memory : default_max_memory();
  if (need > max_memory)
    fail_input(config.model + ": the analysis needs about " + format_bytes(need) +
               ", over max_memory " + format_bytes(max_memory));
  if (config.check_only) return {};

  Seq2SeqBatch in;
  in.source = source.ids.data();
  in.B = B, in.S = S, in.T = T;
  in.source_lengths = source.lengths;
  in.target_lengths = decoder.lengths;
  in.decoder_ids = decoder.ids.data();
  in.labels = labels.ids.data();

  OutputSet out(config.out_dir);
  json arrays = json::object(), summary = json::object();
  AnalyzeReport report;
  auto add = [&](const std::string& name, std::vector<std::size_t> shape, const std::string& what) {
    arrays[name] = {{"shape", shape}, {"meaning", what}};
    report.outputs.push_back(name);
  };
  const MapKind kinds[3] = {MapKind::encoder, MapKind::decoder, MapKind::cross};
  auto queries = [&](MapKind k) { return k == MapKind::encoder ? S : T; };
  auto keys = [&](MapKind k) { return k == MapKind::decoder ? T : S; };
  auto stack_layers = [&](MapKind k, bool chosen) {
    return k == MapKind::encoder ? (chosen ? Les : Le) : (chosen ? Lds : Ld);
  };
  const std::string side[3] = {"source", "target", "target"},
                    key_side[3] = {"source", "target", "source"};

  if (wants(config, "loss") || wants(config, "rollout") || wants(config, "norms")) {
    const OutputSet::NpyStream* rollout[3] = {nullptr, nullptr, nullptr};
    const OutputSet::NpyStream* norms[3] = {nullptr, nullptr, nullptr};
    for (MapKind k : kinds) {
      const std::string name = kind_name(k);
      if (wants(config, "rollout"))
        rollout[int(k)] = &out.stage_npy_stream(name + "_rollout.npy", DType::f4,
                                                {stack_layers(k, false), B, queries(k), keys(k)});
      if (wants(config, "norms"))
        norms[int(k)] = &out.stage_npy_stream(name + "_attention_norms.npy", DType::f4,
                                              {stack_layers(k, true), B, Hs, queries(k), keys(k)});
    }
    Seq2SeqMapOptions mo;
    mo.rollout = wants(config, "rollout");
    mo.norms = wants(config, "norms");
    mo.layers = layers;
    mo.heads = call.map_heads;
    mo.threads = threads;
    mo.rollout_sink = [&](MapKind k, std::size_t l, std::size_t b, const float* R) {
      const std::size_t n = queries(k) * keys(k);
      rollout[int(k)]->write_elements((l * B + b) * n, R, n);
    };
    mo.norms_sink = [&](MapKind k, std::size_t slot, std::size_t b, std::size_t hs,
                        const float* v) {
      const std::size_t n = queries(k) * keys(k);
      norms[int(k)]->write_elements(((slot * B + b) * Hs + hs) * n, v, n);
    };
    const ForwardResult r = analyze_seq2seq_maps(model, in, mo);
    ForwardResult finite;
    finite.output = r.output;
    check_finite_output(finite, config.model);
    if (wants(config, "loss")) {
      const std::vector<double> loss = seq2seq_token_loss(model, r.output.data(), in, threads);
      double sum = 0;
      std::size_t n = 0;
      for (double v : loss)
        if (!std::isnan(v)) sum += v, ++n;
      const double mean = n ? sum / double(n) : std::nan("");
      out.stage_npy("loss.npy", loss.data(), {B, T});
      add("loss.npy", {B, T},
          "cross-entropy (nats) of target token t at decoder position t (the target shifted "
          "right is what the decoder reads); NaN past each row's target");
      summary["loss"] = {{"mean", mean}, {"perplexity", std::exp(mean)}, {"tokens", n}};
      report.summary.push_back("loss: " + std::to_string(mean) + " nats over " + std::to_string(n) +
                               " target tokens, perplexity " + std::to_string(std::exp(mean)));
    }
    if (wants(config, "rollout")) {
      add("encoder_rollout.npy", {Le, B, S, S},
          "the encoder's attention rollout up to layer l: the product of 0.5 A + 0.5 I (heads' "
          "mean, rows renormalised); row i: how much of each source token reaches position i");
      add("decoder_rollout.npy", {Ld, B, T, T},
          "the decoder's rollout over both inputs up to layer l, its target part: per layer M <- "
          "Â_self M, then M <- 0.5 M + 0.5 [0 | Ā_cross R_enc]; row t: how much of each decoder "
          "input reaches position t");
      add("cross_rollout.npy", {Ld, B, T, S},
          "its source part: how much of each source token reaches decoder position t (through "
          "the cross-attention and the encoder's rollout R_enc); with decoder_rollout each row "
          "sums to 1");
    }
    if (wants(config, "norms"))
      for (MapKind k : kinds)
        add(std::string(kind_name(k)) + "_attention_norms.npy",
            {stack_layers(k, true), B, Hs, queries(k), keys(k)},
            std::string("||a_ij f_h(x_j)||, f_h(x) = (x W_V^h + b_V^h) W_O^h, of the ") +
                kind_name(k) + " attention: each head's weight times the norm of what key j (" +
                key_side[int(k)] + ") sends to query i (" + side[int(k)] +
                "), layers and heads as chosen");
  }
  if (wants(config, "ablation")) {
    const Ablation kind = config.ablation == "mean" ? Ablation::mean : Ablation::zero;
    const auto t0 = Clock::now();
    // One pass per head: both stacks' weights read once when they fit beside the pass.
    std::vector<TransformerLayer<float>> encoder_layers, decoder_layers;
    if (need + model.layer_float32_bytes() * (Le + Ld) <= max_memory) {
      encoder_layers = read_layers(model, threads, Stack::main);
      decoder_layers = read_layers(model, threads, Stack::decoder);
      io.layers_read = &encoder_layers;
      io.decoder_layers_read = &decoder_layers;
    }
    const Seq2SeqAblation a = seq2seq_head_ablation(model, in, kind, io);
    const std::string effect =
        metric == Metric::kl
            ? "KL(clean || ablated) of the last target position's prediction"
            : std::string(to_string(metric)) + "(ablated) - " + to_string(metric) + "(clean)" +
                  (metric == Metric::loss ? ", the loss the mean over the row's target tokens"
                                          : " at the row's last target position");
    for (MapKind k : kinds) {
      const std::string name = std::string(kind_name(k)) + "_ablation.npy";
      const std::vector<double>& e = k == MapKind::encoder   ? a.encoder
                                     : k == MapKind::decoder ? a.decoder
                                                             : a.cross;
      out.stage_npy(name, e.data(), {B, stack_layers(k, true), Hs});
      add(name, {B, stack_layers(k, true), Hs},
          std::string("per row, each chosen head of the ") + kind_name(k) +
              " attention replaced by " +
              (kind == Ablation::zero ? "zero" : "its mean over the row's queries") + ": " +
              effect);
    }
    summary["ablation"] = {{"kind", to_string(kind)}, {"metric", to_string(metric)},
                           {"clean", a.clean},        {"passes", a.passes},
                           {"ms", ms_since(t0)},      {"weights_held", io.layers_read != nullptr}};
    report.summary.push_back("ablation: " + std::to_string((Les + 2 * Lds) * Hs) +
                             " heads (encoder, decoder, cross) in " + std::to_string(a.passes) +
                             " forwards, " + std::to_string(ms_since(t0)) + " ms");
  }
  if (source.tokens.empty()) whole.name_tokens(source);
  out.stage_bytes("tokens.json", dump_json(seq2seq_tokens_json(source, decoder, labels)) + "\n");
  report.outputs.insert(report.outputs.begin(), "tokens.json");

  json run;
  run["mode"] = "analyze";
  run["version"] = MHA_VERSION;
  run["model"] = {{"dir", config.model},
                  {"model_type", c.model_type},
                  {"encoder_decoder", true},
                  {"num_layers", c.num_layers},
                  {"num_decoder_layers", c.num_decoder_layers},
                  {"d_model", c.d_model},
                  {"h", c.h},
                  {"head_dim", c.head_dim},
                  {"vocab_size", c.vocab_size}};
  run["methods"] = config.methods;
  run["config"] = to_json(config);
  run["input"] = {{"batch", B},
                  {"seq_len", S},
                  {"lengths", source.lengths},
                  {"target_len", T},
                  {"target_lengths", decoder.lengths}};
  run["layers"] = layers;
  run["heads"] = call.map_heads;
  run["arrays"] = arrays;
  run["summary"] = summary;
  run["threads"] = threads;
  commit_analysis(config, std::move(run), out, report, need, max_memory, start);
  return report;
}

}  // namespace mha
