// T5 (modeling_t5.py): an encoder-decoder of pre-norm layers with T5LayerNorm
// (RMSNorm, no bias), no biases on any linear, unscaled logits with a
// relative position bias (layer 0's table, shared by its stack's
// self-attentions; none in cross-attention), a final norm per stack. T5 v1.0
// has a ReLU feed-forward and ties the LM head to the embedding, scaling the
// decoder's output by d_model^-0.5 before it; v1.1 and FLAN-T5
// ("gated-gelu") gate a tanh GELU and have an untied head.
#include "family_list.hpp"

#include <cmath>

#include "mha/base/message.hpp"

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  c.encoder_decoder = true;
  c.num_layers = k.size({"num_layers"}, 6);
  c.num_decoder_layers = k.size({"num_decoder_layers"}, c.num_layers);
  c.d_model = k.size({"d_model"}, 512);
  c.h = k.size({"num_heads"}, 8);
  c.head_dim = k.size({"d_kv"}, 64);  // inner_dim = num_heads * d_kv, not d_model
  c.d_ff = k.size({"d_ff"}, 2048);
  c.vocab_size = k.size({"vocab_size"}, 32128);
  c.norm_eps = k.number({"layer_norm_epsilon"}, 1e-6, true);
  c.relative_buckets = k.size({"relative_attention_num_buckets"}, 32);
  c.relative_max_distance = k.size({"relative_attention_max_distance"}, 128);
  // _relative_position_bucket: the encoder's half of the buckets, half of
  // those exact, the rest logarithmic up to max_distance (log(max_distance /
  // max_exact) > 0, max_exact >= 1).
  if (c.relative_buckets < 4)
    k.fail("key 'relative_attention_num_buckets' is " + std::to_string(c.relative_buckets) +
           "; expected at least 4 (the encoder's buckets are halved, then half of them exact)");
  if (c.relative_max_distance <= c.relative_buckets / 2)
    k.fail("key 'relative_attention_max_distance' is " + std::to_string(c.relative_max_distance) +
           "; expected more than relative_attention_num_buckets / 2 = " +
           std::to_string(c.relative_buckets / 2));
  // T5Config: "gated-ACT" or "ACT"; "gated-gelu" stands for gelu_new (the tanh GELU).
  const std::string proj = k.string("feed_forward_proj", "relu");
  const bool gated = proj.rfind("gated-", 0) == 0;
  const std::string act = gated ? proj.substr(6) : proj;
  if (act.empty() || act.find('-') != std::string::npos)
    k.fail("key 'feed_forward_proj' is " + echo(proj) +
           "; expected \"ACT\" or \"gated-ACT\", e.g. \"relu\" or \"gated-gelu\"");
  if (proj == "gated-gelu")
    c.activation = Activation::gelu_tanh;
  else if (act == "gelu")
    c.activation = Activation::gelu;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    c.activation = Activation::gelu_tanh;
  else if (act == "relu")
    c.activation = Activation::relu;
  else if (act == "silu" || act == "swish")
    c.activation = Activation::silu;
  else
    k.fail("key 'feed_forward_proj' is " + echo(proj) +
           "; expected relu, gelu, gelu_new, silu, or one of them after \"gated-\"");
  c.gated_ffn = gated;
  c.tie_word_embeddings = k.flag("tie_word_embeddings", true);
  // T5ForConditionalGeneration: sequence_output * model_dim**-0.5 when tied.
  if (c.tie_word_embeddings) c.lm_head_scale = 1 / std::sqrt(static_cast<double>(c.d_model));
  const std::int64_t pad = k.id("pad_token_id").value_or(0);
  c.decoder_start_token_id = k.id("decoder_start_token_id").value_or(pad);
  // Positions are relative: any length runs (within the memory estimate).
  c.max_positions = std::size_t{1} << 20;
  c.attn_scale = 1;  // Mesh TensorFlow's initialisation: no 1/sqrt(d_kv)
  c.rms_norm = true;
  c.norm_placement = NormPlacement::pre;
  c.final_norm = true;
  c.causal = false;  // the encoder; the decoder's self-attention is causal
  c.lm_head = true;
}

using namespace table;
constexpr auto q = Dim::q;
constexpr auto dec = Stack::decoder;
constexpr auto always = When::always;
constexpr auto gated = When::gated_ffn;
constexpr auto plain = When::plain_ffn;

}  // namespace

const Family t5_family = {
    "t5",
    {"t5"},
    {},
    read_config,
    {
        {Role::token_embedding, W, "shared.weight", Dim::vocab, d, Layout::table},
        {Role::relative_bias, W,
         "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", Dim::buckets,
         Dim::heads, Layout::table},
        {Role::final_norm, W, "encoder.final_layer_norm.weight", d, none, vec},
        {Role::attn_norm, W, "encoder.block.{l}.layer.0.layer_norm.weight", d, none, vec},
        {Role::q, W, "encoder.block.{l}.layer.0.SelfAttention.q.weight", q, d, lin},
        {Role::k, W, "encoder.block.{l}.layer.0.SelfAttention.k.weight", q, d, lin},
        {Role::v, W, "encoder.block.{l}.layer.0.SelfAttention.v.weight", q, d, lin},
        {Role::o, W, "encoder.block.{l}.layer.0.SelfAttention.o.weight", d, q, lin},
        {Role::ffn_norm, W, "encoder.block.{l}.layer.1.layer_norm.weight", d, none, vec},
        {Role::up, W, "encoder.block.{l}.layer.1.DenseReluDense.wi.weight", f, d, lin, plain},
        {Role::gate, W, "encoder.block.{l}.layer.1.DenseReluDense.wi_0.weight", f, d, lin, gated},
        {Role::up, W, "encoder.block.{l}.layer.1.DenseReluDense.wi_1.weight", f, d, lin, gated},
        {Role::down, W, "encoder.block.{l}.layer.1.DenseReluDense.wo.weight", d, f, lin},
        // The decoder: self-attention, cross-attention (layer.1), feed-forward (layer.2).
        {Role::relative_bias, W,
         "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", Dim::buckets,
         Dim::heads, Layout::table, always, dec},
        {Role::final_norm, W, "decoder.final_layer_norm.weight", d, none, vec, always, dec},
        {Role::attn_norm, W, "decoder.block.{l}.layer.0.layer_norm.weight", d, none, vec, always,
         dec},
        {Role::q, W, "decoder.block.{l}.layer.0.SelfAttention.q.weight", q, d, lin, always, dec},
        {Role::k, W, "decoder.block.{l}.layer.0.SelfAttention.k.weight", q, d, lin, always, dec},
        {Role::v, W, "decoder.block.{l}.layer.0.SelfAttention.v.weight", q, d, lin, always, dec},
        {Role::o, W, "decoder.block.{l}.layer.0.SelfAttention.o.weight", d, q, lin, always, dec},
        {Role::cross_norm, W, "decoder.block.{l}.layer.1.layer_norm.weight", d, none, vec, always,
         dec},
        {Role::cross_q, W, "decoder.block.{l}.layer.1.EncDecAttention.q.weight", q, d, lin, always,
         dec},
        {Role::cross_k, W, "decoder.block.{l}.layer.1.EncDecAttention.k.weight", q, d, lin, always,
         dec},
        {Role::cross_v, W, "decoder.block.{l}.layer.1.EncDecAttention.v.weight", q, d, lin, always,
         dec},
        {Role::cross_o, W, "decoder.block.{l}.layer.1.EncDecAttention.o.weight", d, q, lin, always,
         dec},
        {Role::ffn_norm, W, "decoder.block.{l}.layer.2.layer_norm.weight", d, none, vec, always,
         dec},
        {Role::up, W, "decoder.block.{l}.layer.2.DenseReluDense.wi.weight", f, d, lin, plain, dec},
        {Role::gate, W, "decoder.block.{l}.layer.2.DenseReluDense.wi_0.weight", f, d, lin, gated,
         dec},
        {Role::up, W, "decoder.block.{l}.layer.2.DenseReluDense.wi_1.weight", f, d, lin, gated,
         dec},
        {Role::down, W, "decoder.block.{l}.layer.2.DenseReluDense.wo.weight", d, f, lin, always,
         dec},
        {Role::lm_head, W, "lm_head.weight", Dim::vocab, d, Layout::table, When::untied},
    }};

}  // namespace mha
