// The pieces of an encoder-decoder's pass (T5, BART) that are its own; the
// pass itself is forward() (forward.hpp) with a DecoderInput: the decoder's
// input ids from a target, the LM head's logits with T5's scale and BART's
// bias, T5's relative position bias, and the pass's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "mha/checkpoint/checkpoint.hpp"
#include "mha/pipeline/forward.hpp"

namespace mha {

// The decoder's input ids (B, T) from the target's ids (B, T, right-padded):
// each row shifted right one place with decoder_start_token_id in front, its
// last id dropped (transformers' shift_tokens_right / T5's _shift_right on
// labels); row b's first target_lengths[b] inputs are real.
std::vector<std::int32_t> decoder_inputs(const ModelConfig& c, const std::int32_t* target,
                                         std::size_t B, std::size_t T);

// The LM head's logits of decoder outputs `hidden` (rows, d_model): times
// the head's input scale (tied T5's d_model^-0.5, in float32), the head, and
// BART's final_logits_bias; handed to `fn` in row blocks (lm_logits).
void seq2seq_logits(
    const Checkpoint& model, const float* hidden, std::size_t rows,
    const std::function<void(std::size_t r0, std::size_t n, const float* logits)>& fn, int threads);

// T5's position bias (h, L, L) from its relative attention bias table
// (num_buckets, h): head h's bias of query t and key s is table[bucket(s - t)][h]
// (compute_bias: values.permute([2, 0, 1])); bidirectional for the encoder.
std::vector<float> relative_bias(const ModelConfig& c, const std::vector<float>& table,
                                 std::size_t L, bool bidirectional);

// T5's _relative_position_bucket of relative position key - query, as
// modeling_t5.py computes it in float32: bidirectional (the encoder) or not.
std::size_t relative_position_bucket(std::int64_t relative, bool bidirectional,
                                     std::size_t num_buckets, std::size_t max_distance);

// The bytes an encoder-decoder's forward() holds at its peak: forward_memory()'s for the
// longer side, the encoder's output kept for the decoder, the cross-attention's
// keys and values, and T5's position biases (h, S, S) and (h, T, T).
std::uint64_t seq2seq_memory(const ModelConfig& config, std::uint64_t layer_bytes, std::size_t B,
                             std::size_t S, std::size_t T, int threads);

}  // namespace mha
