// ViT (modeling_vit.py: ViTModel, ViTForImageClassification): a pre-norm
// encoder over an image's patches. The embeddings are the CLS token, then
// each patch_size square's Conv2d (kernel = stride = patch_size), plus a
// learned position table of N + 1 rows; layernorm_before / layernorm_after
// around attention and the feed-forward, a final layernorm.
// ViTForImageClassification's classifier (outside the "vit." base model, as
// an LM head is) reads the CLS token's final hidden state; a ViTModel has
// none (its pooler is not run).
#include "family_list.hpp"
#include "mha/base/message.hpp"

namespace mha {

void read_vit_config(const ConfigKeys& k, ModelConfig& c) {
  // ViTConfig's defaults (google/vit-base-patch16-224; DeiTConfig's are the same)
  c.num_layers = k.size({"num_hidden_layers"}, 12);
  c.d_model = k.size({"hidden_size"}, 768);
  c.h = k.size({"num_attention_heads"}, 12);
  c.d_ff = k.size({"intermediate_size"}, 3072);
  c.norm_eps = k.number({"layer_norm_eps"}, 1e-12, true);
  c.activation = k.activation("hidden_act", "gelu");
  c.qkv_bias = k.flag("qkv_bias", true);
  if (const nlohmann::json* s = k.find({"image_size"}); s && s->is_array()) {
    // ViTPatchEmbeddings takes an iterable as (height, width)
    if (s->size() != 2 || !(*s)[0].is_number_integer() || !(*s)[1].is_number_integer() ||
        (*s)[0].get<std::int64_t>() < 1 || (*s)[1].get<std::int64_t>() < 1 ||
        (*s)[0].get<std::int64_t>() > 65536 || (*s)[1].get<std::int64_t>() > 65536)
      k.fail("key 'image_size' is " + one_line(s->dump(), kEchoChars) +
             "; expected a positive integer or [height, width]");
    c.image_height = (*s)[0].get<std::size_t>();
    c.image_width = (*s)[1].get<std::size_t>();
  } else {
    c.image_height = c.image_width = k.size({"image_size"}, 224);
  }
  c.patch_size = k.size({"patch_size"}, 16);
  c.num_channels = k.size({"num_channels"}, 3);
  if (c.num_channels != 3)
    k.fail("key 'num_channels' is " + std::to_string(c.num_channels) +
           "; expected 3 (images are read as RGB)");
  if (c.image_height > 65536 || c.image_width > 65536 || c.patch_size > c.image_height ||
      c.patch_size > c.image_width)
    k.fail("key 'patch_size' is " + std::to_string(c.patch_size) + " for images of " +
           std::to_string(c.image_height) + " x " + std::to_string(c.image_width) +
           "; expected a patch inside the image (and image_size at most 65536)");
  // num_patches = (H // p) * (W // p): the border past the last whole patch is not seen; a
  // position row for each of the tokens before the patches too
  c.position_rows = c.image_tokens();
  c.max_positions = c.position_rows;
  // The classifier when the weights hold it (Checkpoint), its rows' names from id2label.
  c.classifier = true;
  c.labels = k.labels();
  c.causal = c.lm_head = c.rms_norm = false;
  c.final_norm = true;
  c.norm_placement = NormPlacement::pre;
}

namespace {
using namespace table;
}  // namespace

const Family vit_family = {
    "vit",
    {"vit"},
    {"vit."},
    read_vit_config,
    {
        {Role::patch_projection, W, "embeddings.patch_embeddings.projection.weight", d,
         Dim::patch_pixels, Layout::conv2d},
        {Role::patch_projection, B, "embeddings.patch_embeddings.projection.bias", d, none, vec},
        {Role::cls_token, W, "embeddings.cls_token", Dim::one, d, Layout::parameter},
        {Role::position_embedding, W, "embeddings.position_embeddings", Dim::position_rows, d,
         Layout::parameter},
        {Role::final_norm, W, "layernorm.weight", d, none, vec},
        {Role::final_norm, B, "layernorm.bias", d, none, vec},
        {Role::classifier, W, "classifier.weight", Dim::labels, d, lin, When::classifier},
        {Role::classifier, B, "classifier.bias", Dim::labels, none, vec, When::classifier},
        {Role::attn_norm, W, "encoder.layer.{l}.layernorm_before.weight", d, none, vec},
        {Role::attn_norm, B, "encoder.layer.{l}.layernorm_before.bias", d, none, vec},
        {Role::q, W, "encoder.layer.{l}.attention.attention.query.weight", d, d, lin},
        {Role::q, B, "encoder.layer.{l}.attention.attention.query.bias", d, none, vec,
         When::qkv_bias},
        {Role::k, W, "encoder.layer.{l}.attention.attention.key.weight", d, d, lin},
        {Role::k, B, "encoder.layer.{l}.attention.attention.key.bias", d, none, vec,
         When::qkv_bias},
        {Role::v, W, "encoder.layer.{l}.attention.attention.value.weight", d, d, lin},
        {Role::v, B, "encoder.layer.{l}.attention.attention.value.bias", d, none, vec,
         When::qkv_bias},
        {Role::o, W, "encoder.layer.{l}.attention.output.dense.weight", d, d, lin},
        {Role::o, B, "encoder.layer.{l}.attention.output.dense.bias", d, none, vec},
        {Role::ffn_norm, W, "encoder.layer.{l}.layernorm_after.weight", d, none, vec},
        {Role::ffn_norm, B, "encoder.layer.{l}.layernorm_after.bias", d, none, vec},
        {Role::up, W, "encoder.layer.{l}.intermediate.dense.weight", f, d, lin},
        {Role::up, B, "encoder.layer.{l}.intermediate.dense.bias", f, none, vec},
        {Role::down, W, "encoder.layer.{l}.output.dense.weight", d, f, lin},
        {Role::down, B, "encoder.layer.{l}.output.dense.bias", d, none, vec},
    }};

}  // namespace mha
