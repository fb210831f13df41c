// A whole model's forward pass over token ids, layer after layer: the
// embeddings, every Transformer layer (transformer.hpp, one at a time, each
// layer's weights read and converted as the pass reaches it and released
// after it), the final norm, and for causal LMs the next-token distribution
// at each sequence's last token. Peak memory is one layer's weights in
// float32 plus the activations (forward_memory()), whatever the model's size.
//
// Sequences are right-padded: row b holds lengths[b] real tokens, the rest
// padding, whose keys every query ignores (BERT's attention_mask; the LLaMA
// family's and GPT-2's padding mask); positions are 0..T-1 in every row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mha/checkpoint/checkpoint.hpp"

namespace mha {

// A most likely next token, or an image classifier's class (id: its row).
struct NextToken {
  std::int32_t id = 0;
  double p = 0;  // softmax of the LM head's (the classifier's) logits
};

struct ForwardOptions {
  int threads = 0;  // 0: default_threads()
  // Layers whose attention maps are wanted (ascending, distinct) and their
  // heads (ascending, distinct; empty: all).
  std::vector<std::size_t> map_layers, map_heads;
  // Receives map rows [t0, t0 + rows) of head slot `head` (an index into
  // map_heads) of batch row b, for layer slot `slot` (an index into
  // map_layers): a C-order (rows, T) block. Called from worker threads.
  std::function<void(std::size_t slot, std::size_t b, std::size_t head, std::size_t t0,
                     std::size_t rows, const float* block)>
      attention_sink;
  // Receives hidden state i (B, T, d_model) for i = 0 (the embeddings) to
  // num_layers (the final output), as transformers' output_hidden_states:
  // state i < num_layers is layer i's input.
  std::function<void(std::size_t i, const float* hidden)> hidden_sink;
  // Receives the queries and keys of layer slot `slot` (an index into
  // map_layers) as its scores use them, after QK-norm and RoPE
  // (LayerOptions::qk_hook): Q (B*T, h*head_dim) with row stride ldq, K
  // (B*T, kv_heads*head_dim) with row stride ldk. Called on the pass's thread.
  std::function<void(std::size_t slot, const float* Q, std::size_t ldq, const float* K,
                     std::size_t ldk)>
      qk_sink;
  // causal LMs: the k most likely next tokens per row; image classifiers: the
  // k most likely classes (at most num_labels)
  std::size_t top_k = 0;
  // Called when layer l starts (progress displays).
  std::function<void(std::size_t l)> on_layer;

  // For analyses (lens.hpp, ablation.hpp):
  // Start at layer `first_layer` from the residual stream `first_hidden`
  // (B, T, d_model: hidden state first_layer of an earlier pass) instead of
  // the embeddings; the layers before it are not run.
  std::size_t first_layer = 0;
  const float* first_hidden = nullptr;
  // Every layer already read (read_layers()): used in place of reading each
  // layer from the files again. Swapped in and out during the pass, so one
  // pass at a time may use them.
  std::vector<TransformerLayer<float>>* layers = nullptr;
  // Called with layer l's heads' outputs before its output projection
  // (context (B*T, h*head_dim), LayerOptions::context_hook).
  std::function<void(std::size_t l, float* context)> context_hook;
  // Called with layer l's value projection (LayerOptions::values_hook: V
  // (B*T, kv_heads*head_dim), row stride ld, bias added) and its weights.
  std::function<void(std::size_t l, const float* V, std::size_t ld,
                     const TransformerLayer<float>& layer)>
      values;
};

struct ForwardResult {
  std::vector<float> output;                  // (B, T, d_model): the final hidden states
  std::vector<std::vector<NextToken>> top_k;  // per batch row, most likely first
  double seconds_read = 0;                    // reading and converting weights
  double seconds_compute = 0;                 // everything else
};

// ids (B, T), lengths (B) with 1 <= lengths[b] <= T; ids are not read (and
// may be null) when options.first_hidden is given (an image model's pass
// starts from Checkpoint::embed_patches). Throws mha::Error
// (invalid_input) for an id outside the vocabulary or T over the model's
// positions, naming them.
ForwardResult forward(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                      std::size_t T, const std::vector<std::size_t>& lengths,
                      const ForwardOptions& options);

// An image classifier's logits (rows, num_labels) = hidden W^T + b, as
// ViTForImageClassification's classifier(sequence_output[:, 0, :]): hidden
// holds each row's CLS token's final hidden state (d_model values, row
// stride `ld`), `head` is Checkpoint::classifier(). With a distillation head
// (DeiTForImageClassificationWithTeacher) the distillation token's state
// follows the CLS token's (hidden + d_model), and the logits are
// (cls_classifier(CLS) + distillation_classifier(DIST)) / 2 in float32.
std::vector<float> classifier_logits(const Checkpoint& model, const ClassifierHead& head,
                                     const float* hidden, std::size_t rows, std::size_t ld);

// The k most likely of n logits (logits[i * stride]; ties to the lower id),
// most likely first, with their softmax probabilities in double.
std::vector<NextToken> top_of(const float* logits, std::size_t stride, std::size_t n,
                              std::size_t k);

// Every layer's weights of `stack` (an encoder-decoder's decoder: Stack::decoder),
// read and laid out for the kernel (float32 bytes: Checkpoint::float32_bytes()
// less the embeddings and head; half that when packed for bfloat16,
// Checkpoint::layer), `threads` packing them.
std::vector<TransformerLayer<float>> read_layers(const Checkpoint& model, int threads = 1);
std::vector<TransformerLayer<float>> read_layers(const Checkpoint& model, int threads, Stack stack);

// The bytes forward() holds at its peak for (B, T) with `threads` threads:
// one layer's weights in float32 (and the stored copy being converted), the
// activations, the attention's buffers and the LM head's pieces.
std::uint64_t forward_memory(const ModelConfig& config, std::uint64_t layer_bytes, std::size_t B,
                             std::size_t T, int threads);

}  // namespace mha
