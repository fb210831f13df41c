// BART (modeling_bart.py): an encoder-decoder of post-norm layers with
// learned positions (BartLearnedPositionalEmbedding: position t at row t + 2)
// and a LayerNorm on the embeddings in both stacks, token embeddings times
// sqrt(d_model) where scale_embedding, biases on every linear, 1/sqrt(head_dim)
// logits; the LM head tied to the shared embedding, plus final_logits_bias.
#include "family_list.hpp"

#include <cmath>

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  c.encoder_decoder = true;
  c.num_layers = k.size({"encoder_layers"}, 12);
  c.num_decoder_layers = k.size({"decoder_layers"}, 12);
  c.d_model = k.size({"d_model"}, 1024);
  c.h = k.size({"encoder_attention_heads"}, 16);
  c.d_ff = k.size({"encoder_ffn_dim"}, 4096);
  // One layer shape serves both stacks (family.hpp's Dims are the config's).
  if (k.size({"decoder_attention_heads"}, 16) != c.h)
    k.fail("key 'decoder_attention_heads' differs from encoder_attention_heads " +
           std::to_string(c.h) + "; expected the same heads in both stacks (not supported)");
  if (k.size({"decoder_ffn_dim"}, 4096) != c.d_ff)
    k.fail("key 'decoder_ffn_dim' differs from encoder_ffn_dim " + std::to_string(c.d_ff) +
           "; expected the same feed-forward size in both stacks (not supported)");
  c.vocab_size = k.size({"vocab_size"}, 50265);
  c.max_positions = k.size({"max_position_embeddings"}, 1024);
  c.position_offset = 2;  // "if padding_idx is specified then offset the embedding ids by 2"
  c.position_rows = c.max_positions + c.position_offset;
  c.activation = k.activation("activation_function", "gelu");
  if (k.flag("scale_embedding", false)) c.embed_scale = std::sqrt(static_cast<double>(c.d_model));
  c.norm_eps = 1e-5;  // nn.LayerNorm's default: BartConfig has no key for it
  c.decoder_start_token_id = k.id("decoder_start_token_id").value_or(2);
  c.tie_word_embeddings = k.flag("tie_word_embeddings", true);
  c.logits_bias = true;  // unless the checkpoint lacks it (BartModel): Checkpoint
  c.rms_norm = false;
  c.norm_placement = NormPlacement::post;
  c.final_norm = false;
  c.qkv_bias = true;
  c.causal = false;  // the encoder; the decoder's self-attention is causal
  c.lm_head = true;
}

using namespace table;
constexpr auto dec = Stack::decoder;
constexpr auto always = When::always;

}  // namespace

const Family bart_family = {
    "bart",
    {"bart"},
    {"model."},
    read_config,
    {
        {Role::token_embedding, W, "shared.weight", Dim::vocab, d, Layout::table},
        {Role::position_embedding, W, "encoder.embed_positions.weight", Dim::position_rows, d,
         Layout::table},
        {Role::embedding_norm, W, "encoder.layernorm_embedding.weight", d, none, vec},
        {Role::embedding_norm, B, "encoder.layernorm_embedding.bias", d, none, vec},
        {Role::q, W, "encoder.layers.{l}.self_attn.q_proj.weight", d, d, lin},
        {Role::q, B, "encoder.layers.{l}.self_attn.q_proj.bias", d, none, vec},
        {Role::k, W, "encoder.layers.{l}.self_attn.k_proj.weight", d, d, lin},
        {Role::k, B, "encoder.layers.{l}.self_attn.k_proj.bias", d, none, vec},
        {Role::v, W, "encoder.layers.{l}.self_attn.v_proj.weight", d, d, lin},
        {Role::v, B, "encoder.layers.{l}.self_attn.v_proj.bias", d, none, vec},
        {Role::o, W, "encoder.layers.{l}.self_attn.out_proj.weight", d, d, lin},
        {Role::o, B, "encoder.layers.{l}.self_attn.out_proj.bias", d, none, vec},
        {Role::attn_norm, W, "encoder.layers.{l}.self_attn_layer_norm.weight", d, none, vec},
        {Role::attn_norm, B, "encoder.layers.{l}.self_attn_layer_norm.bias", d, none, vec},
        {Role::up, W, "encoder.layers.{l}.fc1.weight", f, d, lin},
        {Role::up, B, "encoder.layers.{l}.fc1.bias", f, none, vec},
        {Role::down, W, "encoder.layers.{l}.fc2.weight", d, f, lin},
        {Role::down, B, "encoder.layers.{l}.fc2.bias", d, none, vec},
        {Role::ffn_norm, W, "encoder.layers.{l}.final_layer_norm.weight", d, none, vec},
        {Role::ffn_norm, B, "encoder.layers.{l}.final_layer_norm.bias", d, none, vec},
        {Role::position_embedding, W, "decoder.embed_positions.weight", Dim::position_rows, d,
         Layout::table, always, dec},
        {Role::embedding_norm, W, "decoder.layernorm_embedding.weight", d, none, vec, always, dec},
        {Role::embedding_norm, B, "decoder.layernorm_embedding.bias", d, none, vec, always, dec},
        {Role::q, W, "decoder.layers.{l}.self_attn.q_proj.weight", d, d, lin, always, dec},
        {Role::q, B, "decoder.layers.{l}.self_attn.q_proj.bias", d, none, vec, always, dec},
        {Role::k, W, "decoder.layers.{l}.self_attn.k_proj.weight", d, d, lin, always, dec},
        {Role::k, B, "decoder.layers.{l}.self_attn.k_proj.bias", d, none, vec, always, dec},
        {Role::v, W, "decoder.layers.{l}.self_attn.v_proj.weight", d, d, lin, always, dec},
        {Role::v, B, "decoder.layers.{l}.self_attn.v_proj.bias", d, none, vec, always, dec},
        {Role::o, W, "decoder.layers.{l}.self_attn.out_proj.weight", d, d, lin, always, dec},
        {Role::o, B, "decoder.layers.{l}.self_attn.out_proj.bias", d, none, vec, always, dec},
        {Role::attn_norm, W, "decoder.layers.{l}.self_attn_layer_norm.weight", d, none, vec, always,
         dec},
        {Role::attn_norm, B, "decoder.layers.{l}.self_attn_layer_norm.bias", d, none, vec, always,
         dec},
        {Role::cross_q, W, "decoder.layers.{l}.encoder_attn.q_proj.weight", d, d, lin, always, dec},
        {Role::cross_q, B, "decoder.layers.{l}.encoder_attn.q_proj.bias", d, none, vec, always,
         dec},
        {Role::cross_k, W, "decoder.layers.{l}.encoder_attn.k_proj.weight", d, d, lin, always, dec},
        {Role::cross_k, B, "decoder.layers.{l}.encoder_attn.k_proj.bias", d, none, vec, always,
         dec},
        {Role::cross_v, W, "decoder.layers.{l}.encoder_attn.v_proj.weight", d, d, lin, always, dec},
        {Role::cross_v, B, "decoder.layers.{l}.encoder_attn.v_proj.bias", d, none, vec, always,
         dec},
        {Role::cross_o, W, "decoder.layers.{l}.encoder_attn.out_proj.weight", d, d, lin, always,
         dec},
        {Role::cross_o, B, "decoder.layers.{l}.encoder_attn.out_proj.bias", d, none, vec, always,
         dec},
        {Role::cross_norm, W, "decoder.layers.{l}.encoder_attn_layer_norm.weight", d, none, vec,
         always, dec},
        {Role::cross_norm, B, "decoder.layers.{l}.encoder_attn_layer_norm.bias", d, none, vec,
         always, dec},
        {Role::up, W, "decoder.layers.{l}.fc1.weight", f, d, lin, always, dec},
        {Role::up, B, "decoder.layers.{l}.fc1.bias", f, none, vec, always, dec},
        {Role::down, W, "decoder.layers.{l}.fc2.weight", d, f, lin, always, dec},
        {Role::down, B, "decoder.layers.{l}.fc2.bias", d, none, vec, always, dec},
        {Role::ffn_norm, W, "decoder.layers.{l}.final_layer_norm.weight", d, none, vec, always,
         dec},
        {Role::ffn_norm, B, "decoder.layers.{l}.final_layer_norm.bias", d, none, vec, always, dec},
        {Role::lm_head, W, "lm_head.weight", Dim::vocab, d, Layout::table, When::untied},
        {Role::logits_bias, W, "final_logits_bias", Dim::one, Dim::vocab, Layout::table,
         When::logits_bias},
    }};

}  // namespace mha
