// BERT (modeling_bert.py) and RoBERTa / XLM-RoBERTa (modeling_roberta.py,
// modeling_xlm_roberta.py): a post-norm encoder with learned positions and
// token types; RoBERTa's positions start at padding_idx + 1 and skip padding.
#include "family_list.hpp"
#include "mha/base/message.hpp"

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  const bool roberta = c.model_type != "bert";
  c.num_layers = k.size({"num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"hidden_size"}, std::nullopt);
  c.h = k.size({"num_attention_heads"}, std::nullopt);
  c.d_ff = k.size({"intermediate_size"}, 4 * c.d_model);
  c.vocab_size = k.size({"vocab_size"}, std::nullopt);
  c.position_rows = k.size({"max_position_embeddings"}, 512);
  c.type_vocab_size = k.size({"type_vocab_size"}, roberta ? 1 : 2);
  c.norm_eps = k.number({"layer_norm_eps"}, roberta ? 1e-5 : 1e-12, true);
  c.activation = k.activation("hidden_act", "gelu");
  const std::string pos = k.string("position_embedding_type", "absolute");
  if (pos != "absolute")
    k.fail("key 'position_embedding_type' is " + echo(pos) + "; expected \"absolute\"");
  if (roberta) {
    // create_position_ids_from_input_ids: padding_idx + the count of the tokens so far
    // that are not padding_idx (pad_token_id, 1 by default).
    const std::int64_t pad = k.id("pad_token_id").value_or(1);
    if (pad < 0 || static_cast<std::size_t>(pad) + 1 >= c.position_rows)
      k.fail("key 'pad_token_id' is " + std::to_string(pad) + "; expected it under " +
             "max_position_embeddings - 1 (RoBERTa's positions start at pad_token_id + 1)");
    c.position_offset = static_cast<std::size_t>(pad) + 1;
    c.positions_skip_padding = true;
  }
  c.max_positions = c.position_rows - c.position_offset;
  c.causal = c.lm_head = c.rms_norm = c.final_norm = false;
  c.norm_placement = NormPlacement::post;
  c.qkv_bias = true;
}

using namespace table;

}  // namespace

const Family bert_family = {
    "bert",
    {"bert", "roberta", "xlm-roberta"},
    {"bert.", "roberta."},
    read_config,
    {
        {Role::token_embedding, W, "embeddings.word_embeddings.weight", Dim::vocab, d,
         Layout::table},
        {Role::position_embedding, W, "embeddings.position_embeddings.weight", Dim::position_rows,
         d, Layout::table},
        {Role::type_embedding, W, "embeddings.token_type_embeddings.weight", Dim::type_vocab, d,
         Layout::table},
        {Role::embedding_norm, W, "embeddings.LayerNorm.weight", d, none, vec},
        {Role::embedding_norm, B, "embeddings.LayerNorm.bias", d, none, vec},
        {Role::q, W, "encoder.layer.{l}.attention.self.query.weight", d, d, lin},
        {Role::q, B, "encoder.layer.{l}.attention.self.query.bias", d, none, vec},
        {Role::k, W, "encoder.layer.{l}.attention.self.key.weight", d, d, lin},
        {Role::k, B, "encoder.layer.{l}.attention.self.key.bias", d, none, vec},
        {Role::v, W, "encoder.layer.{l}.attention.self.value.weight", d, d, lin},
        {Role::v, B, "encoder.layer.{l}.attention.self.value.bias", d, none, vec},
        {Role::o, W, "encoder.layer.{l}.attention.output.dense.weight", d, d, lin},
        {Role::o, B, "encoder.layer.{l}.attention.output.dense.bias", d, none, vec},
        {Role::attn_norm, W, "encoder.layer.{l}.attention.output.LayerNorm.weight", d, none, vec},
        {Role::attn_norm, B, "encoder.layer.{l}.attention.output.LayerNorm.bias", d, none, vec},
        {Role::up, W, "encoder.layer.{l}.intermediate.dense.weight", f, d, lin},
        {Role::up, B, "encoder.layer.{l}.intermediate.dense.bias", f, none, vec},
        {Role::down, W, "encoder.layer.{l}.output.dense.weight", d, f, lin},
        {Role::down, B, "encoder.layer.{l}.output.dense.bias", d, none, vec},
        {Role::ffn_norm, W, "encoder.layer.{l}.output.LayerNorm.weight", d, none, vec},
        {Role::ffn_norm, B, "encoder.layer.{l}.output.LayerNorm.bias", d, none, vec},
    }};

}  // namespace mha
