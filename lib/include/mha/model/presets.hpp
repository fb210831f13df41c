// Naming presets: one attention layer out of a real model's checkpoint
// (docs/checkpoints.md), by the model's own tensor names:
//
//   bert   Hugging Face BERT: encoder.layer.N.attention.self.{query,key,value}.{weight,bias},
//          attention.output.dense.{weight,bias}; Linear weights (out, in), transposed
//   gpt2   GPT-2: h.N.attn.c_attn.{weight,bias} (Conv1D: (E, 3E), x @ W, split into q|k|v),
//          h.N.attn.c_proj.{weight,bias}; causal
//   llama  LLaMA, Mistral, Qwen2: model.layers.N.self_attn.{q,k,v,o}_proj.weight (out, in),
//          no biases (Qwen2: q/k/v biases, o none: b_o is zero); grouped-query heads from the
//          shapes; causal; rotary positions (half layout); Qwen3's QK-norm
//          (self_attn.{q,k}_norm.weight)
//
// Tensors of the layer that are not its attention (LayerNorms, MLPs, buffers
// such as GPT-2's attn.bias) are left aside. A checkpoint's config.json, when
// one lies beside it, supplies what the names cannot: the heads, key/value
// heads and rope_theta.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/io/npy.hpp"
#include "mha/model/config.hpp"
#include "mha/model/weight_formats.hpp"

namespace mha {

// The preset the names follow (bert, gpt2 or llama), if any.
std::optional<WeightsFormat> detect_preset(const std::map<std::string, NpyArray>& arrays);
std::optional<WeightsFormat> detect_preset(const std::vector<std::string>& names);

// Which of `names` select_layer keeps, each mapped to its name within the
// layer: lets a checkpoint reader fetch one layer's bytes only.
std::map<std::string, std::string> layer_names(const std::vector<std::string>& names,
                                               std::optional<WeightsFormat> preset,
                                               std::optional<std::int64_t> layer_index,
                                               const std::optional<std::string>& prefix,
                                               const std::string& path);

// One layer's tensors with their layer prefix stripped: the names under
// `prefix` if given, else layer `layer_index` of the preset's numbering, else
// the only layer. Errors name the file and list the layers found.
std::map<std::string, NpyArray> select_layer(const std::map<std::string, NpyArray>& arrays,
                                             std::optional<WeightsFormat> preset,
                                             std::optional<std::int64_t> layer_index,
                                             const std::optional<std::string>& prefix,
                                             const std::string& path);

// One layer of a preset in native attention names (W_q, b_q, ...).
NativeWeights preset_to_native(const std::map<std::string, NpyArray>& layer, WeightsFormat preset,
                               const std::string& path);

// One BERT layer whole (with layer encoder): the attention as preset_to_native,
// attention.output.LayerNorm -> norm1, intermediate.dense -> ffn W_1/b_1,
// output.dense -> ffn W_2/b_2, output.LayerNorm -> norm2, in native layer names
// (layers.0.*).
NativeWeights bert_layer_to_native(const std::map<std::string, NpyArray>& layer,
                                   const std::string& path);

// A preset's settings in `c`, where the config leaves them unset: from the
// checkpoint's config.json beside `weights_path` (h, kv_heads, rope_theta)
// and from the model's definition (gpt2, llama: causal; llama: rope half;
// bert layers: gelu, post-norm, layer_norm_eps from config.json or 1e-12).
void apply_preset_settings(Config& c, WeightsFormat preset, const std::string& weights_path);

}  // namespace mha
