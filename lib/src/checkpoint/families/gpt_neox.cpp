// GPT-NeoX and Pythia (modeling_gpt_neox.py): LayerNorm, attention and the
// MLP in parallel on the same input (use_parallel_residual), rotary
// positions on the first rotary_pct of each head, q, k and v fused in one
// Linear with rows per head, an untied LM head (embed_out).
#include "family_list.hpp"

#include <cmath>

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  c.num_layers = k.size({"num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"hidden_size"}, std::nullopt);
  c.h = k.size({"num_attention_heads"}, std::nullopt);
  c.d_ff = k.size({"intermediate_size"}, 4 * c.d_model);
  c.vocab_size = k.size({"vocab_size"}, std::nullopt);
  c.max_positions = k.size({"max_position_embeddings"}, 2048);
  c.norm_eps = k.number({"layer_norm_eps"}, 1e-5, true);
  c.activation = k.activation("hidden_act", "gelu");
  c.tie_word_embeddings = k.flag("tie_word_embeddings", false);
  c.parallel_residual = k.flag("use_parallel_residual", true);
  if (!k.flag("attention_bias", true))
    k.fail("key 'attention_bias' is false; expected true (not supported)");
  c.rms_norm = false;
  c.qkv_bias = true;
  c.rope = true;
  c.rope_theta = k.number({"rotary_emb_base", "rope_theta"}, 10000, true);
  c.rope_scaling = k.rope_scaling();
  const double pct = k.number({"rotary_pct", "partial_rotary_factor"}, 0.25, true);
  if (pct > 1) k.fail("key 'rotary_pct' is " + std::to_string(pct) + "; expected at most 1");
  c.rotary_fraction = pct;
}

using namespace table;
constexpr auto heads = Layout::linear_heads;

}  // namespace

const Family gpt_neox_family = {
    "gpt_neox",
    {"gpt_neox"},
    {"gpt_neox."},
    read_config,
    {
        {Role::token_embedding, W, "embed_in.weight", Dim::vocab, d, Layout::table},
        {Role::attn_norm, W, "layers.{l}.input_layernorm.weight", d, none, vec},
        {Role::attn_norm, B, "layers.{l}.input_layernorm.bias", d, none, vec},
        {Role::qkv, W, "layers.{l}.attention.query_key_value.weight", Dim::qkv, d, heads},
        {Role::qkv, B, "layers.{l}.attention.query_key_value.bias", Dim::qkv, none, heads},
        {Role::o, W, "layers.{l}.attention.dense.weight", d, d, lin},
        {Role::o, B, "layers.{l}.attention.dense.bias", d, none, vec},
        {Role::ffn_norm, W, "layers.{l}.post_attention_layernorm.weight", d, none, vec},
        {Role::ffn_norm, B, "layers.{l}.post_attention_layernorm.bias", d, none, vec},
        {Role::up, W, "layers.{l}.mlp.dense_h_to_4h.weight", f, d, lin},
        {Role::up, B, "layers.{l}.mlp.dense_h_to_4h.bias", f, none, vec},
        {Role::down, W, "layers.{l}.mlp.dense_4h_to_h.weight", d, f, lin},
        {Role::down, B, "layers.{l}.mlp.dense_4h_to_h.bias", d, none, vec},
        {Role::final_norm, W, "final_layer_norm.weight", d, none, vec},
        {Role::final_norm, B, "final_layer_norm.bias", d, none, vec},
        {Role::lm_head, W, "embed_out.weight", Dim::vocab, d, Layout::table, When::untied},
    }};

}  // namespace mha
