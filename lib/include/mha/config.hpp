// The run configuration: every key of README's config reference, with the
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

namespace mha {

enum class Causal { none, top_left, bottom_right };
enum class MaskedRows { zero, uniform, nan };
enum class ComputeType { float32, float64 };

struct Config {
  // Hyperparameters; unset ones are inferred from files or defaults at run time.
  std::optional<std::int64_t> h, d_model, d_k, d_v, kdim, vdim, d_out;
  std::optional<std::int64_t> batch, seq_len, kv_seq_len;
  bool use_bias = true;
  std::optional<double> scale;
  ComputeType dtype = ComputeType::float32;
  std::uint64_t seed = 0;

  // Inputs: paths of .npy files (relative to the working directory); unset
  // means random from `seed`.
  std::optional<std::string> query, key, value, weights;

  // Masking.
  Causal causal = Causal::none;
  std::optional<std::string> mask;
  std::optional<std::vector<std::int64_t>> key_lengths;  // given inline
  std::optional<std::string> key_lengths_file;           // given as .npy
  MaskedRows masked_rows = MaskedRows::zero;

  // Outputs.
  std::string out_dir = "out";
  bool save_attention = false;
  bool average_heads = false;
  bool save_weights = false;
  bool save_inputs = false;

  // Applies every key of a JSON object; `source` names it in errors
  // ("configs/x.json"). Unknown keys are errors that suggest the nearest key.
  void apply(const nlohmann::json& object, const std::string& source);
  // Applies one flag's text value (`--h 8` is apply_flag("h", "8")).
  void apply_flag(const std::string& key, const std::string& text);

  // The configuration as a JSON object with every key (unset ones as null).
  nlohmann::json to_json() const;
};

// Parses a JSON config file. Syntax errors name the file, line and column.
nlohmann::json read_config_file(const std::string& path);

struct ConfigKey {
  const char* name;
  const char* value_hint;  // "INT", "BOOL", "PATH", ...
  const char* help;
  bool is_bool;  // may be given as a bare flag (`--causal` = `--causal true`)
};
const std::vector<ConfigKey>& config_keys();

// The known key nearest to `name` by edit distance, or "" if none is close.
std::string nearest_key(const std::string& name);

const char* to_string(Causal c);
const char* to_string(MaskedRows m);
const char* to_string(ComputeType t);

}  // namespace mha
