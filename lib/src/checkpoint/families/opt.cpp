// OPT (modeling_opt.py): learned positions from row 2 (OPTLearnedPositional-
// Embedding's offset), pre-norm or, with do_layer_norm_before false,
// post-norm; ReLU; biases everywhere; the LM head tied to the embeddings.
// word_embed_proj_dim other than hidden_size (project_in / project_out) is
// refused by name.
#include "family_list.hpp"

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  c.num_layers = k.size({"num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"hidden_size"}, std::nullopt);
  c.h = k.size({"num_attention_heads"}, std::nullopt);
  c.d_ff = k.size({"ffn_dim"}, std::nullopt);
  c.vocab_size = k.size({"vocab_size"}, std::nullopt);
  c.max_positions = k.size({"max_position_embeddings"}, 2048);
  c.position_offset = 2;
  c.position_rows = c.max_positions + 2;
  c.norm_eps = 1e-5;  // nn.LayerNorm's default
  c.activation = k.activation("activation_function", "relu");
  c.tie_word_embeddings = k.flag("tie_word_embeddings", true);
  const std::size_t proj = k.size({"word_embed_proj_dim"}, c.d_model);
  if (proj != c.d_model)
    k.fail("key 'word_embed_proj_dim' is " + std::to_string(proj) + ", not hidden_size " +
           std::to_string(c.d_model) + "; expected them equal (project_in/out are not supported)");
  if (!k.flag("enable_bias", true))
    k.fail("key 'enable_bias' is false; expected true (not supported)");
  if (!k.flag("layer_norm_elementwise_affine", true))
    k.fail("key 'layer_norm_elementwise_affine' is false; expected true (not supported)");
  const bool before = k.flag("do_layer_norm_before", true);
  c.norm_placement = before ? NormPlacement::pre : NormPlacement::post;
  c.final_norm = before && !k.flag("_remove_final_layer_norm", false);
  c.rms_norm = false;
  c.qkv_bias = true;
}

using namespace table;
constexpr auto nf = When::final_norm;

}  // namespace

const Family opt_family = {
    "opt",
    {"opt"},
    {"model."},
    read_config,
    {
        {Role::token_embedding, W, "decoder.embed_tokens.weight", Dim::vocab, d, Layout::table},
        {Role::position_embedding, W, "decoder.embed_positions.weight", Dim::position_rows, d,
         Layout::table},
        {Role::attn_norm, W, "decoder.layers.{l}.self_attn_layer_norm.weight", d, none, vec},
        {Role::attn_norm, B, "decoder.layers.{l}.self_attn_layer_norm.bias", d, none, vec},
        {Role::q, W, "decoder.layers.{l}.self_attn.q_proj.weight", d, d, lin},
        {Role::q, B, "decoder.layers.{l}.self_attn.q_proj.bias", d, none, vec},
        {Role::k, W, "decoder.layers.{l}.self_attn.k_proj.weight", d, d, lin},
        {Role::k, B, "decoder.layers.{l}.self_attn.k_proj.bias", d, none, vec},
        {Role::v, W, "decoder.layers.{l}.self_attn.v_proj.weight", d, d, lin},
        {Role::v, B, "decoder.layers.{l}.self_attn.v_proj.bias", d, none, vec},
        {Role::o, W, "decoder.layers.{l}.self_attn.out_proj.weight", d, d, lin},
        {Role::o, B, "decoder.layers.{l}.self_attn.out_proj.bias", d, none, vec},
        {Role::ffn_norm, W, "decoder.layers.{l}.final_layer_norm.weight", d, none, vec},
        {Role::ffn_norm, B, "decoder.layers.{l}.final_layer_norm.bias", d, none, vec},
        {Role::up, W, "decoder.layers.{l}.fc1.weight", f, d, lin},
        {Role::up, B, "decoder.layers.{l}.fc1.bias", f, none, vec},
        {Role::down, W, "decoder.layers.{l}.fc2.weight", d, f, lin},
        {Role::down, B, "decoder.layers.{l}.fc2.bias", d, none, vec},
        {Role::final_norm, W, "decoder.final_layer_norm.weight", d, none, vec, nf},
        {Role::final_norm, B, "decoder.final_layer_norm.bias", d, none, vec, nf},
        {Role::lm_head, W, "lm_head.weight", Dim::vocab, d, Layout::table, When::untied},
    }};

}  // namespace mha
