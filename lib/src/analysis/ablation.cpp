// `--method ablation`: each chosen head's output zeroed or mean-ablated, the
// change in a metric (pipeline/ablation.hpp's head_ablation): next tokens'
// (a causal LM), classes' (an image classifier, --image), or an
// encoder-decoder's target's (each kind of attention's heads).
#include <string>

#include "mha/analysis/analysis.hpp"
#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/checkpoint/family.hpp"

namespace mha {

namespace {

using nlohmann::json;

void check_options(const AnalyzeConfig& config) {
  if (config.ablation != "zero" && config.ablation != "mean")
    fail_input("--ablation " + echo(config.ablation) + ": expected zero or mean");
}

void check(AnalysisRun& run) {
  // An image classifier's metric is on its classes: a ViTModel has none.
  if (!run.in.pixels.empty()) check_intervention_head(run.model());
}

std::string meaning(const ModelConfig& c, Ablation kind, Metric metric) {
  const std::string of = c.classifier ? " of the classes" : " of the next token";
  return std::string("per row, each chosen head's output replaced by ") +
         (kind == Ablation::zero ? "zero" : "its mean over the row's positions") + ": " +
         (metric == Metric::kl
              ? "KL(clean || ablated)" + of
              : std::string(to_string(metric)) + "(ablated) - " + to_string(metric) + "(clean)") +
         (c.classifier && metric == Metric::loss
              ? ", loss being the cross-entropy of the class the clean run predicts "
                "(summary.ablation.predicted)"
          : c.classifier && metric == Metric::logit_diff
              ? ", logit_diff being the classifier's logit(target) - logit(foil)"
              : "");
}

// An encoder-decoder's: each head of each kind (encoder, decoder, cross), one pass per head,
// both stacks' weights read once when they fit beside the plan.
void seq2seq_ablation(AnalysisRun& run) {
  const AnalysisStacks& st = run.stacks;
  const std::size_t B = run.in.B, Hs = run.call.map_heads.size();
  const Ablation kind = run.config.ablation == "mean" ? Ablation::mean : Ablation::zero;
  const Metric metric = run.io.metric;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<TransformerLayer<float>> encoder_layers, decoder_layers;
  if (run.need + run.model().layer_float32_bytes() * (st.Le + st.Ld) <= run.max_memory) {
    encoder_layers = read_layers(run.model(), run.threads, Stack::main);
    decoder_layers = read_layers(run.model(), run.threads, Stack::decoder);
    run.io.layers_read = &encoder_layers;
    run.io.decoder_layers_read = &decoder_layers;
  }
  const AblationResult a = head_ablation(run.model(), run.input(), kind, run.io);
  const std::string effect =
      metric == Metric::kl
          ? "KL(clean || ablated) of the last target position's prediction"
          : std::string(to_string(metric)) + "(ablated) - " + to_string(metric) + "(clean)" +
                (metric == Metric::loss ? ", the loss the mean over the row's target tokens"
                                        : " at the row's last target position");
  for (MapKind k : kMapKinds) {
    const std::string name = std::string(kind_name(k)) + "_ablation.npy";
    const std::vector<double>& e = k == MapKind::encoder   ? a.effect
                                   : k == MapKind::decoder ? a.decoder
                                                           : a.cross;
    run.out.array(name, DType::f8, {B, st.layers(k, true), Hs}, e.data());
    run.add(name, {B, st.layers(k, true), Hs},
            std::string("per row, each chosen head of the ") + kind_name(k) +
                " attention replaced by " +
                (kind == Ablation::zero ? "zero" : "its mean over the row's queries") + ": " +
                effect);
  }
  run.summary["ablation"] = {
      {"kind", to_string(kind)}, {"metric", to_string(metric)},
      {"clean", a.clean},        {"passes", a.passes},
      {"ms", ms_since(t0)},      {"weights_held", run.io.layers_read != nullptr}};
  run.io.layers_read = run.io.decoder_layers_read = nullptr;
  run.lines.push_back("ablation: " + std::to_string((st.Les + 2 * st.Lds) * Hs) +
                      " heads (encoder, decoder, cross) in " + std::to_string(a.passes) +
                      " forwards, " + std::to_string(ms_since(t0)) + " ms");
}

std::uint64_t memory(const AnalysisSizes& s) {  // an encoder-decoder's second encoder output
  return s.stacks ? 8 * std::uint64_t(s.B) * (s.stacks->S + s.stacks->T) * s.d : 0;
}

void run_ablation(AnalysisRun& run) {
  if (run.seq2seq) return seq2seq_ablation(run);
  const ModelConfig& c = run.c();
  const ModelInput& in = run.in;
  const Ablation kind = run.config.ablation == "mean" ? Ablation::mean : Ablation::zero;
  const Metric metric = run.io.metric;
  hold_layers(run);
  const auto t0 = std::chrono::steady_clock::now();
  // An image model's passes start from its patch embeddings.
  const std::vector<float> embeddings = input_embeddings(run.model(), in);
  if (!embeddings.empty()) run.io.embeddings = embeddings.data();
  const AblationResult a = head_ablation(run.model(), run.input(), kind, run.io);
  run.io.embeddings = nullptr;
  const std::vector<std::size_t> shape = {in.B, a.layers.size(), a.heads.size()};
  run.out.array("ablation.npy", DType::f8, shape, a.effect.data());
  run.add("ablation.npy", shape, meaning(c, kind, metric));
  json& s = run.summary["ablation"];
  s = {{"kind", to_string(kind)},
       {"metric", to_string(metric)},
       {"clean", a.clean},
       {"passes", a.passes},
       {"layer_passes", a.layer_passes},
       {"ms", ms_since(t0)},
       {"weights_held", run.io.layers_read != nullptr}};
  if (c.classifier) {  // the clean run's class per row, and the classes logit_diff names
    json predicted = json::array();
    for (const std::int32_t k : a.predicted)
      predicted.push_back({{"id", k}, {"label", c.labels.at(std::size_t(k))}});
    s["predicted"] = predicted;
    if (metric == Metric::logit_diff) {
      s["target"] = c.labels.at(std::size_t(run.io.target));
      s["foil"] = c.labels.at(std::size_t(run.io.foil));
    }
  }
  run.lines.push_back("ablation: " + std::to_string(a.layers.size() * a.heads.size()) +
                      " heads in " + std::to_string(a.passes) + " partial forwards of " +
                      std::to_string(a.layer_passes) + " head-layer passes, " +
                      std::to_string(ms_since(t0)) + " ms");
}

}  // namespace

extern const Analysis ablation_analysis = [] {
  Analysis a{};
  a.name = "ablation";
  a.what = "each head's output zeroed or mean-ablated: the change in a metric";
  a.images = true;
  a.lm_head = true;
  a.encoder_decoder = true;
  a.options = {"--ablation", "--metric", "--target", "--foil", "--layer_indices", "--head_indices"};
  a.check_options = check_options;
  a.memory = memory;
  a.check = check;
  a.run = run_ablation;
  return a;
}();

}  // namespace mha
