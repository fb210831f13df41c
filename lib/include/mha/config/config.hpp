// The run configuration: every key of docs/config.md, with the
// same name in JSON files and on the command line. Values are layered
// defaults < config file < flags; each layer is checked as it is applied, so
// an error names the file or flag and the key.
//
//   mha::Config c;                                     // defaults
//   c.apply(nlohmann::json::parse(text), "run.json");  // a config file
//   c.apply_flag("d_model", "512");                     // --d_model 512
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mha/config/weight_formats.hpp"
#include "mha/kernel/compute_type.hpp"
#include "mha/kernel/options.hpp"

namespace mha {

// Causal, MaskedRows, LayerKind and Activation: kernel/options.hpp;
// ComputeType (float32, float64, bfloat16): kernel/compute_type.hpp.
enum class OutputType { float16, float32, float64 };
enum class MaskTrueMeans { attend, ignore };

struct Config {
  // Hyperparameters; unset ones are inferred from files or defaults at run time.
  std::optional<std::int64_t> h, d_model, d_k, d_v, kdim, vdim, d_out;
  std::optional<std::int64_t> batch, seq_len, kv_seq_len;
  std::optional<bool> use_bias;  // unset: from the weights file, else true
  std::optional<double> scale;
  ComputeType dtype = ComputeType::float32;
  std::uint64_t seed = 0;
  int threads = 0;                          // worker threads; 0 = all cores (or OMP_NUM_THREADS)
  std::optional<std::uint64_t> max_memory;  // bytes; unset: 80% of physical memory
  bool allow_nonfinite = false;             // accept NaN/Inf in inputs and weights
  // Compute timings: > 1 times the layer's forward this many more times after
  // one discarded warm call (run.json's timings_ms.compute_repeat); 1: the
  // run's own compute is the only sample.
  int repeat = 1;
  // true: the forward is called once, untimed, before the run's own compute,
  // so timings_ms.compute is a warm call (a sweep's default: a worker's first
  // run would otherwise time its cold start).
  bool warmup = false;

  // Inputs: paths of .npy files (relative to the working directory); unset
  // means random from `seed`.
  std::optional<std::string> query, key, value, weights;
  WeightsFormat weights_format = WeightsFormat::auto_detect;
  std::string weights_preset;               // weights_format preset: the family or model_type named
  std::optional<std::int64_t> layer_index;  // one layer of a whole checkpoint (presets.hpp)
  std::optional<std::string> weights_prefix;  // or the tensors under this name prefix
  std::optional<std::string> keras_layer;  // the layer to take from a Keras file (keras_file.hpp)

  // Masking.
  Causal causal = Causal::none;
  std::optional<std::string> mask;
  MaskTrueMeans mask_true_means = MaskTrueMeans::attend;  // meaning of true in a bool mask
  std::optional<std::string> key_padding_mask;  // (B, S): bool true = padding, or float added
  std::optional<std::vector<std::int64_t>> key_lengths;  // given inline
  std::optional<std::string> key_lengths_file;           // given as .npy
  MaskedRows masked_rows = MaskedRows::zero;

  // Outputs.
  std::string out_dir = "out";
  bool save_attention = false;
  bool average_heads = false;
  bool plot = false;  // attention.png: batch 0's maps (their mean with average_heads)
  bool save_weights = false;
  WeightsFormat save_weights_format = WeightsFormat::native;
  bool save_inputs = false;
  std::optional<OutputType> output_dtype;  // unset: the compute dtype (float32 for bfloat16)

  // Attention variants.
  std::optional<std::int64_t> kv_heads;  // grouped-query attention; unset: h
  std::optional<std::int64_t> window;    // sliding window width; unset: none
  bool alibi = false;                    // ALiBi position bias
  std::optional<std::string> bias;       // .npy added to the logits, broadcast to (B,h,T,S)
  std::optional<double> softcap;         // logits <- c * tanh(logits / c)
  std::optional<std::vector<std::int64_t>> attention_axes;  // Keras attention_axes (N-D inputs)

  // Rotary position embeddings (docs/config.md, "Attention variants").
  enum class RopeKind { none, half, interleaved } rope = RopeKind::none;
  double rope_theta = 10000;
  std::optional<std::int64_t> rope_dim;  // unset: d_k
  std::int64_t position_offset = 0;      // the first query's position
  double rope_scaling = 1;               // linear position scaling: positions / rope_scaling
  double qk_norm_eps = 1e-6;             // QK-norm's RMSNorm epsilon (with q_norm/k_norm weights)

  // Transformer layers (docs/layers.md); unused with layer attention.
  LayerKind layer = LayerKind::attention;
  std::optional<std::int64_t> num_layers;  // unset: from the weights file, else 1
  std::optional<std::int64_t> d_ff;        // unset: 4 * d_model
  Activation activation = Activation::relu;
  bool norm_first = false;  // pre-norm; false: post-norm (the paper's, PyTorch's default)
  double layer_norm_eps = 1e-5;
  std::optional<bool> final_norm;     // a LayerNorm after the stack; unset: as the weights have one
  std::optional<std::string> memory;  // decoder: (B, S, d_model)
  std::optional<std::vector<std::int64_t>> memory_key_lengths;  // decoder: memory padding
  bool causal_given = false;  // causal was set (a decoder's self-attention is causal otherwise)
  bool save_hidden_states = false;

  // Applies every key of a JSON object; `source` names it in errors
  // ("configs/x.json"). Unknown keys are errors that suggest the nearest key.
  void apply(const nlohmann::json& object, const std::string& source);
  // Applies one flag's text value (`--h 8` is apply_flag("h", "8")).
  void apply_flag(const std::string& key, const std::string& text);

  // The configuration as a JSON object with every key (unset ones as null).
  nlohmann::json to_json() const;
};

// Parses a JSON config file. Syntax errors name the file, line and column;
// duplicate keys are refused; // and /* */ comments are allowed.
nlohmann::json read_config_file(const std::string& path);
// The same for text already in memory; `source` names it in errors.
nlohmann::json parse_config_text(const std::string& text, const std::string& source);
// Input paths in a config file are relative to the working directory, not to the file: a
// relative one that names nothing there is refused naming the config file, the key and the
// working directory (and where it would be, were it relative to the file), before any input
// is opened. Keys in `overridden` (given as flags, which win) are not checked.
void check_config_paths(const nlohmann::json& file, const std::string& config_path,
                        const std::vector<std::string>& overridden = {});

struct ConfigKey {
  const char* name;
  const char* value_hint;  // "INT", "BOOL", "PATH", ...
  const char* help;
  bool is_bool;  // may be given as a bare flag (`--causal` = `--causal true`)
};
const std::vector<ConfigKey>& config_keys();

// The known key nearest to `name` by edit distance, or "" if none is close.
std::string nearest_key(const std::string& name);
// The same among `names`.
std::string nearest_key(const std::string& name, const std::vector<std::string>& names);

const char* to_string(Causal c);
const char* to_string(MaskedRows m);
const char* to_string(ComputeType t);
const char* to_string(OutputType t);
const char* to_string(MaskTrueMeans m);
const char* to_string(LayerKind k);
const char* to_string(Activation a);

}  // namespace mha
