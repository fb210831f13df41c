// An encoder-decoder's analyses (T5, BART: loss, rollout, norms, ablation) on
// the teacher-forced pass of checkpoint/seq2seq_analysis.hpp, until the one
// forward over stacks folds them into the registry's entries. Private to
// lib/src/analysis/.
#pragma once

#include <cstdint>

#include "mha/analysis/analyze.hpp"

namespace mha {

// run_analyze's part for an encoder-decoder, or a target given to any model
// (refused there): the methods checked by run_analyze, `model` opened,
// out_dir's lock held. Writes
//   loss      loss.npy (B, T): each target token's cross-entropy
//   rollout   encoder_rollout.npy (layers, B, S, S), decoder_rollout.npy
//             (layers, B, T, T), cross_rollout.npy (layers, B, T, S)
//   norms     encoder_attention_norms.npy (layers, B, h, S, S),
//             decoder_attention_norms.npy (.., T, T), cross_attention_norms.npy (.., T, S)
//   ablation  encoder_ablation.npy, decoder_ablation.npy, cross_ablation.npy
//             (B, layers, heads)
// with tokens.json of both sides and run.json.
AnalyzeReport run_analyze_seq2seq(const AnalyzeConfig& config, const Model& model,
                                  std::uint64_t max_memory);

}  // namespace mha
