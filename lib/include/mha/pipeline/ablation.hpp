// Which heads matter (docs/analyses.md): head ablation and activation
// patching on the whole-model forward. A head's output (its columns of the
// context before the output projection: TransformerLens's hook_z) is zeroed,
// replaced by its mean over the row's real positions, or copied from another
// run; each variant recomputes only from the changed layer on, from the
// residual stream the first pass kept (forward's first_layer), with every
// layer's weights read once when they fit (read_layers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "mha/checkpoint/checkpoint.hpp"
#include "mha/pipeline/pass_input.hpp"

namespace mha {

// What an intervention changes, per batch row:
//   loss        the mean next-token cross-entropy over the row's real tokens;
//   logit_diff  logit(target) - logit(foil) after the row's last real token;
//   kl          KL(p_clean || p) of the next-token distribution after it.
// An image classifier (ModelConfig::classifier) is measured on its classes'
// logits instead (the CLS token's, through the classifier): loss is the
// cross-entropy of the class the clean run predicts, logit_diff names two
// classes, kl is over the classes.
enum class Metric { loss, logit_diff, kl };
const char* to_string(Metric m);

enum class Ablation { zero, mean };
const char* to_string(Ablation a);

struct InterventionOptions {
  Metric metric = Metric::loss;
  std::int32_t target = -1, foil = -1;     // logit_diff's tokens (a classifier's classes)
  std::vector<std::size_t> layers, heads;  // ascending and distinct; empty: all
  int threads = 0;
  // Every layer's weights (read_layers), or null to read them on each pass;
  // an encoder-decoder's: the encoder's, and its decoder's below.
  std::vector<TransformerLayer<float>>* layers_read = nullptr;
  std::vector<TransformerLayer<float>>* decoder_layers_read = nullptr;
  std::function<void(std::size_t done, std::size_t total)> progress;
  // An image model's passes start from its patch embeddings (B, T, d_model)
  // (ForwardOptions::first_hidden), instead of the ids' embeddings.
  const float* embeddings = nullptr;
};

// Throws mha::Error (invalid_input) naming the checkpoint when it has nothing
// the metrics read: neither an LM head nor, for an image model, a classifier.
void check_intervention_head(const Checkpoint& model);

struct AblationResult {
  std::vector<std::size_t> layers, heads;
  std::vector<double> clean;   // (B): the metric of the model as it is (kl: 0)
  std::vector<double> effect;  // (B, layers, heads): metric(ablated) - metric(clean)
  // An encoder-decoder's: `effect` its encoder's heads, these its decoder's
  // self- and cross-attention heads; (B, layers of the stack, heads), a
  // stack's layers those of `layers` it has.
  std::vector<double> decoder, cross;
  std::vector<std::int32_t> predicted;  // (B): an image classifier's class in the clean run
  std::size_t passes = 0;               // partial forwards run
  std::size_t layer_passes = 0;         // layers they ran
};
// in: ids (B, T), lengths (B) (an image model's: its positions, with
// options.embeddings), or an encoder-decoder's both sides (the metric read on
// its target, seq2seq_analysis.hpp). Throws mha::Error (invalid_input) for a
// model without an LM head or classifier, or logit_diff without target and foil.
AblationResult head_ablation(const Checkpoint& model, const PassInput& in, Ablation kind,
                             const InterventionOptions& options);

struct PatchingResult {
  std::vector<std::size_t> layers, heads;
  double clean = 0, corrupt = 0;      // the metric of each run (kl: of each against clean)
  std::vector<double> heads_patched;  // (layers, heads): normalised, 0 = corrupt, 1 = clean
  std::vector<double> resid_patched;  // (layers, T): layer l's input at position t patched
};
// Activation patching (Meng et al. 2022; Wang et al. 2022): clean and
// corrupt ids (T each, one row); each head's output, then each layer's
// residual stream at each position, copied from the clean run into the
// corrupt one; (metric - corrupt) / (clean - corrupt), or metric - corrupt
// when the two runs' metrics are equal.
PatchingResult activation_patching(const Checkpoint& model, const std::int32_t* clean,
                                   const std::int32_t* corrupt, std::size_t T,
                                   const InterventionOptions& options);

}  // namespace mha
