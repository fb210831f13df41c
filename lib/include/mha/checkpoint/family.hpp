// A model family as data: the config.json keys it reads (with its reference
// implementation's defaults) and one table of the tensors it stores, each
// with the role it plays in the forward, its name, its shape in terms of the
// config and its stored layout. Checking a checkpoint, loading a layer, the
// single-layer presets and the memory estimate all walk that one table
// (docs/architecture.md, "Adding a model family"); the forward reads the
// features config reading sets on ModelConfig, never a family's name.
//
// One file per family under lib/src/checkpoint/families/, one line in
// families/registry.def.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mha/checkpoint/model_config.hpp"
#include "mha/kernel/site.hpp"

namespace mha {

class ConfigKeys;

// A size of a tensor, in terms of the config (q = h * head_dim, kv =
// kv_heads * head_dim).
enum class Dim {
  none,           // the tensor is 1-D
  d_model,        //
  d_ff,           //
  two_d_ff,       // a fused gate and up projection
  q,              //
  kv,             //
  qkv,            // q + 2 kv: a fused query, key and value projection
  head_dim,       // QK-norm weights
  vocab,          //
  position_rows,  // the learned position table's rows
  type_vocab,     // BERT's token types
  one,            // a size of 1 (ViT's CLS token, DeiT's distillation token: one row)
  patch_pixels,   // num_channels * patch_size^2: a patch's values, as a Conv2d's in
  heads,          // h: a relative position bias table's columns
  buckets,        // relative position buckets (T5's relative_attention_num_buckets)
  labels,         // an image classifier's classes (num_labels: classifier.weight's rows)
};

// Where a tensor goes in the forward. Model-wide roles first, then a layer's.
enum class Role {
  token_embedding,
  position_embedding,
  type_embedding,
  embedding_norm,
  final_norm,
  lm_head,
  // ViT: the Conv2d of kernel = stride = patch_size (a linear map of each patch), and the CLS
  // token's embedding before the patches; DeiT's distillation token after it (position 1)
  patch_projection,
  cls_token,
  distillation_token,
  relative_bias,  // T5: (buckets, h), layer 0's, shared by every self-attention of its stack
  logits_bias,    // BART: final_logits_bias (1, vocab), added to the LM head's logits
  // An image classifier's head on the CLS token (position 0): (num_labels, d_model); with the
  // teacher's head (DeiTForImageClassificationWithTeacher) a second one on the distillation
  // token (position 1), the logits the mean of the two
  classifier,
  distillation_classifier,
  attn_norm,       // the norm before (pre-norm) or after (post-norm) attention
  q,               //
  k,               //
  v,               //
  qkv,             // fused: split into q, k and v by the layout
  o,               //
  q_norm,          // QK-norm (head_dim)
  k_norm,          //
  post_attn_norm,  // sandwich norms: on the attention's output, before the residual add
  ffn_norm,        // the norm before (pre-norm) or after (post-norm) the feed-forward
  up,              // W_1: act(x W_1) or, gated, act(x W_gate) * (x W_1)
  gate,            //
  gate_up,         // fused: the gate's rows, then the up projection's
  down,            // W_2
  post_ffn_norm,   //
  // An encoder-decoder's decoder layers: the cross-attention over the
  // encoder's output and the norm before (pre-norm) or after (post-norm) it.
  cross_q,
  cross_k,
  cross_v,
  cross_o,
  cross_norm,
};

// Which stack of layers a tensor belongs to (Stack, kernel/site.hpp): an
// encoder-decoder's decoder's "{l}" patterns are its own, and so are its
// model-wide tensors (its embeddings' norm, its position table, its final
// norm, its relative bias table).
enum class Part { weight, bias };

// How a tensor is stored.
enum class Layout {
  vector,        // 1-D (a norm's weight, a bias)
  table,         // an embedding table (rows, d_model), read by rows
  linear,        // nn.Linear (out, in); fused tensors split by rows: q | k | v, gate | up
  conv1d,        // GPT-2's Conv1D (in, out); fused tensors split by columns
  linear_heads,  // nn.Linear (3 h head_dim, in) with rows per head: (h, q | k | v, head_dim)
  // nn.Conv2d (out, channels, patch_size, patch_size) of kernel = stride =
  // patch_size: stored 4-D, the same bytes as an nn.Linear (out, patch_pixels)
  conv2d,
  parameter  // an nn.Parameter (1, rows, cols): ViT's CLS token and position table
};

// Which configs have the tensor.
enum class When {
  always,
  qkv_bias,           // ModelConfig::qkv_bias
  qk_norm,            // ModelConfig::qk_norm
  sandwich_norm,      // norm_placement is sandwich
  not_sandwich_norm,  // norm_placement is not sandwich
  untied,             // !ModelConfig::tie_word_embeddings
  final_norm,         // ModelConfig::final_norm
  logits_bias,        // ModelConfig::logits_bias
  gated_ffn,          // ModelConfig::gated_ffn (T5 v1.1's wi_0 and wi_1)
  plain_ffn,          // !ModelConfig::gated_ffn (T5 v1.0's wi)
  classifier,         // ModelConfig::classifier, one head (not distillation_head)
  distillation_head,  // ModelConfig::classifier with distillation_head: the two heads
};

struct TensorSpec {
  Role role;
  Part part;
  // The reference implementation's name, "{l}" standing for the layer number.
  const char* name;
  Dim rows, cols;  // the stored shape (cols Dim::none: 1-D)
  Layout layout;
  When when = When::always;
  Stack stack = Stack::main;
};

struct Family {
  const char* name;                      // the file's name: families/<name>.cpp
  std::vector<std::string> model_types;  // config.json's model_type values it reads
  // Prefixes task heads put before the base model's names (BertForMaskedLM's
  // "bert."); model-wide tensors outside the base model (lm_head) have none.
  std::vector<std::string> prefixes;
  // Reads the family's keys into `c` (model_type is set); the shared checks
  // (sizes, heads) follow.
  void (*read_config)(const ConfigKeys& keys, ModelConfig& c);
  std::vector<TensorSpec> tensors;
};

// Every family, in the order messages list them.
const std::vector<const Family*>& families();
// The family that reads `model_type`, or null.
const Family* find_family(const std::string& model_type);

// Whether `c` has the tensor, and its stored shape.
bool has_tensor(const TensorSpec& t, const ModelConfig& c);
std::vector<std::size_t> tensor_shape(const TensorSpec& t, const ModelConfig& c);
std::size_t dim_size(Dim d, const ModelConfig& c);
// Model-wide or per layer.
bool per_layer(Role r);
// The name with "{l}" replaced by `layer`.
std::string tensor_name(const TensorSpec& t, std::size_t layer);

// A fused tensor (Role::qkv, Role::gate_up) holds several of the kernel's:
// slot 0..2 = q, k, v; 0..1 = gate, up. Slot s of a tensor is made of pieces:
// `count` rows from row `from` of a linear weight (columns of a Conv1D
// weight, elements of a bias) go to the kernel matrix's columns (the bias's
// elements) from `to`. An unfused tensor has one slot of one piece.
struct Piece {
  std::size_t from, count, to;
};
std::size_t slots(Role r);
std::size_t slot_size(Role r, std::size_t slot, const ModelConfig& c);  // the kernel's columns
std::vector<Piece> pieces(const TensorSpec& t, std::size_t slot, const ModelConfig& c);

}  // namespace mha
