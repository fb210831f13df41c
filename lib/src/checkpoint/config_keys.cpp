#include "config_keys.hpp"

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace mha {

using nlohmann::json;

const json* ConfigKeys::find(std::initializer_list<const char*> names) const {
  for (const char* n : names)
    if (j_.contains(n) && !j_[n].is_null()) return &j_[n];
  return nullptr;
}

std::size_t ConfigKeys::size(std::initializer_list<const char*> names,
                             std::optional<std::size_t> fallback, bool zero_ok) const {
  const json* v = find(names);
  if (!v) {
    if (fallback) return *fallback;
    fail_input(path_ + ": key '" + *names.begin() + "' is missing; expected a positive integer");
  }
  if (!v->is_number_integer() || v->get<std::int64_t>() < (zero_ok ? 0 : 1) ||
      v->get<std::int64_t>() > (std::int64_t{1} << 32))
    fail_input(path_ + ": key '" + *names.begin() + "' is " + one_line(v->dump(), kEchoChars) +
               "; expected a positive integer");
  return v->get<std::size_t>();
}

double ConfigKeys::number(std::initializer_list<const char*> names, double fallback,
                          bool positive) const {
  const json* v = find(names);
  if (!v) return fallback;
  if (!v->is_number() || (positive && !(v->get<double>() > 0)))
    fail_input(path_ + ": key '" + *names.begin() + "' is " + one_line(v->dump(), kEchoChars) +
               "; expected a " + (positive ? "positive " : "") + "number");
  return v->get<double>();
}

bool ConfigKeys::flag(const char* name, bool fallback) const {
  const json* v = find({name});
  if (!v) return fallback;
  if (!v->is_boolean())
    fail_input(path_ + ": key '" + name + "' is " + one_line(v->dump(), kEchoChars) +
               "; expected true or false");
  return v->get<bool>();
}

std::optional<std::int64_t> ConfigKeys::id(const char* name) const {
  const json* v = find({name});
  if (!v) return std::nullopt;
  if (v->is_array() && !v->empty()) v = &(*v)[0];  // a list of ids: the first
  if (!v->is_number_integer()) return std::nullopt;
  return v->get<std::int64_t>();
}

std::vector<std::string> ConfigKeys::labels() const {
  const json* v = find({"id2label"});
  if (!v) return {};
  if (!v->is_object())
    fail_input(path_ + ": key 'id2label' is " + one_line(v->dump(), kEchoChars) +
               "; expected an object of labels by id, {\"0\": \"cat\", ...}");
  // HF's PretrainedConfig reads the keys as int(key): "01" is id 1, as "1" is.
  std::vector<std::string> out(v->size());
  std::vector<bool> seen(v->size(), false);
  for (const auto& [key, label] : v->items()) {
    std::size_t id = 0, used = 0;
    try {
      id = std::stoul(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (key.empty() || used != key.size() || key[0] == '-' || key[0] == '+' || id >= out.size() ||
        seen[id])
      fail_input(path_ + ": key 'id2label' has the id " + echo(key) + "; expected each of 0 to " +
                 std::to_string(out.size() - 1) + " once");
    if (!label.is_string())
      fail_input(path_ + ": id2label[" + echo(key) + "] is " + one_line(label.dump(), kEchoChars) +
                 "; expected a label (a string)");
    seen[id] = true;
    out[id] = label.get<std::string>();
  }
  return out;
}

std::string ConfigKeys::string(const char* name, const std::string& fallback) const {
  const json* v = find({name});
  if (!v) return fallback;
  if (!v->is_string())
    fail_input(path_ + ": key '" + name + "' is " + one_line(v->dump(), kEchoChars) +
               "; expected a string");
  return v->get<std::string>();
}

Activation ConfigKeys::activation(const char* name, const std::string& fallback) const {
  const std::string a = string(name, fallback);
  if (a == "gelu") return Activation::gelu;
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return Activation::gelu_tanh;
  if (a == "relu") return Activation::relu;
  if (a == "silu" || a == "swish") return Activation::silu;
  fail("key '" + std::string(name) + "' is " + echo(a) +
       "; expected gelu, gelu_new, gelu_pytorch_tanh, relu or silu");
}

double ConfigKeys::rope_scaling() const {
  const json* rs = find({"rope_scaling"});
  if (!rs) return 1;
  if (!rs->is_object())
    fail("key 'rope_scaling' is " + one_line(rs->dump(), kEchoChars) + "; expected an object");
  std::string type;
  for (const char* n : {"rope_type", "type"})
    if (rs->contains(n) && (*rs)[n].is_string()) type = (*rs)[n].get<std::string>();
  if (type == "default") return 1;
  if (type != "linear")
    fail("key 'rope_scaling' has type " + echo(type) +
         "; expected \"linear\" (other context-extension scalings are not supported)");
  if (!rs->contains("factor") || !(*rs)["factor"].is_number() ||
      !((*rs)["factor"].get<double>() > 0))
    fail("key 'rope_scaling.factor' is missing or not a positive number");
  return (*rs)["factor"].get<double>();
}

std::vector<unsigned char> ConfigKeys::sliding_layers(
    std::size_t layers, const std::function<bool(std::size_t)>& fallback) const {
  std::vector<unsigned char> out(layers, 0);
  const json* types = find({"layer_types"});
  if (!types) {
    for (std::size_t l = 0; l < layers; ++l) out[l] = fallback(l) ? 1 : 0;
    return out;
  }
  if (!types->is_array() || types->size() != layers)
    fail("key 'layer_types' is " + one_line(types->dump(), kEchoChars) +
         "; expected one entry per layer");
  for (std::size_t l = 0; l < layers; ++l) {
    const json& type = (*types)[l];
    const std::string name = type.is_string() ? type.get<std::string>() : "";
    if (name != "sliding_attention" && name != "full_attention")
      fail("key 'layer_types' holds " + one_line(type.dump(), kEchoChars) +
           "; expected \"full_attention\" or \"sliding_attention\"");
    out[l] = name == "sliding_attention";
  }
  return out;
}

void ConfigKeys::fail(const std::string& what) const {
  fail_input(path_ + ": " + what);
}

}  // namespace mha
