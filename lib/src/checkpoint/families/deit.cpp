// DeiT (modeling_deit.py: DeiTModel, DeiTForImageClassification,
// DeiTForImageClassificationWithTeacher): ViT's encoder with a second
// learned token, the distillation token, after the CLS token:
// x = cat(cls, distillation, patches) + a position table of N + 2 rows. Its
// config.json keys are ViT's (DeiTConfig has ViTConfig's defaults).
// DeiTForImageClassification's `classifier` reads the CLS token;
// DeiTForImageClassificationWithTeacher has `cls_classifier` on the CLS
// token and `distillation_classifier` on the distillation token, its logits
// their mean. Which heads a checkpoint has is read from its weights
// (Checkpoint); a DeiTModel has none (its pooler is not run).
#include "family_list.hpp"

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  c.distillation_token = true;
  read_vit_config(k, c);
}

using namespace table;

}  // namespace

const Family deit_family = {
    "deit",
    {"deit"},
    {"deit."},
    read_config,
    {
        {Role::patch_projection, W, "embeddings.patch_embeddings.projection.weight", d,
         Dim::patch_pixels, Layout::conv2d},
        {Role::patch_projection, B, "embeddings.patch_embeddings.projection.bias", d, none, vec},
        {Role::cls_token, W, "embeddings.cls_token", Dim::one, d, Layout::parameter},
        {Role::distillation_token, W, "embeddings.distillation_token", Dim::one, d,
         Layout::parameter},
        {Role::position_embedding, W, "embeddings.position_embeddings", Dim::position_rows, d,
         Layout::parameter},
        {Role::final_norm, W, "layernorm.weight", d, none, vec},
        {Role::final_norm, B, "layernorm.bias", d, none, vec},
        {Role::classifier, W, "classifier.weight", Dim::labels, d, lin, When::classifier},
        {Role::classifier, B, "classifier.bias", Dim::labels, none, vec, When::classifier},
        {Role::classifier, W, "cls_classifier.weight", Dim::labels, d, lin,
         When::distillation_head},
        {Role::classifier, B, "cls_classifier.bias", Dim::labels, none, vec,
         When::distillation_head},
        {Role::distillation_classifier, W, "distillation_classifier.weight", Dim::labels, d, lin,
         When::distillation_head},
        {Role::distillation_classifier, B, "distillation_classifier.bias", Dim::labels, none, vec,
         When::distillation_head},
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
