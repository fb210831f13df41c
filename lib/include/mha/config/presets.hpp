// Naming presets: one attention layer out of a real model's checkpoint
// (docs/checkpoints.md), by the model's own tensor names. A preset is a model
// family (checkpoint/family.hpp): its tensor table says which of a layer's
// tensors are the attention's (q, k, v, or fused q | k | v; o; QK-norms) and
// how each is stored (nn.Linear (out, in) transposed, Conv1D (in, out) as is,
// fused tensors split by rows, columns or per head); nothing here names a
// family. Tensors of the layer that are not its attention (norms, MLPs,
// buffers such as GPT-2's attn.bias) are left aside. A checkpoint's
// config.json, when one lies beside it, supplies what the names cannot: the
// heads and key/value heads, and the family's attention numerics for the
// layer (scale, soft-cap, rotary positions and their fraction and theta, the
// layer's sliding window, causality), read as `mha run --model` reads them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/checkpoint/family.hpp"
#include "mha/config/config.hpp"
#include "mha/config/weight_formats.hpp"
#include "mha/io/npy.hpp"

namespace mha {

// The family a weights_format value names: a family's name (bert, gpt2,
// llama, gpt_neox, gemma, phi3, opt) or one of its model_types; null if none.
const Family* preset_family(const std::string& name);

// The family whose attention names the tensors follow, if any (the first in
// the registry's order; a config.json beside the weights decides between
// families that share names: see preset_for).
const Family* detect_preset(const std::map<std::string, NpyArray>& arrays);
const Family* detect_preset(const std::vector<std::string>& names);

// The family a weights file's names follow: the one its config.json's
// model_type names, when that family's names are there (Gemma and OPT share
// LLaMA's attention names), else detect_preset's.
const Family* preset_for(const std::vector<std::string>& names, const std::string& weights_path);
const Family* preset_for(const std::map<std::string, NpyArray>& arrays,
                         const std::string& weights_path);

// Which of `names` select_layer keeps, each mapped to its name within the
// layer: lets a checkpoint reader fetch one layer's bytes only.
std::map<std::string, std::string> layer_names(const std::vector<std::string>& names,
                                               const Family* preset,
                                               std::optional<std::int64_t> layer_index,
                                               const std::optional<std::string>& prefix,
                                               const std::string& path);

// One layer's tensors with their layer prefix stripped: the names under
// `prefix` if given, else layer `layer_index` of the preset's numbering, else
// the only layer. Errors name the file and list the layers found.
std::map<std::string, NpyArray> select_layer(const std::map<std::string, NpyArray>& arrays,
                                             const Family* preset,
                                             std::optional<std::int64_t> layer_index,
                                             const std::optional<std::string>& prefix,
                                             const std::string& path);

// The config.json beside `weights_path`, read as `mha run --model` reads it,
// when there is one and its model_type belongs to `family`.
std::optional<ModelConfig> preset_model_config(const Family& family,
                                               const std::string& weights_path);

// One layer of a preset in native attention names (W_q, b_q, ...). `sizes`
// (config.json) splits fused tensors whose parts differ (grouped-query
// heads); without it a fused q | k | v splits into thirds, and per-head
// interleaving needs `h`.
NativeWeights preset_to_native(const std::map<std::string, NpyArray>& layer, const Family& preset,
                               const ModelConfig* sizes, std::optional<std::int64_t> h,
                               const std::string& path);

// One layer whole (with layer encoder), for families whose layer is this
// tool's post-norm LayerNorm encoder layer (BERT, RoBERTa): the attention as
// preset_to_native, the norms and the feed-forward from the family's table,
// in native layer names (layers.0.*). Other families are refused by name.
NativeWeights preset_layer_to_native(const std::map<std::string, NpyArray>& layer,
                                     const Family& preset, const ModelConfig* sizes,
                                     const std::string& path);

// A preset's settings in `c`, where the config leaves them unset: from the
// family's config.json beside `weights_path` (heads, key/value heads,
// head_dim, and the layer's attention numerics), else from the family's
// defaults (causal for causal LMs, rotary positions in the half layout).
void apply_preset_settings(Config& c, const Family& preset, const std::string& weights_path);

}  // namespace mha
