// A whole model's forward pass over token ids, stack after stack as the
// family's table describes them: the one stack of a decoder-only or
// encoder-only model, or an encoder-decoder's encoder over the source ids and
// then its decoder over the decoder's ids with a cross-attention to the
// encoder's output in every layer (T5, BART; teacher-forced: the decoder's
// inputs are given, decoder_inputs() in seq2seq.hpp). Per stack: the
// embeddings, every Transformer layer (transformer.hpp, one at a time, each
// layer's weights read and converted as the pass reaches it and released
// after it), the final norm; then for causal LMs the next-token distribution
// at each sequence's last token. Peak memory is one layer's weights in
// float32 plus the activations (forward_memory(), seq2seq_memory()),
// whatever the model's size.
//
// Every activation is shown at its site (kernel/site.hpp) to one hook, which
// may edit it: the maps, hidden states, queries and keys a run saves, what
// the analyses need, and their interventions all go through it.
//
// Sequences are right-padded: row b holds lengths[b] real tokens, the rest
// padding, whose keys every query ignores (BERT's attention_mask; the LLaMA
// family's and GPT-2's padding mask; T5's and BART's attention_mask and
// decoder_attention_mask, and the cross-attention over the source's padding);
// positions are 0..T-1 in every row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mha/checkpoint/checkpoint.hpp"
#include "mha/kernel/site.hpp"

namespace mha {

// A most likely next token, or an image classifier's class (id: its row).
struct NextToken {
  std::int32_t id = 0;
  double p = 0;  // softmax of the LM head's (the classifier's) logits
};

// The decoder side of an encoder-decoder's pass: ids (B, T_dec) and their
// lengths in [1, T_dec].
struct DecoderInput {
  const std::int32_t* ids = nullptr;
  std::size_t T = 0;
  std::vector<std::size_t> lengths;
};

struct ForwardOptions {
  int threads = 0;  // 0: default_threads()
  // Every activation at its site (site.hpp), to read or edit; null: none
  // (the fastest path).
  SiteHook<float>* hook = nullptr;
  // causal LMs and encoder-decoders: the k most likely next tokens per row
  // (after the decoder's last real position); image classifiers: the k most
  // likely classes (at most num_labels)
  std::size_t top_k = 0;
  // Called when layer l of a stack starts, with its weights as the pass
  // holds them (progress displays; value-weighted norms read W_o).
  std::function<void(Stack stack, std::size_t l, const TransformerLayer<float>& weights)> on_layer;

  // For analyses (lens.hpp, ablation.hpp):
  // Start the last stack (the decoder of an encoder-decoder) at layer
  // `first_layer` from the residual stream `first_hidden` (B, T, d_model: that
  // layer's hook_resid_pre of an earlier pass) instead of the embeddings; the
  // layers before it are not run. An image model's pass starts at layer 0
  // from Checkpoint::embed_patches.
  std::size_t first_layer = 0;
  const float* first_hidden = nullptr;
  // An encoder-decoder's encoder output (B, S, d_model) of an earlier pass
  // over the same source: the encoder is not run again.
  const std::vector<float>* encoder_output = nullptr;
  // Every layer of each stack already read (read_layers()): used in place of
  // reading each layer from the files again. Swapped in and out during the
  // pass, so one pass at a time may use them.
  std::vector<TransformerLayer<float>>*layers = nullptr, *decoder_layers = nullptr;
};

struct ForwardResult {
  std::vector<float> output;          // (B, T, d_model): the last stack's final hidden states
  std::vector<float> encoder_output;  // (B, S, d_model): an encoder-decoder's encoder's
  std::vector<std::vector<NextToken>> top_k;  // per batch row, most likely first
  double seconds_read = 0;                    // reading and converting weights
  double seconds_compute = 0;                 // everything else
};

// ids (B, T), lengths (B) with 1 <= lengths[b] <= T; ids are not read (and
// may be null) when options.first_hidden is given. An encoder-decoder's
// source is ids (B, S = T) and its decoder side `decoder`. Throws mha::Error
// (invalid_input) for an id outside the vocabulary or a length over the
// model's positions, naming them.
ForwardResult forward(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                      std::size_t T, const std::vector<std::size_t>& lengths,
                      const ForwardOptions& options);
ForwardResult forward(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                      std::size_t T, const std::vector<std::size_t>& lengths,
                      const DecoderInput& decoder, const ForwardOptions& options);

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
