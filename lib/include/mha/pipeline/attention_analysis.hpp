// Analyses of a model's attention maps (docs/analyses.md):
//   attention rollout (Abnar & Zuidema 2020): per layer the heads' mean A,
//     Â = 0.5 A + 0.5 I with rows renormalised, R_l = Â_l R_(l-1), R_0 = Â_0;
//   value-weighted norms (Kobayashi et al. 2020): ||α_ij f_h(x_j)|| with
//     f_h(x) = (x W_V^h + b_V^h) W_O^h (the output bias left out), = α_ij ||f_h(x_j)||;
//   head detectors as TransformerLens's detect_head (error_measure "mul"):
//     score = sum(A ⊙ P) / sum(A) over a row's real tokens, P the
//     previous-token, duplicate-token or induction pattern of its ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mha/kernel/weights.hpp"

namespace mha {

// One rollout step in place: R (B, T, T) <- Â R, Â from the heads' mean
// `mean` (B, T, T); `first`: R <- Â. Blocks of rows run on `threads`, the
// same bits for any number.
void rollout_step(std::vector<double>& R, const float* mean, std::size_t B, std::size_t T,
                  bool first, int threads);

// Attention flow (Abnar & Zuidema 2020): the layers as a graph, node (l, i)
// for layer l's output at position i (l = 0: the inputs), an edge from
// (l - 1, j) to (l, i) of capacity Â_l[i, j] (as rollout's: 0.5 A + 0.5 I,
// rows renormalised); flow[i, j] = the max flow from input j to the last
// layer's position i. `layers` holds each layer's heads' mean (n, n) maps of
// one row's n real tokens. Out (n, n).
std::vector<double> attention_flow(const std::vector<std::vector<double>>& layers, std::size_t n);
constexpr std::size_t kMaxFlowTokens = 128;

// ||f_h(x_j)|| = ||v_hj W_o^h|| for every head and key: out (B, h, T), from
// the layer's value projection V (B*T, kv_heads*head_dim; row stride ld; v =
// x W_v + b_v, ForwardOptions::values) and its W_o.
std::vector<double> value_norms(const float* V, std::size_t ld, std::size_t B, std::size_t T,
                                const Weights<float>& w, std::size_t h, std::size_t kv_heads,
                                std::size_t head_dim, int threads);

enum class Detector { previous_token, duplicate_token, induction };
const std::vector<Detector>& all_detectors();
const char* to_string(Detector d);

// The detection pattern P (n, n) of ids (n), lower triangular, 0 or 1.
std::vector<unsigned char> detection_pattern(Detector d, const std::int32_t* ids, std::size_t n);

// sum(A ⊙ P) / sum(A) of a head's map A (rows and columns [0, n) of a
// (T, T) block, row stride T); NaN when sum(A) is 0.
double detector_score(const float* A, std::size_t T, const std::vector<unsigned char>& P,
                      std::size_t n);

}  // namespace mha

#include <functional>

#include "mha/pipeline/forward.hpp"
#include "mha/pipeline/pass_input.hpp"
#include "mha/pipeline/site_hooks.hpp"

namespace mha {

// One forward with the map analyses folded in layer by layer (the maps of
// every head of every layer pass through, none is kept beyond its layer).
struct MapAnalysisOptions {
  bool rollout = false, norms = false, detectors = false, flow = false;
  // The layers and heads norms and detectors report (ascending, distinct, not empty).
  std::vector<std::size_t> layers, heads;
  int threads = 0;
  // Rollout up to layer l of a stack, row b: a one-stack model's (kind
  // encoder, its one stack) R (T, T); an encoder-decoder's as
  // seq2seq_analysis.hpp says.
  std::function<void(MapKind kind, std::size_t l, std::size_t b, const float* R)> rollout_sink;
  // Norms of layer slot `slot` of `kind`, row b, head slot `head`: (queries, keys).
  std::function<void(MapKind kind, std::size_t slot, std::size_t b, std::size_t head,
                     const float* norms)>
      norms_sink;
  // Every head's map of layer l, row b: A (T, T), once the layer is done.
  std::function<void(std::size_t l, std::size_t b, std::size_t head, const float* A)> maps_sink;
  // Layer l's arrays have all been given (l in increasing order).
  std::function<void(std::size_t l)> layer_done;
  // Passed to the forward (forward.hpp): the hidden states, and every layer
  // read once (read_layers; null: read on each pass).
  std::function<void(std::size_t i, const float* hidden)> hidden_sink;
  std::vector<TransformerLayer<float>>* layers_read = nullptr;
  // An image model's pass starts from these (B, T, d_model), its patch
  // embeddings (ForwardOptions::first_hidden), instead of ids' embeddings.
  const float* embeddings = nullptr;
};

struct MapAnalysisResult {
  ForwardResult forward;
  // (B, T, T): attention flow to the last layer over each row's real tokens
  // (0 beyond them).
  std::vector<float> flow;
  // (detectors, layers, heads): TransformerLens's scores, the mean over rows.
  std::vector<double> head_scores;
};

// A one-stack model's pass, or an encoder-decoder's over both stacks
// (in.has_decoder(): rollout and norms of each kind of map; the detectors,
// flow, maps_sink, layer_done, hidden_sink and embeddings are one stack's).
MapAnalysisResult analyze_maps(const Checkpoint& model, const PassInput& in,
                               const MapAnalysisOptions& options);

}  // namespace mha
