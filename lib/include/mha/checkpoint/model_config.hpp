// A whole model's hyperparameters, read from the config.json a model hub
// publishes beside a checkpoint (Hugging Face's keys), for the families this
// tool runs from text (family.hpp: one file of data each). Each family's
// defaults are its reference implementation's. The forward reads the
// features below, never the family's name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mha/kernel/options.hpp"

namespace mha {

struct Family;

// Where the norms sit around each block.
enum class NormPlacement {
  post,     // x = norm(x + block(x)) (BERT, OPT with do_layer_norm_before false)
  pre,      // x = x + block(norm(x))
  sandwich  // x = x + post_norm(block(norm(x))) (Gemma 2 and 3)
};

struct ModelConfig {
  std::string model_type;  // as config.json says
  const Family* family = nullptr;
  std::size_t num_layers = 0;  // num_hidden_layers / n_layer
  std::size_t d_model = 0;     // hidden_size / n_embd
  std::size_t h = 0;           // num_attention_heads / n_head
  std::size_t kv_heads = 0;    // num_key_value_heads (grouped-query attention); h when absent
  std::size_t head_dim = 0;    // head_dim, else d_model / h
  std::size_t d_ff = 0;        // intermediate_size / n_inner / ffn_dim
  std::size_t vocab_size = 0;
  std::size_t max_positions = 0;    // the tokens a sequence may have
  std::size_t type_vocab_size = 0;  // BERT's token types
  double norm_eps = 1e-5;           // layer_norm_eps / layer_norm_epsilon / rms_norm_eps

  // Norms
  bool rms_norm = true;        // RMSNorm, else LayerNorm
  bool norm_plus_one = false;  // RMSNorm scales by (1 + w) (Gemma); folded into the weights
  NormPlacement norm_placement = NormPlacement::pre;
  bool final_norm = true;          // a norm after the last layer
  bool parallel_residual = false;  // x + attn(norm1(x)) + ffn(norm2(x)) (GPT-NeoX)
  // Embeddings
  double embed_scale = 1;           // token embeddings times this (Gemma: sqrt(d_model))
  std::size_t position_rows = 0;    // learned positions: the table's rows; 0 = none
  std::size_t position_offset = 0;  // the row of position 0 (OPT 2, RoBERTa padding_idx + 1)
  // RoBERTa: positions count the tokens that are not pad_token_id; a pad
  // token sits at row position_offset - 1.
  bool positions_skip_padding = false;
  // Attention
  double attn_scale = 0;       // the logits' scale (1/sqrt(head_dim), or query_pre_attn_scalar)
  double attn_softcap = 0;     // > 0: logits <- c tanh(logits / c)
  bool rope = false;           // rotary positions, half layout
  double rotary_fraction = 1;  // partial rotary: rotary_pct, partial_rotary_factor
  std::size_t rotary_dim = 0;  // int(head_dim * rotary_fraction): the features that rotate
  double rope_theta = 10000;
  double rope_scaling = 1;             // rope_scaling {"type": "linear", "factor": f}
  double rope_local_theta = 0;         // > 0: the sliding-window layers' theta, unscaled (Gemma 3)
  std::size_t sliding_window = 0;      // 0 = none
  std::vector<unsigned char> sliding;  // per layer: 1 = the window applies
  bool qkv_bias = false;               // biases on q, k, v (and o where stored)
  bool qk_norm = false;                // RMSNorm of each head's q and k
  // Feed-forward and head
  Activation activation = Activation::gelu;
  bool tie_word_embeddings = false;  // the LM head is the input embedding
  bool causal = true;
  bool lm_head = true;  // a causal LM's next-token head
  // config.json's architectures name only base models (GPTNeoXModel, OPTModel):
  // weights saved without the task head, so an untied LM head may be absent.
  bool base_model = false;
  double final_softcap = 0;  // > 0: the LM logits capped as attention's
  std::optional<std::int64_t> pad_token_id, bos_token_id, eos_token_id;
  std::string torch_dtype;  // as stored, e.g. "float32", "bfloat16" ("" when absent)
  // Encoder-decoders (T5, BART): the encoder is the stack above (num_layers,
  // d_ff, h), the decoder has num_decoder_layers layers of the same sizes,
  // each with a cross-attention over the encoder's output, and the LM head
  // on its output. The decoder's inputs start with decoder_start_token_id.
  bool encoder_decoder = false;
  std::size_t num_decoder_layers = 0;
  std::int64_t decoder_start_token_id = 0;
  // T5's relative position buckets (0: none): a bias per head and bucket of
  // key - query added to every self-attention logit, bidirectional in the
  // encoder, causal in the decoder.
  std::size_t relative_buckets = 0, relative_max_distance = 0;
  double lm_head_scale = 1;  // the LM head's input times this (tied T5: d_model^-0.5)
  bool logits_bias = false;  // BART's final_logits_bias, added to the LM head's logits
  bool gated_ffn = false;    // T5: feed_forward_proj "gated-ACT" (the other families: their table)
  // Images (ViT): the input is an image of image_height x image_width pixels
  // in num_channels channels, cut into patch_size squares; its tokens are a
  // CLS token, DeiT's distillation token (distillation_token), then the
  // patches row by row. patch_size 0: a text model.
  std::size_t image_height = 0, image_width = 0, patch_size = 0, num_channels = 0;
  bool distillation_token = false;
  // Image classifiers (ViTForImageClassification): a linear head on the CLS
  // token's final hidden state. Read when the weights hold classifier.weight
  // (the checkpoint turns `classifier` off otherwise); num_labels is its
  // rows, labels[i] config.json's id2label[i], else "LABEL_i". With
  // distillation_head (DeiTForImageClassificationWithTeacher: the weights
  // hold distillation_classifier.weight) a second head reads the
  // distillation token, and the logits are the mean of the two.
  bool classifier = false;
  bool distillation_head = false;
  std::size_t num_labels = 0;
  std::vector<std::string> labels;

  bool has_lm_head() const { return lm_head; }
  bool image_input() const { return patch_size > 0; }
  std::size_t patch_rows() const { return patch_size ? image_height / patch_size : 0; }
  std::size_t patch_cols() const { return patch_size ? image_width / patch_size : 0; }
  // The tokens before the patches: [CLS] (and DeiT's [DIST]); 0 for a text model.
  std::size_t prefix_tokens() const { return patch_size ? 1 + std::size_t{distillation_token} : 0; }
  // An image's tokens: the prefix, then one per patch.
  std::size_t image_tokens() const { return prefix_tokens() + patch_rows() * patch_cols(); }
  bool layer_sliding(std::size_t l) const {
    return sliding_window > 0 && l < sliding.size() && sliding[l];
  }
};

// The model types read, in the order messages list them.
const std::vector<std::string>& known_model_types();

// Reads and checks `path` (a config.json): one-line errors (mha::Error,
// invalid_input) name the file and the key, and what was expected.
ModelConfig read_model_config(const std::string& path);
// The same on the text of a config.json read from `path` (the fuzzer's entry).
ModelConfig parse_model_config(std::string_view text, const std::string& path);

}  // namespace mha
