#include "mha/checkpoint/family.hpp"

#include "families/family_list.hpp"

namespace mha {

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> all = {
#define MHA_FAMILY(name) &name##_family,
#include "families/registry.def"
#undef MHA_FAMILY
  };
  return all;
}

const Family* find_family(const std::string& model_type) {
  for (const Family* f : families())
    for (const std::string& t : f->model_types)
      if (t == model_type) return f;
  return nullptr;
}

bool has_tensor(const TensorSpec& t, const ModelConfig& c) {
  switch (t.when) {
    case When::always:
      return true;
    case When::qkv_bias:
      return c.qkv_bias;
    case When::qk_norm:
      return c.qk_norm;
    case When::sandwich_norm:
      return c.norm_placement == NormPlacement::sandwich;
    case When::not_sandwich_norm:
      return c.norm_placement != NormPlacement::sandwich;
    case When::untied:
      return !c.tie_word_embeddings && c.lm_head;
    case When::final_norm:
      return c.final_norm;
    case When::logits_bias:
      return c.logits_bias && c.lm_head;
    case When::gated_ffn:
      return c.gated_ffn;
    case When::plain_ffn:
      return !c.gated_ffn;
    case When::classifier:
      return c.classifier && !c.distillation_head;
    case When::distillation_head:
      return c.classifier && c.distillation_head;
  }
  return false;
}

std::size_t dim_size(Dim d, const ModelConfig& c) {
  const std::size_t q = c.h * c.head_dim, kv = c.kv_heads * c.head_dim;
  switch (d) {
    case Dim::none:
      return 0;
    case Dim::d_model:
      return c.d_model;
    case Dim::d_ff:
      return c.d_ff;
    case Dim::two_d_ff:
      return 2 * c.d_ff;
    case Dim::q:
      return q;
    case Dim::kv:
      return kv;
    case Dim::qkv:
      return q + 2 * kv;
    case Dim::head_dim:
      return c.head_dim;
    case Dim::vocab:
      return c.vocab_size;
    case Dim::position_rows:
      return c.position_rows;
    case Dim::type_vocab:
      return c.type_vocab_size;
    case Dim::heads:
      return c.h;
    case Dim::buckets:
      return c.relative_buckets;
    case Dim::one:
      return 1;
    case Dim::patch_pixels:
      return c.num_channels * c.patch_size * c.patch_size;
    case Dim::labels:
      return c.num_labels;
  }
  return 0;
}

std::vector<std::size_t> tensor_shape(const TensorSpec& t, const ModelConfig& c) {
  if (t.layout == Layout::conv2d)
    return {dim_size(t.rows, c), c.num_channels, c.patch_size, c.patch_size};
  if (t.layout == Layout::parameter) return {1, dim_size(t.rows, c), dim_size(t.cols, c)};
  if (t.cols == Dim::none) return {dim_size(t.rows, c)};
  return {dim_size(t.rows, c), dim_size(t.cols, c)};
}

namespace {

// The output features of a weight: its rows (linear) or columns (Conv1D).
Dim out_dim(const TensorSpec& t) {
  return t.layout == Layout::conv1d ? t.cols : t.rows;
}

}  // namespace

bool per_layer(Role r) {
  return r >= Role::attn_norm;
}

std::string tensor_name(const TensorSpec& t, std::size_t layer) {
  std::string name = t.name;
  const std::size_t at = name.find("{l}");
  if (at != std::string::npos) name.replace(at, 3, std::to_string(layer));
  return name;
}

std::size_t slots(Role r) {
  return r == Role::qkv ? 3 : r == Role::gate_up ? 2 : 1;
}

std::size_t slot_size(Role r, std::size_t slot, const ModelConfig& c) {
  if (r == Role::qkv) return (slot == 0 ? c.h : c.kv_heads) * c.head_dim;
  if (r == Role::gate_up) return c.d_ff;
  return 0;
}

std::vector<Piece> pieces(const TensorSpec& t, std::size_t slot, const ModelConfig& c) {
  if (slots(t.role) == 1) return {{0, dim_size(t.part == Part::bias ? t.rows : out_dim(t), c), 0}};
  const std::size_t q = c.h * c.head_dim, kv = c.kv_heads * c.head_dim;
  if (t.role == Role::gate_up) return {{slot * c.d_ff, c.d_ff, 0}};
  if (t.layout != Layout::linear_heads) {  // q | k | v
    const std::size_t from[3] = {0, q, q + kv};
    return {{from[slot], slot == 0 ? q : kv, 0}};
  }
  // (h, q | k | v, head_dim): GPT-NeoX's query_key_value (kv_heads = h)
  std::vector<Piece> out;
  const std::size_t hd = c.head_dim;
  for (std::size_t i = 0; i < c.h; ++i) out.push_back({i * 3 * hd + slot * hd, hd, i * hd});
  return out;
}

}  // namespace mha
