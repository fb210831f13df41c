#include "mha/run/model_job.hpp"

#include <algorithm>
#include <set>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/config/config.hpp"
#include "mha/config/memory.hpp"
#include "mha/run/model_options.hpp"

namespace mha {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kKeys = {"model",
                                        "text",
                                        "tokens",
                                        "texts",
                                        "method",
                                        "out_dir",
                                        "layer_indices",
                                        "head_indices",
                                        "top_k",
                                        "threads",
                                        "max_memory",
                                        "save_attention",
                                        "save_hidden_states",
                                        "save_qk",
                                        "save_sites",
                                        "image",
                                        "target_text",
                                        "target_tokens",
                                        "ablation",
                                        "metric",
                                        "target",
                                        "foil",
                                        "clean",
                                        "corrupt",
                                        "batch",
                                        "dtype"};
// Keys of analyses only, and of model runs only.
const std::set<std::string> kAnalyzeOnly = {"method", "texts", "ablation", "metric", "target",
                                            "foil",   "clean", "corrupt",  "batch"};
const std::set<std::string> kRunOnly = {"save_attention", "save_hidden_states", "save_qk",
                                        "save_sites"};

std::string excerpt(const json& v) {
  return one_line(v.dump(), kEchoChars);
}

// Reads one object's values, each message naming `where` and the key
// (model_options.hpp's job_value: the checks a model run's keys share).
class Reader {
 public:
  Reader(const json& object, std::string where) : j_(object), where_(std::move(where)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  std::string at(const char* key) const { return where_ + ": \"" + key + "\""; }

  std::string string(const char* key) const { return job_value::string(j_[key], at(key)); }
  std::optional<std::string> optional_string(const char* key) const {
    return has(key) ? std::optional(string(key)) : std::nullopt;
  }
  std::vector<std::string> strings(const char* key) const {
    return job_value::strings(j_[key], at(key));
  }
  std::int64_t integer(const char* key, std::int64_t lo, std::int64_t hi) const {
    return job_value::integer(j_[key], at(key), lo, hi);
  }
  std::vector<std::int64_t> indices(const char* key) const {
    return job_value::indices(j_[key], at(key));
  }
  std::uint64_t bytes(const char* key) const { return job_value::bytes(j_[key], at(key)); }
  const json& operator[](const char* key) const { return j_[key]; }

 private:
  const json& j_;
  std::string where_;
};

// An analysis's keys that model runs have too (model_options.hpp's table reads a model run's).
void read_common(const Reader& r, AnalyzeConfig& c) {
  c.model = r.string("model");
  if (r.has("dtype")) c.dtype = parse_model_dtype(r.string("dtype"), r.at("dtype"));
  if (r.has("text")) c.texts = r.strings("text");
  c.tokens = r.optional_string("tokens");
  if (r.has("out_dir")) c.out_dir = r.string("out_dir");
  if (r.has("layer_indices")) c.layers = r.indices("layer_indices");
  if (r.has("head_indices")) c.heads = r.indices("head_indices");
  if (r.has("top_k")) c.top_k = r.integer("top_k", 0, 1 << 30);
  if (r.has("threads")) c.threads = r.integer("threads", 0, 1024);
  if (r.has("max_memory")) c.max_memory = r.bytes("max_memory");
  if (r.has("target_text")) c.target_texts = r.strings("target_text");
  c.target_tokens = r.optional_string("target_tokens");
}

template <class C>
json common_json(const C& c) {
  json j;
  j["model"] = c.model;
  j["dtype"] = to_string(c.dtype);
  if (!c.texts.empty()) j["text"] = c.texts;
  if (c.tokens) j["tokens"] = *c.tokens;
  j["out_dir"] = c.out_dir;
  if (c.layers) j["layer_indices"] = *c.layers;
  if (c.heads) j["head_indices"] = *c.heads;
  j["top_k"] = c.top_k;
  j["threads"] = c.threads;
  j["max_memory"] = c.max_memory ? json(*c.max_memory) : json(nullptr);
  if (!c.target_texts.empty()) j["target_text"] = c.target_texts;
  if (c.target_tokens) j["target_tokens"] = *c.target_tokens;
  return j;
}

}  // namespace

const std::vector<std::string>& model_job_keys() {
  return kKeys;
}

bool is_model_job_key(const std::string& key) {
  return std::find(kKeys.begin(), kKeys.end(), key) != kKeys.end();
}

ModelJob model_job_from_json(const json& object, const std::string& where) {
  if (!object.is_object())
    fail_input(where + ": expected a JSON object of a model run's keys, got " + excerpt(object));
  for (const auto& [key, value] : object.items()) {
    if (is_model_job_key(key)) continue;
    const std::string hint = nearest_key(key, kKeys);
    fail_input(where + ": " + echo(key) + " is not a key of a model run or analysis" +
               (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
               "; expected model, text, tokens, method and the flags of `mha run --model` and "
               "`mha analyze`");
  }
  const Reader r(object, where);
  if (!r.has("model"))
    fail_input(where + ": expected \"model\": a checkpoint directory (docs/models.md)");
  if (r.has("method")) {
    for (const std::string& key : kRunOnly)
      if (r.has(key.c_str()))
        fail_input(r.at(key.c_str()) +
                   ": a key of model runs (`mha run --model`), not of analyses (\"method\")");
    AnalyzeConfig c;
    read_common(r, c);
    c.methods = r.strings("method");
    c.texts_file = r.optional_string("texts");
    if (r.has("ablation")) c.ablation = r.string("ablation");
    if (r.has("metric")) c.metric = r.string("metric");
    c.target = r.optional_string("target");
    c.foil = r.optional_string("foil");
    c.clean = r.optional_string("clean");
    c.corrupt = r.optional_string("corrupt");
    if (r.has("batch")) c.batch = r.integer("batch", 1, 1024);
    if (r.has("image")) c.images = r.strings("image");
    return c;
  }
  for (const std::string& key : kAnalyzeOnly)
    if (r.has(key.c_str()))
      fail_input(r.at(key.c_str()) + ": a key of analyses; give \"method\" too (docs/analyses.md)");
  ModelRunConfig c;
  for (const ModelRunKey& key : model_run_keys())
    if (r.has(key.name)) key.set(c, r[key.name], r.at(key.name));
  return c;
}

json to_json(const ModelRunConfig& c) {
  json j = common_json(c);
  j["save_attention"] = c.save_attention;
  j["save_hidden_states"] = c.save_hidden_states;
  j["save_qk"] = c.save_qk;
  if (!c.save_sites.empty()) j["save_sites"] = c.save_sites;
  if (!c.images.empty()) j["image"] = c.images;
  return j;
}

json to_json(const AnalyzeConfig& c) {
  json j = common_json(c);
  j["method"] = c.methods;
  if (c.texts_file) j["texts"] = *c.texts_file;
  j["ablation"] = c.ablation;
  if (!c.metric.empty()) j["metric"] = c.metric;
  for (const auto& [key, value] : {std::pair{"target", &c.target},
                                   {"foil", &c.foil},
                                   {"clean", &c.clean},
                                   {"corrupt", &c.corrupt}})
    if (*value) j[key] = **value;
  j["batch"] = c.batch;
  if (!c.images.empty()) j["image"] = c.images;
  return j;
}

json to_json(const ModelJob& job) {
  return std::visit([](const auto& c) { return to_json(c); }, job);
}

}  // namespace mha
