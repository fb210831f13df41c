// `mha analyze --model DIR --text SOURCE --target_text TARGET` on an
// encoder-decoder (T5, BART), and mha.Model's analyses of one: loss, rollout,
// norms and head ablation on the teacher-forced pass
// (checkpoint/seq2seq_analysis.hpp), each kind of map in its own array. The
// methods are the registry's (Analysis::encoder_decoder says which take one).
#include "seq2seq.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "mha/analysis/analysis.hpp"
#include "mha/analysis/options.hpp"
#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/checkpoint/seq2seq_analysis.hpp"
#include "mha/io/json_text.hpp"
#include "mha/model/memory.hpp"
#include "mha/run/run_json.hpp"
#include "outputs.hpp"

namespace mha {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool wants(const AnalyzeConfig& c, const char* method) {
  return std::find(c.methods.begin(), c.methods.end(), method) != c.methods.end();
}

const char* kind_name(MapKind k) {
  return k == MapKind::encoder ? "encoder" : k == MapKind::decoder ? "decoder" : "cross";
}
const MapKind kKinds[3] = {MapKind::encoder, MapKind::decoder, MapKind::cross};

// One analysis of an encoder-decoder as it runs.
struct Seq2SeqRun {
  Seq2SeqRun(const AnalyzeConfig& config, const Model& whole, ModelCall call)
      : config(config), whole(whole), call(std::move(call)) {}
  const AnalyzeConfig& config;
  const Model& whole;
  ModelCall call;
  int threads = 1;
  Seq2SeqSides sides;
  Seq2SeqBatch in;
  InterventionOptions io;
  std::uint64_t need = 0, max_memory = 0;
  std::size_t B = 0, S = 0, T = 0, Hs = 0, Le = 0, Ld = 0, Les = 0, Lds = 0;
  AnalysisOutputs* out = nullptr;
  json arrays = json::object(), summary = json::object();
  std::vector<std::string> outputs, lines;

  const Checkpoint& model() const { return whole.checkpoint(); }
  void add(const std::string& name, std::vector<std::size_t> shape, const std::string& what) {
    arrays[name] = {{"shape", shape}, {"meaning", what}};
    outputs.push_back(name);
  }
  std::size_t queries(MapKind k) const { return k == MapKind::encoder ? S : T; }
  std::size_t keys(MapKind k) const { return k == MapKind::decoder ? T : S; }
  std::size_t layers(MapKind k, bool chosen) const {
    return k == MapKind::encoder ? (chosen ? Les : Le) : (chosen ? Lds : Ld);
  }
};

// The methods and options an encoder-decoder takes, checked before its weights are read.
void check(const AnalyzeConfig& config, const ModelConfig& c) {
  for (const std::string& m : config.methods) {
    const Analysis* a = find_analysis(m);
    if (!a || !a->encoder_decoder)
      fail_input("--method " + m + ": not for an encoder-decoder (" + c.model_type +
                 "); its analyses are loss, rollout, norms and ablation");
  }
  if (config.ablation != "zero" && config.ablation != "mean")
    fail_input("--ablation " + echo(config.ablation) + ": expected zero or mean");
  metric_of(config.metric, config.target, config.foil);
  if ((wants(config, "loss") || wants(config, "ablation")) && !c.has_lm_head())
    fail_input(config.model + ": a " + c.model_type +
               " has no LM head; loss and ablation need the target's predictions");
}

// Both sides read, the interventions' options, and the memory against max_memory: the pass, one
// layer's maps of each kind and their value norms, the rollouts (double), the vocabulary's
// logits, and a second encoder output.
void plan(Seq2SeqRun& r) {
  const AnalyzeConfig& config = r.config;
  const ModelConfig& c = r.whole.config();
  const ModelInput& source = r.sides.source;
  const ModelInput& labels = r.sides.target.labels;
  const ModelInput& decoder = r.sides.target.decoder;
  r.in.source = source.ids.data();
  r.in.B = source.B, r.in.S = source.T, r.in.T = labels.T;
  r.in.source_lengths = source.lengths;
  r.in.target_lengths = decoder.lengths;
  r.in.decoder_ids = decoder.ids.data();
  r.in.labels = labels.ids.data();
  r.io = intervention_options(r.whole, r.call, config.metric, config.target, config.foil);
  r.io.layers = r.call.map_layers;
  const std::vector<std::size_t>& layers = r.call.map_layers;
  const auto layers_of = [&](std::size_t n) {
    return std::size_t(std::lower_bound(layers.begin(), layers.end(), n) - layers.begin());
  };
  r.B = source.B, r.S = source.T, r.T = labels.T, r.Hs = r.call.map_heads.size();
  r.Le = c.num_layers, r.Ld = c.num_decoder_layers, r.Les = layers_of(r.Le);
  r.Lds = layers_of(r.Ld);
  const std::size_t B = r.B, S = r.S, T = r.T, h = c.h;
  const std::uint64_t maps = std::uint64_t(B) * h * (S * S + T * T + T * S);
  std::uint64_t need = seq2seq_memory(c, r.model().layer_float32_bytes(), B, S, T, r.threads);
  if (wants(config, "rollout") || wants(config, "norms"))
    need += 4 * maps + 8 * std::uint64_t(B) * h * (S + T + S);
  if (wants(config, "rollout")) need += 8 * 2 * std::uint64_t(B) * (S * S + T * T + T * S);
  if (wants(config, "norms"))
    need += 4 * std::uint64_t(r.threads) * std::max(S, T) * std::max(S, T);
  if (wants(config, "loss") || wants(config, "ablation"))
    need += 4 * std::uint64_t(std::min<std::size_t>(B * T, 256)) * c.vocab_size;
  if (wants(config, "ablation")) need += 8 * std::uint64_t(B) * (S + T) * c.d_model;
  r.need = need;
  if (need > r.max_memory)
    fail_input(config.model + ": the analysis needs about " + format_bytes(need) +
               ", over max_memory " + format_bytes(r.max_memory));
}

void loss_of(Seq2SeqRun& r, const std::vector<float>& output) {
  const std::vector<double> loss = seq2seq_token_loss(r.model(), output.data(), r.in, r.threads);
  double sum = 0;
  std::size_t n = 0;
  for (double v : loss)
    if (!std::isnan(v)) sum += v, ++n;
  const double mean = n ? sum / double(n) : std::nan("");
  r.out->array("loss.npy", DType::f8, {r.B, r.T}, loss.data());
  r.add("loss.npy", {r.B, r.T},
        "cross-entropy (nats) of target token t at decoder position t (the target shifted "
        "right is what the decoder reads); NaN past each row's target");
  r.summary["loss"] = {{"mean", mean}, {"perplexity", std::exp(mean)}, {"tokens", n}};
  r.lines.push_back("loss: " + std::to_string(mean) + " nats over " + std::to_string(n) +
                    " target tokens, perplexity " + std::to_string(std::exp(mean)));
}

void describe_maps(Seq2SeqRun& r) {
  const std::size_t B = r.B, S = r.S, T = r.T;
  if (wants(r.config, "rollout")) {
    r.add("encoder_rollout.npy", {r.Le, B, S, S},
          "the encoder's attention rollout up to layer l: the product of 0.5 A + 0.5 I (heads' "
          "mean, rows renormalised); row i: how much of each source token reaches position i");
    r.add("decoder_rollout.npy", {r.Ld, B, T, T},
          "the decoder's rollout over both inputs up to layer l, its target part: per layer M <- "
          "Â_self M, then M <- 0.5 M + 0.5 [0 | Ā_cross R_enc]; row t: how much of each decoder "
          "input reaches position t");
    r.add("cross_rollout.npy", {r.Ld, B, T, S},
          "its source part: how much of each source token reaches decoder position t (through "
          "the cross-attention and the encoder's rollout R_enc); with decoder_rollout each row "
          "sums to 1");
  }
  const std::string side[3] = {"source", "target", "target"},
                    key_side[3] = {"source", "target", "source"};
  if (wants(r.config, "norms"))
    for (MapKind k : kKinds)
      r.add(std::string(kind_name(k)) + "_attention_norms.npy",
            {r.layers(k, true), B, r.Hs, r.queries(k), r.keys(k)},
            std::string("||a_ij f_h(x_j)||, f_h(x) = (x W_V^h + b_V^h) W_O^h, of the ") +
                kind_name(k) + " attention: each head's weight times the norm of what key j (" +
                key_side[int(k)] + ") sends to query i (" + side[int(k)] +
                "), layers and heads as chosen");
}

// Loss, rollout and norms: one teacher-forced pass, the maps streamed as it gives them.
void maps_pass(Seq2SeqRun& r) {
  const AnalysisOutputs::Stream* rollout[3] = {nullptr, nullptr, nullptr};
  const AnalysisOutputs::Stream* norms[3] = {nullptr, nullptr, nullptr};
  for (MapKind k : kKinds) {
    const std::string name = kind_name(k);
    if (wants(r.config, "rollout"))
      rollout[int(k)] =
          &r.out->stream(name + "_rollout.npy", {r.layers(k, false), r.B, r.queries(k), r.keys(k)});
    if (wants(r.config, "norms"))
      norms[int(k)] = &r.out->stream(name + "_attention_norms.npy",
                                     {r.layers(k, true), r.B, r.Hs, r.queries(k), r.keys(k)});
  }
  Seq2SeqMapOptions mo;
  mo.rollout = wants(r.config, "rollout");
  mo.norms = wants(r.config, "norms");
  mo.layers = r.call.map_layers;
  mo.heads = r.call.map_heads;
  mo.threads = r.threads;
  mo.rollout_sink = [&](MapKind k, std::size_t l, std::size_t b, const float* R) {
    const std::size_t n = r.queries(k) * r.keys(k);
    rollout[int(k)]->write((l * r.B + b) * n, R, n);
  };
  mo.norms_sink = [&](MapKind k, std::size_t slot, std::size_t b, std::size_t hs, const float* v) {
    const std::size_t n = r.queries(k) * r.keys(k);
    norms[int(k)]->write(((slot * r.B + b) * r.Hs + hs) * n, v, n);
  };
  const ForwardResult result = analyze_seq2seq_maps(r.model(), r.in, mo);
  check_finite_output(result, r.config.model);
  if (wants(r.config, "loss")) loss_of(r, result.output);
  describe_maps(r);
}

void ablation(Seq2SeqRun& r) {
  const Ablation kind = r.config.ablation == "mean" ? Ablation::mean : Ablation::zero;
  const Metric metric = r.io.metric;
  const auto t0 = Clock::now();
  // One pass per head: both stacks' weights read once when they fit beside the pass.
  std::vector<TransformerLayer<float>> encoder_layers, decoder_layers;
  if (r.need + r.model().layer_float32_bytes() * (r.Le + r.Ld) <= r.max_memory) {
    encoder_layers = read_layers(r.model(), r.threads, Stack::main);
    decoder_layers = read_layers(r.model(), r.threads, Stack::decoder);
    r.io.layers_read = &encoder_layers;
    r.io.decoder_layers_read = &decoder_layers;
  }
  const Seq2SeqAblation a = seq2seq_head_ablation(r.model(), r.in, kind, r.io);
  const std::string effect =
      metric == Metric::kl
          ? "KL(clean || ablated) of the last target position's prediction"
          : std::string(to_string(metric)) + "(ablated) - " + to_string(metric) + "(clean)" +
                (metric == Metric::loss ? ", the loss the mean over the row's target tokens"
                                        : " at the row's last target position");
  for (MapKind k : kKinds) {
    const std::string name = std::string(kind_name(k)) + "_ablation.npy";
    const std::vector<double>& e = k == MapKind::encoder   ? a.encoder
                                   : k == MapKind::decoder ? a.decoder
                                                           : a.cross;
    r.out->array(name, DType::f8, {r.B, r.layers(k, true), r.Hs}, e.data());
    r.add(name, {r.B, r.layers(k, true), r.Hs},
          std::string("per row, each chosen head of the ") + kind_name(k) +
              " attention replaced by " +
              (kind == Ablation::zero ? "zero" : "its mean over the row's queries") + ": " +
              effect);
  }
  r.summary["ablation"] = {
      {"kind", to_string(kind)}, {"metric", to_string(metric)},
      {"clean", a.clean},        {"passes", a.passes},
      {"ms", ms_since(t0)},      {"weights_held", r.io.layers_read != nullptr}};
  r.io.layers_read = r.io.decoder_layers_read = nullptr;
  r.lines.push_back("ablation: " + std::to_string((r.Les + 2 * r.Lds) * r.Hs) +
                    " heads (encoder, decoder, cross) in " + std::to_string(a.passes) +
                    " forwards, " + std::to_string(ms_since(t0)) + " ms");
}

void compute(Seq2SeqRun& r) {
  if (wants(r.config, "loss") || wants(r.config, "rollout") || wants(r.config, "norms"))
    maps_pass(r);
  if (wants(r.config, "ablation")) ablation(r);
}

json run_json(const Seq2SeqRun& r) {
  const ModelConfig& c = r.whole.config();
  json run;
  run["mode"] = "analyze";
  run["version"] = MHA_VERSION;
  run["model"] = {{"dir", r.config.model},
                  {"model_type", c.model_type},
                  {"encoder_decoder", true},
                  {"num_layers", c.num_layers},
                  {"num_decoder_layers", c.num_decoder_layers},
                  {"d_model", c.d_model},
                  {"h", c.h},
                  {"head_dim", c.head_dim},
                  {"vocab_size", c.vocab_size}};
  run["methods"] = r.config.methods;
  run["config"] = to_json(r.config);
  run["input"] = {{"batch", r.B},
                  {"seq_len", r.S},
                  {"lengths", r.sides.source.lengths},
                  {"target_len", r.T},
                  {"target_lengths", r.sides.target.decoder.lengths}};
  run["layers"] = r.call.map_layers;
  run["heads"] = r.call.map_heads;
  run["arrays"] = r.arrays;
  run["summary"] = r.summary;
  run["threads"] = r.threads;
  return run;
}

}  // namespace

AnalyzeReport run_analyze_seq2seq(const AnalyzeConfig& config, const Model& whole,
                                  std::uint64_t max_memory) {
  const auto start = Clock::now();
  const ModelConfig& c = whole.config();
  const Seq2SeqFlags flags{config.texts, config.tokens, config.target_texts, config.target_tokens,
                           !config.images.empty()};
  check_seq2seq_flags(whole, config.model, flags);
  check(config, c);
  if (config.texts.empty() && !config.tokens)
    fail_input("--model: expected the source as --text \"...\" (repeatable) or --tokens FILE.npy");
  // Layer indices name a layer of both stacks, as `mha run`'s; unset, every layer of each.
  Seq2SeqRun r(
      config, whole,
      check_seq2seq_call(c, {true, config.layers, config.heads, config.top_k, config.threads}));
  r.threads = resolve_threads(r.call.threads);
  r.max_memory = max_memory;
  r.sides = read_seq2seq_sides(
      whole, {config.texts, config.tokens, config.target_texts, config.target_tokens});
  plan(r);
  if (config.check_only) return {};
  FileOutputs out(config.out_dir);
  r.out = &out;
  compute(r);
  ModelInput& source = r.sides.source;
  if (source.tokens.empty()) whole.name_tokens(source);
  OutputSet& set = out.set();
  set.stage_bytes(
      "tokens.json",
      dump_json(seq2seq_tokens_json(source, r.sides.target.decoder, r.sides.target.labels)) + "\n");
  AnalyzeReport report;
  report.outputs = r.outputs;
  report.outputs.insert(report.outputs.begin(), "tokens.json");
  report.summary = r.lines;
  commit_analysis(config, run_json(r), set, report, r.need, max_memory, start);
  return report;
}

AnalysisResult analyze_seq2seq_input(const Model& whole, const AnalyzeConfig& config,
                                     Seq2SeqSides sides, std::uint64_t max_memory) {
  const ModelConfig& c = whole.config();
  check(config, c);
  Seq2SeqRun r(
      config, whole,
      check_seq2seq_call(c, {true, config.layers, config.heads, config.top_k, config.threads}));
  r.threads = resolve_threads(r.call.threads);
  r.max_memory = max_memory;
  r.sides = std::move(sides);
  plan(r);
  MemoryOutputs out;
  r.out = &out;
  compute(r);
  return {std::move(out.arrays), std::move(r.summary)};
}

}  // namespace mha
