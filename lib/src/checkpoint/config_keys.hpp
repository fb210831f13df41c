// config.json's keys as the family files read them (families/*.cpp): every
// message names the file and the key, and says what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/checkpoint/model_config.hpp"

namespace mha {

class ConfigKeys {
 public:
  ConfigKeys(const nlohmann::json& j, std::string path) : j_(j), path_(std::move(path)) {}

  // The first of `names` present and not null.
  const nlohmann::json* find(std::initializer_list<const char*> names) const;
  // A positive size under any of `names` (the first is the one messages
  // name); `fallback` when absent (none: the key is required).
  std::size_t size(std::initializer_list<const char*> names, std::optional<std::size_t> fallback,
                   bool zero_ok = false) const;
  double number(std::initializer_list<const char*> names, double fallback, bool positive) const;
  bool flag(const char* name, bool fallback) const;
  // An id, or the first of a list of ids; nothing when absent or not an integer.
  std::optional<std::int64_t> id(const char* name) const;
  std::string string(const char* name, const std::string& fallback) const;
  // `name`'s activation (gelu, gelu_new, gelu_pytorch_tanh, relu, silu, ...).
  Activation activation(const char* name, const std::string& fallback) const;
  // rope_scaling: 1 when absent or "default"; "linear"'s factor; any other
  // type refused by name.
  double rope_scaling() const;
  // Which of the c.num_layers layers have the sliding window: layer_types
  // ("sliding_attention" / "full_attention") when config.json lists them,
  // else `fallback(l)`.
  std::vector<unsigned char> sliding_layers(std::size_t layers,
                                            const std::function<bool(std::size_t)>& fallback) const;
  // id2label's names by id (an object {"0": "cat", ...} whose keys are the ids
  // 0 to n - 1, each once); empty when absent.
  std::vector<std::string> labels() const;
  // A key whose value this tool cannot run: refused by name.
  [[noreturn]] void fail(const std::string& what) const;
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& j_;
  std::string path_;
};

}  // namespace mha
