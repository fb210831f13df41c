// GPT-2 (modeling_gpt2.py): pre-norm, learned positions, Conv1D weights (in,
// out) with q, k and v fused in c_attn's columns; the LM head tied to wte.
#include "family_list.hpp"

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  c.num_layers = k.size({"n_layer", "num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"n_embd", "hidden_size"}, std::nullopt);
  c.h = k.size({"n_head", "num_attention_heads"}, std::nullopt);
  c.d_ff = k.size({"n_inner"}, 4 * c.d_model);
  c.vocab_size = k.size({"vocab_size"}, 50257);
  c.max_positions = c.position_rows = k.size({"n_positions", "max_position_embeddings"}, 1024);
  c.norm_eps = k.number({"layer_norm_epsilon"}, 1e-5, true);
  c.activation = k.activation("activation_function", "gelu_new");
  c.tie_word_embeddings = k.flag("tie_word_embeddings", true);
  if (k.flag("scale_attn_by_inverse_layer_idx", false))
    k.fail("key 'scale_attn_by_inverse_layer_idx' is true; expected false (not supported)");
  if (!k.flag("scale_attn_weights", true))
    k.fail("key 'scale_attn_weights' is false; expected true (not supported)");
  c.rms_norm = false;
  c.qkv_bias = true;
}

using namespace table;
constexpr auto conv = Layout::conv1d;

}  // namespace

const Family gpt2_family = {
    "gpt2",
    {"gpt2"},
    {"transformer."},
    read_config,
    {
        {Role::token_embedding, W, "wte.weight", Dim::vocab, d, Layout::table},
        {Role::position_embedding, W, "wpe.weight", Dim::position_rows, d, Layout::table},
        {Role::attn_norm, W, "h.{l}.ln_1.weight", d, none, vec},
        {Role::attn_norm, B, "h.{l}.ln_1.bias", d, none, vec},
        {Role::qkv, W, "h.{l}.attn.c_attn.weight", d, Dim::qkv, conv},
        {Role::qkv, B, "h.{l}.attn.c_attn.bias", Dim::qkv, none, conv},
        {Role::o, W, "h.{l}.attn.c_proj.weight", d, d, conv},
        {Role::o, B, "h.{l}.attn.c_proj.bias", d, none, vec},
        {Role::ffn_norm, W, "h.{l}.ln_2.weight", d, none, vec},
        {Role::ffn_norm, B, "h.{l}.ln_2.bias", d, none, vec},
        {Role::up, W, "h.{l}.mlp.c_fc.weight", d, f, conv},
        {Role::up, B, "h.{l}.mlp.c_fc.bias", f, none, vec},
        {Role::down, W, "h.{l}.mlp.c_proj.weight", f, d, conv},
        {Role::down, B, "h.{l}.mlp.c_proj.bias", d, none, vec},
        {Role::final_norm, W, "ln_f.weight", d, none, vec},
        {Role::final_norm, B, "ln_f.bias", d, none, vec},
        {Role::lm_head, W, "lm_head.weight", Dim::vocab, d, Layout::table, When::untied},
    }};

}  // namespace mha
