// Analyses of an encoder-decoder's attention (T5, BART; docs/analyses.md
// "Encoder-decoders"), on forward_seq2seq's teacher-forced pass:
//
//   rollout   the encoder's as a text model's: R_l = Â_l R_(l-1), Â = 0.5 A +
//             0.5 I (heads' mean, rows renormalised), (S, S) per layer. The
//             decoder's over both inputs: M (T, T + S) = [M_t | M_s], from
//             M = [I | 0]; per layer, the self-attention M <- Â_self M, then
//             the cross-attention M <- 0.5 M + 0.5 [0 | Ā_cross R_enc], R_enc
//             the encoder's last rollout (the memory's source tokens), Ā_cross
//             the heads' mean. Each row of M sums to 1: M_t is how much of each
//             target input reaches position t, M_s how much of each source
//             token (the cross rollout).
//   norms     ||α_ij f_h(x_j)|| for each kind of map, as attention_analysis.hpp's
//             value_norms; the cross-attention's x_j are the encoder's outputs.
//   ablation  each head of each kind (encoder, decoder, cross) zeroed or
//             replaced by its mean over the row's queries, and the pass run
//             again (the encoder's output reused for decoder and cross heads);
//             the effect on the target's loss (its mean cross-entropy), the KL
//             of the last target position's distribution, or a logit
//             difference there; both stacks' weights read once when given
//             (InterventionOptions::layers_read, decoder_layers_read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "mha/checkpoint/ablation.hpp"
#include "mha/checkpoint/seq2seq.hpp"
#include "mha/checkpoint/site_hooks.hpp"

namespace mha {

// The teacher-forced input of both sides: source (B, S) and its lengths; the
// decoder's inputs (B, T) (decoder_inputs()), the labels they predict (B, T)
// and the target's lengths.
struct Seq2SeqBatch {
  const std::int32_t* source = nullptr;
  std::size_t B = 0, S = 0, T = 0;
  std::vector<std::size_t> source_lengths, target_lengths;
  const std::int32_t* decoder_ids = nullptr;
  const std::int32_t* labels = nullptr;
};

struct Seq2SeqMapOptions {
  bool rollout = false, norms = false;
  // The layers (of both stacks, as forward_seq2seq's map_layers) and heads
  // norms reports (ascending, distinct, not empty).
  std::vector<std::size_t> layers, heads;
  int threads = 0;
  // Rollout up to layer l of a stack, row b: encoder R (S, S); decoder the
  // target part M_t (T, T); cross the source part M_s (T, S).
  std::function<void(MapKind kind, std::size_t l, std::size_t b, const float* R)> rollout_sink;
  // Norms of layer slot `slot` of `kind`, row b, head slot `head`: (queries, keys).
  std::function<void(MapKind kind, std::size_t slot, std::size_t b, std::size_t head,
                     const float* norms)>
      norms_sink;
};

ForwardResult analyze_seq2seq_maps(const Checkpoint& model, const Seq2SeqBatch& in,
                                   const Seq2SeqMapOptions& options);

// Per row, the cross-entropy (nats) of label t at decoder position t, for t
// below the row's target length; NaN beyond. Out (B, T).
std::vector<double> seq2seq_token_loss(const Checkpoint& model, const float* output,
                                       const Seq2SeqBatch& in, int threads);

struct Seq2SeqAblation {
  std::vector<std::size_t> layers, heads;  // the slots' layers (of each stack) and heads
  std::vector<double> clean;               // (B): the metric of the model as it is (kl: 0)
  // (B, layers of the kind, heads): metric(ablated) - metric(clean), for
  // the encoder's heads, the decoder's self-attention heads and its
  // cross-attention heads; a kind's layers are those of `layers` its stack has.
  std::vector<double> encoder, decoder, cross;
  std::size_t passes =
      0;  // forwards run (encoder heads: whole; the others: the decoder's from the head's layer on)
};
// Throws mha::Error (invalid_input) for a model without an LM head, or
// logit_diff without target and foil in the vocabulary.
Seq2SeqAblation seq2seq_head_ablation(const Checkpoint& model, const Seq2SeqBatch& in,
                                      Ablation kind, const InterventionOptions& options);

}  // namespace mha
