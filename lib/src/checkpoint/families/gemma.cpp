// Gemma (modeling_gemma.py), Gemma 2 (modeling_gemma2.py) and Gemma 3's text
// model (modeling_gemma3.py): RMSNorm scaling by (1 + w), embeddings times
// sqrt(hidden_size), GeGLU (gelu_pytorch_tanh), rotary positions, tied
// embeddings. Gemma 2 and 3 add norms after attention and the feed-forward
// (sandwich), query_pre_attn_scalar, sliding-window layers between global
// ones; Gemma 2 soft-caps attention and final logits; Gemma 3 adds QK-norm
// and a rope theta of its own for the sliding layers.
#include "family_list.hpp"

#include <cmath>

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  const std::string& t = c.model_type;
  const bool gemma2 = t == "gemma2", gemma3 = t == "gemma3_text";
  c.num_layers = k.size({"num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"hidden_size"}, std::nullopt);
  c.h = k.size({"num_attention_heads"}, std::nullopt);
  c.kv_heads = k.size({"num_key_value_heads"}, c.h);
  c.head_dim = k.size({"head_dim"}, 256);
  c.d_ff = k.size({"intermediate_size"}, std::nullopt);
  c.vocab_size = k.size({"vocab_size"}, std::nullopt);
  c.max_positions = k.size({"max_position_embeddings"}, 8192);
  c.norm_eps = k.number({"rms_norm_eps"}, 1e-6, true);
  c.norm_plus_one = true;
  c.embed_scale = std::sqrt(static_cast<double>(c.d_model));
  c.rope = true;
  c.rope_theta = k.number({"rope_theta"}, gemma3 ? 1000000 : 10000, true);
  c.rope_scaling = k.rope_scaling();
  // GemmaMLP: ACT2FN[hidden_activation], gelu_pytorch_tanh when it is not set.
  c.activation = k.activation("hidden_activation", "gelu_pytorch_tanh");
  c.tie_word_embeddings = k.flag("tie_word_embeddings", true);
  if (k.flag("attention_bias", false))
    k.fail("key 'attention_bias' is true; expected false (not supported)");
  if (!gemma2 && !gemma3) return;
  c.norm_placement = NormPlacement::sandwich;
  const double scalar = k.number({"query_pre_attn_scalar"}, gemma2 ? 224 : 256, true);
  c.attn_scale = 1 / std::sqrt(scalar);
  c.attn_softcap = k.number({"attn_logit_softcapping"}, gemma2 ? 50 : 0, true);
  c.final_softcap = k.number({"final_logit_softcapping"}, gemma2 ? 30 : 0, true);
  c.sliding_window = k.size({"sliding_window"}, 4096, true);
  if (gemma2) {  // Gemma2DecoderLayer: is_sliding = not bool(layer_idx % 2)
    c.sliding = k.sliding_layers(c.num_layers, [](std::size_t l) { return l % 2 == 0; });
    return;
  }
  // Gemma 3: every sliding_window_pattern-th layer global, the rest sliding
  // (is_sliding = bool((layer_idx + 1) % sliding_window_pattern)), with
  // rope_local_base_freq and no rope scaling on the sliding ones.
  c.qk_norm = true;
  const std::size_t pattern = k.size({"sliding_window_pattern"}, 6);
  c.sliding = k.sliding_layers(c.num_layers, [&](std::size_t l) { return (l + 1) % pattern != 0; });
  c.rope_local_theta = k.number({"rope_local_base_freq"}, 10000, true);
}

using namespace table;
constexpr auto q = Dim::q;
constexpr auto kv = Dim::kv;
constexpr auto hd = Dim::head_dim;
constexpr auto sandwich = When::sandwich_norm;

}  // namespace

const Family gemma_family = {
    "gemma",
    {"gemma", "gemma2", "gemma3_text"},
    {},
    read_config,
    {
        {Role::token_embedding, W, "model.embed_tokens.weight", Dim::vocab, d, Layout::table},
        {Role::attn_norm, W, "model.layers.{l}.input_layernorm.weight", d, none, vec},
        {Role::q, W, "model.layers.{l}.self_attn.q_proj.weight", q, d, lin},
        {Role::k, W, "model.layers.{l}.self_attn.k_proj.weight", kv, d, lin},
        {Role::v, W, "model.layers.{l}.self_attn.v_proj.weight", kv, d, lin},
        {Role::o, W, "model.layers.{l}.self_attn.o_proj.weight", d, q, lin},
        {Role::q_norm, W, "model.layers.{l}.self_attn.q_norm.weight", hd, none, vec, When::qk_norm},
        {Role::k_norm, W, "model.layers.{l}.self_attn.k_norm.weight", hd, none, vec, When::qk_norm},
        // Gemma: the norm before the MLP; Gemma 2 and 3: the norm after attention.
        {Role::ffn_norm, W, "model.layers.{l}.post_attention_layernorm.weight", d, none, vec,
         When::not_sandwich_norm},
        {Role::post_attn_norm, W, "model.layers.{l}.post_attention_layernorm.weight", d, none, vec,
         sandwich},
        {Role::ffn_norm, W, "model.layers.{l}.pre_feedforward_layernorm.weight", d, none, vec,
         sandwich},
        {Role::gate, W, "model.layers.{l}.mlp.gate_proj.weight", f, d, lin},
        {Role::up, W, "model.layers.{l}.mlp.up_proj.weight", f, d, lin},
        {Role::down, W, "model.layers.{l}.mlp.down_proj.weight", d, f, lin},
        {Role::post_ffn_norm, W, "model.layers.{l}.post_feedforward_layernorm.weight", d, none, vec,
         sandwich},
        {Role::final_norm, W, "model.norm.weight", d, none, vec},
        {Role::lm_head, W, "lm_head.weight", Dim::vocab, d, Layout::table, When::untied},
    }};

}  // namespace mha
