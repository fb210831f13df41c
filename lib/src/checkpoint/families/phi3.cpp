// Phi-3 (modeling_phi3.py): LLaMA's numerics with q, k and v fused in
// qkv_proj's rows and the gate and up projections in gate_up_proj's; partial
// rotary (partial_rotary_factor); Mistral's sliding window when config.json
// sets one. Rope scalings other than linear (longrope, su, yarn) are refused
// by name.
#include "family_list.hpp"

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  c.num_layers = k.size({"num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"hidden_size"}, std::nullopt);
  c.h = k.size({"num_attention_heads"}, std::nullopt);
  c.kv_heads = k.size({"num_key_value_heads"}, c.h);
  c.head_dim = k.size({"head_dim"}, c.d_model / c.h);
  c.d_ff = k.size({"intermediate_size"}, std::nullopt);
  c.vocab_size = k.size({"vocab_size"}, std::nullopt);
  c.max_positions = k.size({"max_position_embeddings"}, 4096);
  c.norm_eps = k.number({"rms_norm_eps"}, 1e-5, true);
  c.rope = true;
  c.rope_theta = k.number({"rope_theta"}, 10000, true);
  c.rope_scaling = k.rope_scaling();
  const double factor = k.number({"partial_rotary_factor"}, 1, true);
  if (factor > 1)
    k.fail("key 'partial_rotary_factor' is " + std::to_string(factor) + "; expected at most 1");
  c.rotary_fraction = factor;
  c.activation = k.activation("hidden_act", "silu");
  c.tie_word_embeddings = k.flag("tie_word_embeddings", false);
  if (k.flag("attention_bias", false))
    k.fail("key 'attention_bias' is true; expected false (not supported)");
  c.sliding_window = k.size({"sliding_window"}, std::size_t{0}, true);
  c.sliding.assign(c.num_layers, 1);
}

using namespace table;

}  // namespace

const Family phi3_family = {
    "phi3",
    {"phi3"},
    {},
    read_config,
    {
        {Role::token_embedding, W, "model.embed_tokens.weight", Dim::vocab, d, Layout::table},
        {Role::attn_norm, W, "model.layers.{l}.input_layernorm.weight", d, none, vec},
        {Role::qkv, W, "model.layers.{l}.self_attn.qkv_proj.weight", Dim::qkv, d, lin},
        {Role::o, W, "model.layers.{l}.self_attn.o_proj.weight", d, Dim::q, lin},
        {Role::ffn_norm, W, "model.layers.{l}.post_attention_layernorm.weight", d, none, vec},
        {Role::gate_up, W, "model.layers.{l}.mlp.gate_up_proj.weight", Dim::two_d_ff, d, lin},
        {Role::down, W, "model.layers.{l}.mlp.down_proj.weight", d, f, lin},
        {Role::final_norm, W, "model.norm.weight", d, none, vec},
        {Role::lm_head, W, "lm_head.weight", Dim::vocab, d, Layout::table, When::untied},
    }};

}  // namespace mha
