#include "mha/run/plan.hpp"

#include <set>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/config/mask_file.hpp"
#include "mha/config/presets.hpp"
#include "mha/config/weights.hpp"
#include "mha/io/file_kind.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/io/safetensors.hpp"

namespace mha {

const std::vector<std::size_t>& PlanFiles::npy_shape(const std::string& path) {
  if (errors_.count(path)) fail_input(errors_[path]);
  if (!shapes_.count(path)) {
    try {
      const NpyHeaderInfo header = read_npy_header(path);  // a full read's checks, no data
      shapes_[path] = header.shape;
      dtypes_[path] = header.dtype;
    } catch (const Error& e) {
      errors_[path] = e.what();
      throw;
    }
  }
  return shapes_[path];
}

DType PlanFiles::npy_dtype(const std::string& path) {
  npy_shape(path);
  return dtypes_.at(path);
}

namespace {

// The family a preset format names (weights_format: gpt2, gemma2, ...).
const Family* named_family(WeightsFormat format, const std::string& preset) {
  return format == WeightsFormat::preset ? preset_family(preset) : nullptr;
}

// A weights file's arrays; with layer_index or prefix, one layer's, its prefix
// stripped (presets.hpp), reading only that layer's bytes from a .safetensors.
std::map<std::string, NpyArray> layer_arrays(const std::string& path, const Family* named,
                                             std::optional<std::int64_t> layer_index,
                                             const std::optional<std::string>& prefix,
                                             const WeightsCheck& check) {
  std::map<std::string, NpyArray> arrays;
  if ((layer_index || prefix) && !provided_weights(path) &&
      file_kind(path) == FileKind::safetensors) {
    // One layer of a checkpoint: its names from the header, then its bytes only.
    const std::vector<std::string> names = safetensors_names(path);
    const Family* preset = named ? named : preset_for(names, path);
    std::set<std::string> wanted;
    const auto selected = layer_names(names, preset, layer_index, prefix, path);
    for (const auto& [full, own] : selected) wanted.insert(full);
    std::map<std::string, NpyArray> layer = read_safetensors(path, wanted);
    for (const auto& [full, own] : selected) arrays[own] = std::move(layer.at(full));
  } else {
    arrays = read_weight_arrays(path, check);
    if (layer_index || prefix) {
      const Family* preset = named ? named : preset_for(arrays, path);
      arrays = select_layer(arrays, preset, layer_index, prefix, path);
    }
  }
  return arrays;
}

}  // namespace

const NativeWeights& PlanFiles::weights(const std::string& path, WeightsFormat format,
                                        const std::string& preset,
                                        std::optional<std::int64_t> layer_index,
                                        const std::optional<std::string>& prefix,
                                        std::optional<std::uint64_t> max_bytes,
                                        const WeightsCheck* sizes,
                                        const std::optional<std::string>& keras_layer) {
  const Family* named = named_family(format, preset);
  // The sizes checked are part of the key: a sweep's run of other inputs may
  // fit the file that one run's inputs do not.
  const std::string checked =
      sizes ? std::to_string(sizes->d_model) + "," + std::to_string(sizes->kdim) + "," +
                  std::to_string(sizes->vdim) + "," + std::to_string(sizes->d_out) + ":"
            : "";
  const std::string key = std::string(to_string(format)) + ":" + preset + ":" +
                          (keras_layer ? "keras:" + *keras_layer + ":" : "") +
                          (layer_index ? std::to_string(*layer_index) : "") + ":" +
                          prefix.value_or("") + ":" + checked + path;
  if (errors_.count(key)) fail_input(errors_[key]);
  if (!weights_.count(key)) {
    try {
      // Arrays given in memory are converted from where they are, not copied first.
      const auto* given = layer_index || prefix ? nullptr : provided_weights(path);
      // The names (one layer's are checked once selected) and the sizes,
      // from the headers before any data is read.
      WeightsCheck check;
      if (!layer_index && !prefix && format != WeightsFormat::preset) check.names = format;
      check.max_bytes = max_bytes;
      check.keras_layer = keras_layer;
      if (sizes) {
        check.d_model = sizes->d_model, check.d_model_from = sizes->d_model_from;
        check.kdim = sizes->kdim, check.kdim_from = sizes->kdim_from;
        check.vdim = sizes->vdim, check.vdim_from = sizes->vdim_from;
        check.d_out = sizes->d_out, check.d_out_from = sizes->d_out_from;
      }
      weights_[key] = given ? to_native(*given, format, path, named)
                            : to_native(layer_arrays(path, named, layer_index, prefix, check),
                                        format, path, named);
    } catch (const Error& e) {
      errors_[key] = e.what();
      throw;
    }
  }
  return weights_[key];
}

const NativeWeights& PlanFiles::layer_weights(const std::string& path, WeightsFormat format,
                                              const std::string& preset,
                                              std::optional<std::int64_t> layer_index,
                                              const std::optional<std::string>& prefix,
                                              std::optional<std::uint64_t> max_bytes,
                                              const std::optional<std::string>& keras_layer) {
  const Family* named = named_family(format, preset);
  const std::string key = std::string("layers:") + to_string(format) + ":" + preset + ":" +
                          (keras_layer ? "keras:" + *keras_layer + ":" : "") +
                          (layer_index ? std::to_string(*layer_index) : "") + ":" +
                          prefix.value_or("") + ":" + path;
  if (errors_.count(key)) fail_input(errors_[key]);
  if (!weights_.count(key)) {
    try {
      WeightsCheck check;
      check.max_bytes = max_bytes;
      check.keras_layer = keras_layer;
      std::map<std::string, NpyArray> arrays =
          layer_arrays(path, named, layer_index, prefix, check);
      const Family* family = named ? named : preset_for(arrays, path);
      if (family) {
        const std::optional<ModelConfig> sizes = preset_model_config(*family, path);
        weights_[key] = preset_layer_to_native(arrays, *family, sizes ? &*sizes : nullptr, path);
      } else
        weights_[key] = layer_weights_to_native(arrays, format, path);
    } catch (const Error& e) {
      errors_[key] = e.what();
      throw;
    }
  }
  return weights_[key];
}

namespace {

// The most a weights file's arrays may hold: the run's max_memory, checked
// on their headers before their data are read (the estimate comes later).
std::uint64_t weights_limit(const Config& c) {
  return c.max_memory.value_or(default_max_memory());
}

void check_rope(const Config& c, const Dims& d) {
  if (!c.rope_dim) return;
  if (c.rope == Config::RopeKind::none)
    fail_input("rope_dim: " + std::to_string(*c.rope_dim) +
               " without rope; set rope: half or "
               "interleaved");
  if (*c.rope_dim % 2 || static_cast<std::size_t>(*c.rope_dim) > d.d_k)
    fail_input("rope_dim: " + std::to_string(*c.rope_dim) +
               " must be even and at most d_k = " + std::to_string(d.d_k));
}

// Keys of an attention run that a layer has no use for.
void refuse_attention_keys(const Config& c) {
  const char* kind = to_string(c.layer);
  auto refuse = [&](bool given, const char* key, const char* why) {
    if (given) fail_input(std::string(key) + ": not with layer " + kind + " (" + why + ")");
  };
  refuse(c.key.has_value(), "key", "a layer attends over its own input; give query");
  refuse(c.value.has_value(), "value", "a layer attends over its own input; give query");
  refuse(c.attention_axes.has_value(), "attention_axes", "layers take (B, T, d_model) inputs");
  refuse(c.plot, "plot", "use save_attention and mha plot --layer_index");
  refuse(c.use_bias == false, "use_bias", "layers have biases, as PyTorch's");
  refuse(c.save_weights && c.save_weights_format != WeightsFormat::native, "save_weights",
         "layer weights are written in native names only");
  refuse(c.kdim.has_value() || c.vdim.has_value(), c.kdim ? "kdim" : "vdim",
         "key and value are the layer's input, of width d_model");
  if (c.layer != LayerKind::decoder) {
    refuse(c.memory.has_value(), "memory", "only decoders have cross-attention");
    refuse(c.memory_key_lengths.has_value(), "memory_key_lengths",
           "only decoders have cross-attention");
  }
}

// The layer count and final norm, from the weights file when there is one
// (whose layer 0 then gives the self-attention's sizes, as an attention run's
// weights file gives its sizes).
void plan_stack_weights(const Config& c, PlanFiles& files, RunPlan& p, StackShape& s) {
  if (!c.weights) {
    s.num_layers = static_cast<std::size_t>(c.num_layers.value_or(1));
    s.final_norm = c.final_norm.value_or(false);
    return;
  }
  const NativeWeights* lw = p.weights =
      &files.layer_weights(*c.weights, c.weights_format, c.weights_preset, c.layer_index,
                           c.weights_prefix, weights_limit(c), c.keras_layer);
  p.shapes.weights_name = *c.weights;
  const std::string prefix = "layers.0.self_attn.";
  for (const auto& [name, array] : lw->arrays)
    if (name.compare(0, prefix.size(), prefix) == 0)
      p.shapes.weights[name.substr(prefix.size())] = array.shape;
  const std::size_t in_file = layer_count(lw->arrays);
  if (c.num_layers && static_cast<std::size_t>(*c.num_layers) != in_file)
    fail_input("num_layers: " + std::to_string(*c.num_layers) + ", but " + *c.weights + " holds " +
               std::to_string(in_file) + " layer(s)");
  s.num_layers = in_file;
  s.final_norm = c.final_norm.value_or(lw->arrays.count("final_norm.gamma") > 0);
}

// d_ff: the config's, W_1's columns, or 4 d_model.
std::size_t plan_d_ff(const Config& c, const Dims& d, const NativeWeights* lw) {
  std::size_t d_ff = c.d_ff ? static_cast<std::size_t>(*c.d_ff) : 4 * d.d_model;
  if (!lw) return d_ff;
  auto it = lw->arrays.find("layers.0.ffn.W_1");
  if (it != lw->arrays.end() && it->second.shape.size() == 2) {
    if (c.d_ff && it->second.shape[1] != d_ff)
      fail_input("d_ff: " + std::to_string(d_ff) + ", but " + *c.weights +
                 ": layers.0.ffn.W_1 has shape " + shape_str(it->second.shape));
    d_ff = it->second.shape[1];
  }
  return d_ff;
}

// A decoder's cross-attention: the self-attention's queries over the
// memory's S keys (the memory file's, else kv_seq_len, else T).
Dims plan_cross_attention(const Config& c, PlanFiles& files, const Dims& d) {
  Dims x = d;
  x.key_is_query = false;
  x.value_is_key = true;
  x.kv_heads = 0;  // grouped-query heads, windows and ALiBi are the self-attention's
  if (c.memory) {
    const std::vector<std::size_t>& m = files.npy_shape(*c.memory);
    const bool three = m.size() == 3;
    if ((m.size() != 2 && !three) || m.back() != d.d_model || (three && m[0] != d.B))
      fail_input(*c.memory + ": memory has shape " + shape_str(m) +
                 ", expected (B, S, d_model) = (" + std::to_string(d.B) + ", S, " +
                 std::to_string(d.d_model) + ")");
    x.S = m[m.size() - 2];
    if (!three && d.B != 1)
      fail_input(*c.memory + ": memory has shape " + shape_str(m) +
                 ", a 2-D memory needs batch 1; expected (B, S, d_model)");
  } else {
    x.S = c.kv_seq_len ? static_cast<std::size_t>(*c.kv_seq_len) : d.T;
  }
  if (c.memory_key_lengths) {
    const auto& lengths = *c.memory_key_lengths;
    if (lengths.size() != d.B)
      fail_input("memory_key_lengths: " + std::to_string(lengths.size()) + " lengths for batch " +
                 std::to_string(d.B) + "; expected one per batch element");
    for (std::size_t b = 0; b < lengths.size(); ++b)
      if (static_cast<std::size_t>(lengths[b]) > x.S)
        fail_input("memory_key_lengths[" + std::to_string(b) + "]: " + std::to_string(lengths[b]) +
                   " is longer than the memory (S = " + std::to_string(x.S) + ")");
  }
  if (c.kv_seq_len && c.memory && static_cast<std::size_t>(*c.kv_seq_len) != x.S)
    fail_input("kv_seq_len: " + std::to_string(*c.kv_seq_len) + ", but " + *c.memory +
               " has S = " + std::to_string(x.S));
  return x;
}

// The attention's estimate, plus every layer's weights, the activations and
// the FFN's hidden layer; refused above max_memory.
MemoryEstimate stack_memory(const Config& c, const StackShape& s, bool from_file, int threads) {
  const Dims& d = s.self;
  const std::size_t itemsize = c.dtype == ComputeType::float64 ? 8 : 4;
  MemoryEstimate memory =
      estimate_memory(c.layer == LayerKind::decoder && s.cross.S > d.S ? s.cross : d, itemsize,
                      c.save_attention, threads);
  const double per_layer = (4.0 * d.d_model * d.d_model * (c.layer == LayerKind::decoder ? 2 : 1) +
                            2.0 * d.d_model * s.d_ff) *
                           itemsize;
  memory.weights += per_layer * static_cast<double>(s.num_layers) * (from_file ? 2 : 1);
  memory.output += (4.0 * d.B * d.T * d.d_model + 1.0 * d.B * d.T * s.d_ff) * itemsize;
  if (c.save_hidden_states) memory.output += 1.0 * s.num_layers * d.B * d.T * d.d_model * itemsize;
  if (c.repeat > 1 || c.warmup)  // the warm and timed calls' output
    memory.output += 1.0 * d.B * d.T * d.d_model * itemsize;
  const std::uint64_t limit = c.max_memory.value_or(default_max_memory());
  if (memory.total() > static_cast<double>(limit))
    fail_input("this run needs about " + memory.describe() + " but max_memory is " +
               format_bytes(static_cast<double>(limit)) + "; reduce batch, seq_len or num_layers" +
               (c.dtype == ComputeType::float64 ? ", use float32," : "") + " or raise max_memory");
  return memory;
}

// The plan of a stack of Transformer layers (docs/layers.md): the input is
// the query, the self-attention's sizes are resolved as an attention run's
// (key = value = query), the cross-attention's keys come from the memory.
RunPlan plan_stack(const Config& c, PlanFiles& files, RunPlan p) {
  refuse_attention_keys(c);
  FileShapes& shapes = p.shapes;
  if (c.query) shapes.query = files.npy_shape(*c.query), shapes.query_name = *c.query;
  StackShape s;
  s.kind = c.layer;
  plan_stack_weights(c, files, p, s);
  if (p.weights && p.weights->h) {  // Keras encoder blocks: their kernels hold h
    shapes.weights_h = p.weights->h;
    shapes.weights_name = *c.weights;
  }
  p.use_bias = true;
  Config self = c;  // the self-attention: key = value = the input; kv_seq_len is the memory's
  self.weights.reset();
  self.kv_seq_len.reset();
  const Dims& d = p.dims = s.self = resolve_dims(self, shapes);
  check_rope(c, d);
  if (!d.key_is_query || !d.value_is_key || d.S != d.T)
    fail_runtime("internal: a layer's self-attention did not resolve as self-attention");
  if (d.d_out != d.d_model)
    fail_input("d_out: " + std::to_string(d.d_out) + ", but a layer's residual connections need " +
               "d_out = d_model = " + std::to_string(d.d_model));
  s.d_ff = plan_d_ff(c, d, p.weights);
  if (c.layer == LayerKind::decoder) {
    s.cross = plan_cross_attention(c, files, d);
  } else {
    s.cross = d;
    if (c.kv_seq_len && static_cast<std::size_t>(*c.kv_seq_len) != d.T)
      fail_input("kv_seq_len: not with layer encoder (its keys are its input: S = T)");
  }
  p.stack = s;
  // A decoder's self-attention is causal unless the config says otherwise.
  if (c.layer == LayerKind::decoder && !c.causal_given) {
    p.config.causal = Causal::top_left;
    p.config.causal_given = true;
  }
  p.memory = stack_memory(c, s, p.weights != nullptr, p.threads);
  if (c.query) check_float_array(files.npy_dtype(*c.query), *shapes.query, *c.query);
  if (c.memory) {
    const std::vector<std::size_t>& m = files.npy_shape(*c.memory);
    check_float_array(files.npy_dtype(*c.memory), m, *c.memory);
  }
  return p;
}

// The sizes an attention run's weights file is checked against from its headers, before
// its data are inflated: the config's, else the input files' (their last axis, from the .npy
// headers), as resolve_dims agrees them. A file that cannot be read gives no size here: its
// error comes where it came before.
WeightsCheck expected_sizes(const Config& c, PlanFiles& files) {
  WeightsCheck s;
  const auto config = [](const std::optional<std::int64_t>& v, std::size_t& size) {
    if (v && *v > 0) size = static_cast<std::size_t>(*v);
  };
  config(c.d_model, s.d_model);
  config(c.kdim, s.kdim);
  config(c.vdim, s.vdim);
  config(c.d_out, s.d_out);
  const auto input = [&](const std::optional<std::string>& path, const std::string& role,
                         std::size_t& size, std::string& from) {
    if (size || !path) return;
    try {
      const std::vector<std::size_t>& shape = files.npy_shape(*path);
      if (shape.size() < 2 || shape.back() == 0) return;  // refused by name later
      size = shape.back();
      from = role + " '" + *path + "' of shape " + shape_str(shape);
    } catch (const Error&) {
    }
  };
  input(c.query, "query", s.d_model, s.d_model_from);
  // Without key and value files the query is both (self-attention); a value alone is the key.
  const std::optional<std::string>& key = c.key ? c.key : c.value ? c.value : c.query;
  const std::optional<std::string>& value = c.value ? c.value : key;
  const char* self = c.key || c.value ? "" : " used as key (self-attention)";
  input(key, (c.key ? "key" : c.value ? "value" : "query"), s.kdim, s.kdim_from);
  if (*self && !s.kdim_from.empty()) s.kdim_from += self;
  input(value, (c.value ? "value" : c.key ? "key" : "query"), s.vdim, s.vdim_from);
  if (!c.key && !c.value && !s.vdim_from.empty()) s.vdim_from += " used as value (self-attention)";
  return s;
}

}  // namespace

RunPlan plan_run(const Config& given, PlanFiles& files) {
  RunPlan p;
  Config c = given;
  const WeightsCheck sizes =
      c.weights && c.layer == LayerKind::attention ? expected_sizes(c, files) : WeightsCheck{};
  // A checkpoint preset (a model family's names) brings the model's settings (presets.hpp).
  if (c.weights) {
    const NativeWeights& w =
        c.layer == LayerKind::attention
            ? files.weights(*c.weights, c.weights_format, c.weights_preset, c.layer_index,
                            c.weights_prefix, weights_limit(c), &sizes, c.keras_layer)
            : files.layer_weights(*c.weights, c.weights_format, c.weights_preset, c.layer_index,
                                  c.weights_prefix, weights_limit(c), c.keras_layer);
    if (w.format == WeightsFormat::preset && w.family)
      apply_preset_settings(c, *w.family, *c.weights);
  }
  p.config = c;
  p.threads = resolve_threads(c.threads);
  if (c.layer != LayerKind::attention) return plan_stack(c, files, std::move(p));
  FileShapes& shapes = p.shapes;
  if (c.query) shapes.query = files.npy_shape(*c.query), shapes.query_name = *c.query;
  if (c.key) shapes.key = files.npy_shape(*c.key), shapes.key_name = *c.key;
  if (c.value) shapes.value = files.npy_shape(*c.value), shapes.value_name = *c.value;
  // attention_axes: N-D inputs run as (B', L, F), every other axis a batch axis.
  p.axes = plan_attention_axes(c, shapes);
  if (c.weights) {
    p.weights = &files.weights(*c.weights, c.weights_format, c.weights_preset, c.layer_index,
                               c.weights_prefix, weights_limit(c), &sizes, c.keras_layer);
    shapes.weights_name = *c.weights;
    shapes.weights_h = p.weights->h;
    for (const auto& [name, array] : p.weights->arrays) shapes.weights[name] = array.shape;
  }
  // Biases: as the weights file has them, unless the config says otherwise.
  p.use_bias = c.use_bias.value_or(!p.weights || p.weights->arrays.count("b_q") > 0);
  const Dims& d = p.dims = resolve_dims(c, shapes);
  check_rope(c, d);
  if (c.save_weights && c.save_weights_format != WeightsFormat::native && d.kv() != d.h)
    fail_input(std::string("save_weights: grouped-query weights (kv_heads = ") +
               std::to_string(d.kv()) + " < h = " + std::to_string(d.h) + ") have no " +
               to_string(c.save_weights_format) + " layout; use save_weights: native");
  // Refused before any big allocation, with the numbers.
  const std::size_t itemsize = c.dtype == ComputeType::float64 ? 8 : 4;
  p.memory = estimate_memory(d, itemsize, c.save_attention || c.plot, p.threads);
  if (c.repeat > 1 || c.warmup) p.memory.output *= 2;  // the warm and timed calls' scratch output
  const std::uint64_t limit = c.max_memory.value_or(default_max_memory());
  if (p.memory.total() > static_cast<double>(limit))
    fail_input("this run needs about " + p.memory.describe() + " but max_memory is " +
               format_bytes(static_cast<double>(limit)) + "; reduce batch or seq_len" +
               (c.dtype == ComputeType::float64 ? ", use float32," : "") + " or raise max_memory");
  // The inputs' dtypes, in the order the load stage converts them (with
  // files, query + value means the value file is the key too).
  auto check_float = [&](const std::string& path, const std::vector<std::size_t>& shape) {
    check_float_array(files.npy_dtype(path), shape, path);
  };
  if (c.query) check_float(*c.query, *shapes.query);
  if (!d.key_is_query && (c.key || c.value))
    check_float(c.key ? *c.key : *c.value, c.key ? *shapes.key : *shapes.value);
  if (!d.value_is_key && c.value) check_float(*c.value, *shapes.value);
  return p;
}

void check_loadable(const RunPlan& p) {
  if (p.stack) {
    if (p.weights) stack_from_arrays<float>(p.weights->arrays, *p.stack, *p.config.weights);
    load_mask<float>(p.config, p.dims);
    return;
  }
  if (p.weights)
    weights_from_arrays<float>(p.weights->arrays, p.dims, p.use_bias, *p.config.weights);
  load_mask<float>(p.config, p.dims);
}

}  // namespace mha
