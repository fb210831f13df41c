// What analyze_maps and head_ablation do for an encoder-decoder (T5, BART;
// docs/analyses.md "Encoder-decoders"), on the forward's teacher-forced pass:
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
#include <vector>

#include "mha/pipeline/ablation.hpp"
#include "mha/pipeline/attention_analysis.hpp"
#include "mha/pipeline/seq2seq.hpp"
#include "mha/pipeline/site_hooks.hpp"

namespace mha {

// analyze_maps's part for an encoder-decoder (in.has_decoder()): the sinks
// given each kind's arrays (rollout: encoder R (S, S); decoder the target
// part M_t (T, T); cross the source part M_s (T, S); norms (queries, keys)).
ForwardResult encoder_decoder_maps(const Checkpoint& model, const PassInput& in,
                                   const MapAnalysisOptions& options);

// Per row, the cross-entropy (nats) of label t at decoder position t, for t
// below the row's target length; NaN beyond. Out (B, target_T).
std::vector<double> target_token_loss(const Checkpoint& model, const float* output,
                                      const PassInput& in, int threads);

// head_ablation's part for an encoder-decoder: the metric read on the
// target; AblationResult::effect the encoder's heads, ::decoder and ::cross
// the decoder's self- and cross-attention heads; passes: forwards run
// (encoder heads: whole; the others: the decoder's from the head's layer on).
AblationResult encoder_decoder_ablation(const Checkpoint& model, const PassInput& in, Ablation kind,
                                        const InterventionOptions& options);

}  // namespace mha
