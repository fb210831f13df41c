#include "mha/run/model_options.hpp"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/config/memory.hpp"

namespace mha {

namespace job_value {

using json = nlohmann::json;

namespace {

std::string excerpt(const json& v) {
  return one_line(v.dump(), kEchoChars);
}

}  // namespace

std::string string(const json& v, const std::string& where) {
  if (!v.is_string()) fail_input(where + ": expected a string, got " + excerpt(v));
  return v.get<std::string>();
}

std::vector<std::string> strings(const json& v, const std::string& where) {
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array() || v.empty() ||
      !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); }))
    fail_input(where + ": expected a string or a non-empty list of strings, got " + excerpt(v));
  return v.get<std::vector<std::string>>();
}

std::int64_t integer(const json& v, const std::string& where, std::int64_t lo, std::int64_t hi) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
    fail_input(where + ": expected an integer from " + std::to_string(lo) + " to " +
               std::to_string(hi) + ", got " + excerpt(v));
  return v.get<std::int64_t>();
}

std::vector<std::int64_t> indices(const json& v, const std::string& where) {
  const auto index = [](const json& x) {
    return x.is_number_unsigned() || (x.is_number_integer() && x.get<std::int64_t>() >= 0);
  };
  if (index(v)) return {v.get<std::int64_t>()};
  if (!v.is_array() || v.empty() || !std::all_of(v.begin(), v.end(), index))
    fail_input(where + ": expected an index or a non-empty list of indices such as [3, 5], " +
               "got " + excerpt(v));
  return v.get<std::vector<std::int64_t>>();
}

bool flag(const json& v, const std::string& where) {
  if (!v.is_boolean()) fail_input(where + ": expected true or false, got " + excerpt(v));
  return v.get<bool>();
}

std::uint64_t bytes(const json& v, const std::string& where) {
  if (v.is_number_integer() && v.get<std::int64_t>() > 0) return v.get<std::uint64_t>();
  if (!v.is_string())
    fail_input(where + ": expected a size such as \"8GiB\" or a number of bytes, got " +
               excerpt(v));
  return parse_byte_size(v.get<std::string>(), where);
}

}  // namespace job_value

namespace {

using json = nlohmann::json;
using C = ModelRunConfig;
using W = const std::string&;
namespace jv = job_value;

// check_model_call bounds top_k by the model's vocabulary (or classes).
constexpr std::int64_t kMaxTopK = std::numeric_limits<std::int64_t>::max();

// The table. A key's help for layer runs (out_dir, ...) is the Config's
// (docs/config.md); here is what it does with --model.
const std::vector<ModelRunKey> kKeys = {
    {"model", "DIR",
     "a checkpoint directory (config.json, model.safetensors or its index, tokenizer.json) or a "
     "GGUF file: run the whole model (docs/models.md)",
     "dir", RunKind::model, FlagValue::text,
     [](C& c, const json& v, W w) { c.model = jv::string(v, w); }},
    {"text", "TEXT", "a text to tokenize (repeat for a batch)", "input", RunKind::model,
     FlagValue::texts, [](C& c, const json& v, W w) { c.texts = jv::strings(v, w); }},
    {"tokens", "PATH", ".npy of token ids, (T) or (B, T)", "input", RunKind::model, FlagValue::text,
     [](C& c, const json& v, W w) { c.tokens = jv::string(v, w); }},
    {"image", "FILE", "a PNG or JPEG file for an image model (vit; repeat for a batch)", "input",
     RunKind::model, FlagValue::texts,
     [](C& c, const json& v, W w) { c.images = jv::strings(v, w); }},
    {"target_text", "TEXT",
     "encoder-decoders (t5, bart): the decoder's text, teacher-forced (one per --text)",
     "target_text", RunKind::model, FlagValue::texts,
     [](C& c, const json& v, W w) { c.target_texts = jv::strings(v, w); }},
    {"target_tokens", "PATH", "encoder-decoders: .npy of the target's token ids, (T) or (B, T)",
     "target_text", RunKind::model, FlagValue::text,
     [](C& c, const json& v, W w) { c.target_tokens = jv::string(v, w); }},
    {"layer_indices", "LIST", "layers whose maps are written, e.g. 3,5 (default all)",
     "layer_indices", RunKind::model, FlagValue::indices,
     [](C& c, const json& v, W w) { c.layers = jv::indices(v, w); }},
    {"head_indices", "LIST", "heads whose maps are written, e.g. 0,2 (default all)", "head_indices",
     RunKind::model, FlagValue::indices,
     [](C& c, const json& v, W w) { c.heads = jv::indices(v, w); }},
    {"save_qk", "",
     "also write q.npy and k.npy, the queries and keys of the maps written (the view's neuron "
     "view)",
     "qk", RunKind::model, FlagValue::flag,
     [](C& c, const json& v, W w) { c.save_qk = jv::flag(v, w); }},
    {"save_sites", "PATTERNS",
     "write these activation sites to sites/NAME.npy: names or globs, comma-separated, e.g. "
     "'blocks.*.attn.hook_z,hook_resid_post' (docs/models.md)",
     "", RunKind::model, FlagValue::text,
     [](C& c, const json& v, W w) { c.save_sites = jv::string(v, w); }},
    {"top_k", "INT",
     "next tokens (causal LMs) or classes (image classifiers) reported (default 5; given: "
     "printed per row)",
     "top_k", RunKind::model, FlagValue::integer,
     [](C& c, const json& v, W w) { c.top_k = jv::integer(v, w, 0, kMaxTopK); }},
    {"out_dir", "DIR", "", "", RunKind::both, FlagValue::text,
     [](C& c, const json& v, W w) { c.out_dir = jv::string(v, w); }},
    {"save_attention", "BOOL",
     "--model: the maps of every layer, self_attention.npy (layers, B, heads, T, T)", "attention",
     RunKind::both, FlagValue::flag,
     [](C& c, const json& v, W w) { c.save_attention = jv::flag(v, w); }},
    {"save_hidden_states", "BOOL", "--model: hidden_states.npy (num_layers + 1, B, T, d_model)",
     "hidden_states", RunKind::both, FlagValue::flag,
     [](C& c, const json& v, W w) { c.save_hidden_states = jv::flag(v, w); }},
    {"threads", "INT", "", "threads", RunKind::both, FlagValue::integer,
     [](C& c, const json& v, W w) { c.threads = jv::integer(v, w, 0, 1024); }},
    {"max_memory", "SIZE", "", "max_memory", RunKind::both, FlagValue::size,
     [](C& c, const json& v, W w) { c.max_memory = jv::bytes(v, w); }},
    {"dtype", "TYPE", "--model: float32 or bfloat16 (a model's forward is float32)", "dtype",
     RunKind::both, FlagValue::text,
     [](C& c, const json& v, W w) { c.dtype = parse_model_dtype(jv::string(v, w), w); }},
};

// Strict: the whole text is an optionally signed decimal integer (as the
// Config's flags). Beyond 64 bits it saturates, as mha.Model's integers do,
// so the key's range check names the same number for both.
json integer_text(const std::string& text, const std::string& where) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string digits = text.substr(negative ? 1 : 0);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
    fail_input(where + ": expected an integer, got " + echo(text));
  constexpr std::uint64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::uint64_t magnitude = 0;
  for (const char ch : digits) {
    const std::uint64_t digit = static_cast<std::uint64_t>(ch - '0');
    if (magnitude > (kMax - digit) / 10)
      return negative ? std::numeric_limits<std::int64_t>::min() : std::int64_t{kMax};
    magnitude = magnitude * 10 + digit;
  }
  return negative ? -static_cast<std::int64_t>(magnitude) : static_cast<std::int64_t>(magnitude);
}

}  // namespace

const std::vector<ModelRunKey>& model_run_keys() {
  return kKeys;
}

const ModelRunKey* find_model_run_key(const std::string& name) {
  for (const ModelRunKey& k : kKeys)
    if (name == k.name) return &k;
  return nullptr;
}

json model_flag_value(const ModelRunKey& key, const std::vector<std::string>& texts) {
  const std::string where = std::string("--") + key.name;
  if (key.value == FlagValue::texts) return texts;
  const std::string text = texts.empty() ? std::string() : texts.back();
  switch (key.value) {
    case FlagValue::flag:
      for (const char* t : {"", "true", "1", "yes", "on"})
        if (text == t) return true;
      for (const char* f : {"false", "0", "no", "off"})
        if (text == f) return false;
      fail_input(where + ": expected true or false, got " + echo(text));
    case FlagValue::integer:
      return integer_text(text, where);
    case FlagValue::indices:
      return index_list(text, key.name);
    default:
      if (texts.empty()) fail_input(where + ": expected a value");
      return text;
  }
}

ComputeType parse_model_dtype(const std::string& text, const std::string& where) {
  if (text == "float32") return ComputeType::float32;
  if (text == "bfloat16") return ComputeType::bfloat16;
  fail_input(where + " " + echo(text) +
             ": expected float32 or bfloat16 for a model (model runs compute in float32, or in "
             "bfloat16: every GEMM on bfloat16 operands, summed in float32; float64 is for "
             "single-layer runs)");
}

std::vector<std::int64_t> index_list(const std::string& text, const char* option) {
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0)
      fail_input(std::string("--") + option + ": expected indices such as 3,5, got " + echo(text));
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

}  // namespace mha
