// An encoder-decoder's teacher-forced pass (T5, BART): the encoder over the
// source ids, then the decoder over its input ids with a cross-attention over
// the encoder's output in every layer, layer after layer in one layer's
// memory as forward.hpp's pass. No generation: the decoder's inputs are
// given, as transformers computes them from labels (decoder_inputs()).
//
// Both sides are right-padded: source row b holds source_lengths[b] real
// tokens, decoder row b target_lengths[b]; padding keys are masked in the
// encoder's and the decoder's self-attention and in the cross-attention
// (T5's and BART's attention_mask and decoder_attention_mask).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "mha/checkpoint/checkpoint.hpp"
#include "mha/checkpoint/forward.hpp"

namespace mha {

// The three kinds of maps an encoder-decoder makes: (layers, B, h, S, S),
// (layers, B, h, T, T) and (layers, B, h, T, S).
enum class MapKind { encoder, decoder, cross };

struct Seq2SeqOptions {
  int threads = 0;  // 0: default_threads()
  // Layers whose maps are wanted (ascending, distinct), in each stack that
  // has them: slot i is map_layers[i] in both. Their heads (empty: all).
  std::vector<std::size_t> map_layers, map_heads;
  // Receives map rows [t0, t0 + rows) of head slot `head` of batch row b, for
  // layer slot `slot` of map kind `kind`: a C-order (rows, keys) block, keys
  // S for encoder and cross maps, T for the decoder's. From worker threads.
  std::function<void(MapKind kind, std::size_t slot, std::size_t b, std::size_t head,
                     std::size_t t0, std::size_t rows, const float* block)>
      attention_sink;
  std::size_t top_k = 0;  // the LM head's k most likely tokens at each row's last target position
  std::function<void(Stack stack, std::size_t l)> on_layer;  // layer l of a stack starts
  // Receives hidden state i of `stack` (Stack::main: the encoder, (B, S,
  // d_model); Stack::decoder: (B, T, d_model)) for i = 0 to the stack's
  // layers, as transformers' output_hidden_states gives them (T5Stack's
  // all_hidden_states, BART's encoder_states and all_hidden_states): state 0
  // the embeddings (after BART's layernorm_embedding), state i < layers layer
  // i's input, the last the stack's output after its final norm (T5's
  // final_layer_norm; BART has none). Not the encoder's when encoder_output
  // is given. On the pass's thread.
  std::function<void(Stack stack, std::size_t i, const float* hidden)> hidden_sink;
  // Layer l's heads' outputs of map kind `kind` before its output projection,
  // to change in place (LayerOptions::context_hook: ablation): context
  // (B*L, h*head_dim), L the query side's length (S for the encoder, else T).
  std::function<void(MapKind kind, std::size_t l, float* context)> context_hook;
  // Layer l's value projection of map kind `kind` (LayerOptions::values_hook):
  // V (B*L, h*head_dim) with row stride ld, L the key side's length (T for the
  // decoder's self-attention, else S), and that attention's weights (W_o).
  std::function<void(MapKind kind, std::size_t l, const float* V, std::size_t ld,
                     const Weights<float>& attention)>
      values;
  // The encoder's output (B, S, d_model) of an earlier pass over the same
  // source: the encoder is not run again (interventions in the decoder).
  const std::vector<float>* encoder_output = nullptr;
  // With encoder_output: the decoder runs from layer decoder_first_layer on,
  // from that layer's input (B, T, d_model) of an earlier pass
  // (hidden_sink's state decoder_first_layer), its earlier layers not run.
  std::size_t decoder_first_layer = 0;
  const float* decoder_first_hidden = nullptr;
  // Every layer of each stack already read (read_layers(model, threads,
  // stack)): lent to the pass in place of reading each layer, and given back.
  std::vector<TransformerLayer<float>>*encoder_layers = nullptr, *decoder_layers = nullptr;
};

struct Seq2SeqResult {
  std::vector<float> encoder_output;          // (B, S, d_model): the encoder's final hidden states
  std::vector<float> output;                  // (B, T, d_model): the decoder's
  std::vector<std::vector<NextToken>> top_k;  // per batch row, most likely first
  double seconds_read = 0, seconds_compute = 0;
};

// The decoder's input ids (B, T) from the target's ids (B, T, right-padded):
// each row shifted right one place with decoder_start_token_id in front, its
// last id dropped (transformers' shift_tokens_right / T5's _shift_right on
// labels); row b's first target_lengths[b] inputs are real.
std::vector<std::int32_t> decoder_inputs(const ModelConfig& c, const std::int32_t* target,
                                         std::size_t B, std::size_t T);

// source (B, S), decoder_ids (B, T); lengths in [1, S] and [1, T]. Throws
// mha::Error (invalid_input) for an id outside the vocabulary or a length over
// the model's positions, naming them.
Seq2SeqResult forward_seq2seq(const Checkpoint& model, const std::int32_t* source, std::size_t B,
                              std::size_t S, const std::vector<std::size_t>& source_lengths,
                              const std::int32_t* decoder_ids, std::size_t T,
                              const std::vector<std::size_t>& target_lengths,
                              const Seq2SeqOptions& options);

// The LM head's logits of decoder outputs `hidden` (rows, d_model): times
// the head's input scale (tied T5's d_model^-0.5, in float32), the head, and
// BART's final_logits_bias; handed to `fn` in row blocks (lm_logits).
void seq2seq_logits(
    const Checkpoint& model, const float* hidden, std::size_t rows,
    const std::function<void(std::size_t r0, std::size_t n, const float* logits)>& fn, int threads);

// T5's _relative_position_bucket of relative position key - query, as
// modeling_t5.py computes it in float32: bidirectional (the encoder) or not.
std::size_t relative_position_bucket(std::int64_t relative, bool bidirectional,
                                     std::size_t num_buckets, std::size_t max_distance);

// The bytes forward_seq2seq() holds at its peak: forward_memory()'s for the
// longer side, the encoder's output kept for the decoder, the cross-attention's
// keys and values, and T5's position biases (h, S, S) and (h, T, T).
std::uint64_t seq2seq_memory(const ModelConfig& config, std::uint64_t layer_bytes, std::size_t B,
                             std::size_t S, std::size_t T, int threads);

}  // namespace mha
