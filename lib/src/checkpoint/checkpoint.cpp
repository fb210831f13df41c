#include "mha/checkpoint/checkpoint.hpp"
#include "mha/base/message.hpp"
#include "mha/io/json_file.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/io/safetensors.hpp"

namespace mha {

namespace {

using nlohmann::json;
using Shape = std::vector<std::size_t>;

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string shape_text(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

std::string layer_name(const ModelConfig& c, std::size_t l, const std::string& rest) {
  switch (c.family) {
    case ModelFamily::bert:
      return "encoder.layer." + std::to_string(l) + "." + rest;
    case ModelFamily::gpt2:
      return "h." + std::to_string(l) + "." + rest;
    case ModelFamily::llama:
      break;
  }
  return "model.layers." + std::to_string(l) + "." + rest;
}

// Every tensor the family reads, with its shape, as the reference
// implementations name them (before the checkpoint's prefix).
std::vector<std::pair<std::string, Shape>> expected_tensors(const ModelConfig& c) {
  std::vector<std::pair<std::string, Shape>> t;
  const std::size_t d = c.d_model, f = c.d_ff, q = c.h * c.head_dim, kv = c.kv_heads * c.head_dim;
  auto linear = [&](const std::string& name, std::size_t out, std::size_t in, bool bias) {
    t.push_back({name + ".weight", {out, in}});
    if (bias) t.push_back({name + ".bias", {out}});
  };
  auto norm = [&](const std::string& name, bool bias) {
    t.push_back({name + ".weight", {d}});
    if (bias) t.push_back({name + ".bias", {d}});
  };
  switch (c.family) {
    case ModelFamily::bert:
      t.push_back({"embeddings.word_embeddings.weight", {c.vocab_size, d}});
      t.push_back({"embeddings.position_embeddings.weight", {c.max_positions, d}});
      t.push_back({"embeddings.token_type_embeddings.weight", {c.type_vocab_size, d}});
      norm("embeddings.LayerNorm", true);
      for (std::size_t l = 0; l < c.num_layers; ++l) {
        auto n = [&](const std::string& r) { return layer_name(c, l, r); };
        linear(n("attention.self.query"), d, d, true);
        linear(n("attention.self.key"), d, d, true);
        linear(n("attention.self.value"), d, d, true);
        linear(n("attention.output.dense"), d, d, true);
        norm(n("attention.output.LayerNorm"), true);
        linear(n("intermediate.dense"), f, d, true);
        linear(n("output.dense"), d, f, true);
        norm(n("output.LayerNorm"), true);
      }
      break;
    case ModelFamily::gpt2:
      t.push_back({"wte.weight", {c.vocab_size, d}});
      t.push_back({"wpe.weight", {c.max_positions, d}});
      for (std::size_t l = 0; l < c.num_layers; ++l) {
        auto n = [&](const std::string& r) { return layer_name(c, l, r); };
        norm(n("ln_1"), true);
        t.push_back({n("attn.c_attn.weight"), {d, 3 * d}});  // Conv1D: (in, out)
        t.push_back({n("attn.c_attn.bias"), {3 * d}});
        t.push_back({n("attn.c_proj.weight"), {d, d}});
        t.push_back({n("attn.c_proj.bias"), {d}});
        norm(n("ln_2"), true);
        t.push_back({n("mlp.c_fc.weight"), {d, f}});
        t.push_back({n("mlp.c_fc.bias"), {f}});
        t.push_back({n("mlp.c_proj.weight"), {f, d}});
        t.push_back({n("mlp.c_proj.bias"), {d}});
      }
      norm("ln_f", true);
      break;
    case ModelFamily::llama:
      t.push_back({"model.embed_tokens.weight", {c.vocab_size, d}});
      for (std::size_t l = 0; l < c.num_layers; ++l) {
        auto n = [&](const std::string& r) { return layer_name(c, l, r); };
        norm(n("input_layernorm"), false);
        linear(n("self_attn.q_proj"), q, d, c.qkv_bias);
        linear(n("self_attn.k_proj"), kv, d, c.qkv_bias);
        linear(n("self_attn.v_proj"), kv, d, c.qkv_bias);
        linear(n("self_attn.o_proj"), d, q, false);
        if (c.qk_norm) {
          t.push_back({n("self_attn.q_norm.weight"), {c.head_dim}});
          t.push_back({n("self_attn.k_norm.weight"), {c.head_dim}});
        }
        norm(n("post_attention_layernorm"), false);
        linear(n("mlp.gate_proj"), f, d, false);
        linear(n("mlp.up_proj"), f, d, false);
        linear(n("mlp.down_proj"), d, f, false);
      }
      norm("model.norm", false);
      if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, d}});
      break;
  }
  return t;
}

// The shard files a model.safetensors.index.json names, in name order, and
// its weight_map (tensor name -> shard file name).
std::vector<std::string> index_shards(const std::string& dir, const std::string& index,
                                      std::map<std::string, std::string>& weight_map) {
  const json j = read_json_file(index, json_kind::shard_index);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail_input(index + ": expected an object with \"weight_map\": {tensor name: shard file}");
  std::set<std::string> shards;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      fail_input(index + ": weight_map[" + echo(name) + "] is " +
                 one_line(file.dump(), kEchoChars) + "; expected a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      fail_input(index + ": weight_map[" + echo(name) + "] is " + echo(f) +
                 "; expected a file name in the checkpoint's directory");
    shards.insert(f);
    weight_map[name] = f;
  }
  if (shards.empty()) fail_input(index + ": weight_map is empty; expected the tensors' shards");
  std::vector<std::string> out;
  for (const std::string& f : shards) {
    const std::string path = dir + "/" + f;
    if (!is_file(path))
      fail_input(index + ": shard " + echo(f) + " (named in weight_map) is missing from " + dir);
    out.push_back(path);
  }
  return out;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail_input(dir +
               ": not a directory; expected a checkpoint directory (config.json, "
               "model.safetensors or model.safetensors.index.json, tokenizer.json)");
  const std::string config = dir + "/config.json";
  if (!is_file(config))
    fail_input(dir + ": has no config.json; expected a checkpoint directory as model hubs publish");
  config_ = read_model_config(config);
  open_weights();
  // Every layer has tensors of its own: a config.json with more layers than
  // the weights have tensors is refused before the tensor list is built.
  if (config_.num_layers > where_.size())
    fail_input(config + ": " + std::to_string(config_.num_layers) +
               " layers, but the weights hold only " + std::to_string(where_.size()) +
               " tensors; expected the layers' tensors in the weights files");
  check_tensors();
}

Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

void Checkpoint::open_weights() {
  std::vector<std::string> paths;
  std::map<std::string, std::string> weight_map;  // a sharded checkpoint's index
  const std::string single = dir_ + "/model.safetensors",
                    index = dir_ + "/model.safetensors.index.json";
  if (is_file(single))
    paths.push_back(single);
  else if (is_file(index))
    paths = index_shards(dir_, index, weight_map);
  else
    fail_input(dir_ +
               ": has no model.safetensors or model.safetensors.index.json; expected the "
               "weights in safetensors files");
  for (const std::string& p : paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(p));
    for (const auto& [name, t] : files_.back()->tensors()) {
      const auto [it, fresh] = where_.emplace(name, files_.size() - 1);
      if (!fresh)
        fail_input(p + ": tensor " + echo(name) + " is also in " + files_[it->second]->path() +
                   "; expected each tensor in one shard");
      if (weight_map.empty()) continue;
      const auto listed = weight_map.find(name);
      const std::string file = p.substr(p.rfind('/') + 1);
      if (listed == weight_map.end())
        fail_input(index + ": weight_map has no entry for tensor " + echo(name) + " (in shard " +
                   echo(file) + "); expected every tensor of the shards listed");
      if (listed->second != file)
        fail_input(index + ": weight_map puts tensor " + echo(name) + " in " +
                   echo(listed->second) + ", but it is in " + file);
    }
  }
  for (const auto& [name, file] : weight_map)
    if (!where_.count(name))
      fail_input(index + ": weight_map puts tensor " + echo(name) + " in " + echo(file) +
                 ", which has no such tensor");
  // The prefix a task head's checkpoint puts before the base model's names
  // (BertForMaskedLM's "bert.", GPT2LMHeadModel's "transformer.").
  ModelConfig no_layers = config_;  // the first tensor is the embedding: no layer list needed
  no_layers.num_layers = 0;
  const std::string first = expected_tensors(no_layers).front().first;
  for (const char* p : {"", "bert.", "transformer.", "model."})
    if (where_.count(p + first)) {
      prefix_ = p;
      return;
    }
  fail_input(files_.front()->path() + ": has no tensor " + echo(first) + "; expected a " +
             config_.model_type + " checkpoint in the reference implementation's names");
}

void Checkpoint::check_tensors() const {
  for (const auto& [name, shape] : expected_tensors(config_)) {
    const bool head = name == "lm_head.weight";  // the LM head stands outside the base model
    const std::string stored = head ? name : prefix_ + name;
    auto it = where_.find(stored);
    if (it == where_.end())
      fail_input(dir_ + ": no weights file has tensor " + echo(stored) +
                 "; expected one of shape " + shape_text(shape) + " for a " + config_.model_type +
                 " of this config.json");
    const SafetensorsFile::Tensor* t = files_[it->second]->find(stored);
    if (t->shape != shape)
      fail_input(files_[it->second]->path() + ": tensor " + echo(stored) + " has shape " +
                 shape_text(t->shape) + "; config.json implies " + shape_text(shape));
  }
}

std::vector<std::string> Checkpoint::weight_files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::vector<std::string> Checkpoint::stored_dtypes() const {
  std::set<std::string> d;
  for (const auto& f : files_)
    for (const auto& [name, t] : f->tensors()) d.insert(t.dtype);
  return {d.begin(), d.end()};
}

std::uint64_t Checkpoint::float32_bytes() const {
  std::uint64_t n = 0;
  for (const auto& [name, shape] : expected_tensors(config_)) {
    std::uint64_t s = 4;
    for (std::size_t v : shape) s *= v;
    n += s;
  }
  return n;
}

std::uint64_t Checkpoint::layer_float32_bytes() const {
  if (config_.num_layers == 0) return 0;
  std::uint64_t n = 0;
  const std::string l0 = layer_name(config_, 0, "");
  for (const auto& [name, shape] : expected_tensors(config_)) {
    if (name.compare(0, l0.size(), l0) != 0) continue;
    std::uint64_t s = 4;
    for (std::size_t v : shape) s *= v;
    n += s;
  }
  return n;
}

void Checkpoint::read(const std::string& name, float* out) const {
  const std::string stored = name == "lm_head.weight" ? name : prefix_ + name;
  files_[where_.at(stored)]->read(stored, out);
}

void Checkpoint::layer(std::size_t l, TransformerLayer<float>& L) const {
  const ModelConfig& c = config_;
  const std::size_t d = c.d_model, f = c.d_ff, q = c.h * c.head_dim, kv = c.kv_heads * c.head_dim;
  auto n = [&](const std::string& r) { return layer_name(c, l, r); };
  auto vec = [&](mha::Tensor<float, 1>& v, const std::string& name, std::size_t size) {
    v.resize({size});
    read(name, v.data());
  };
  // nn.Linear's weight (out, in) as W (in, out): y = x W + b, transposed in
  // 64 x 64 tiles from one scratch buffer (uninitialized: read() fills it).
  std::unique_ptr<float[]> stored;
  std::size_t stored_size = 0;
  auto linear_w = [&](mha::Tensor<float, 2>& W, const std::string& name, std::size_t out,
                      std::size_t in) {
    if (stored_size < out * in) stored.reset(new float[stored_size = out * in]);
    read(name, stored.get());
    W.resize({in, out});
    constexpr std::size_t kTile = 64;
    float* w = W.data();
    for (std::size_t o0 = 0; o0 < out; o0 += kTile)
      for (std::size_t i0 = 0; i0 < in; i0 += kTile)
        for (std::size_t o = o0; o < std::min(out, o0 + kTile); ++o)
          for (std::size_t i = i0; i < std::min(in, i0 + kTile); ++i)
            w[i * out + o] = stored[o * in + i];
  };
  auto conv1d_w = [&](mha::Tensor<float, 2>& W, const std::string& name, std::size_t in,
                      std::size_t out) {
    W.resize({in, out});  // GPT-2's Conv1D stores (in, out): x W as is
    read(name, W.data());
  };
  auto norm = [&](Norm<float>& nm, const std::string& name, bool bias) {
    vec(nm.gamma, name + ".weight", d);
    if (bias) vec(nm.beta, name + ".bias", d);
    nm.rms = !bias;
  };
  Weights<float>& a = L.self_attn;
  switch (c.family) {
    case ModelFamily::bert:
      linear_w(a.W_q, n("attention.self.query.weight"), d, d);
      linear_w(a.W_k, n("attention.self.key.weight"), d, d);
      linear_w(a.W_v, n("attention.self.value.weight"), d, d);
      linear_w(a.W_o, n("attention.output.dense.weight"), d, d);
      vec(a.b_q, n("attention.self.query.bias"), d);
      vec(a.b_k, n("attention.self.key.bias"), d);
      vec(a.b_v, n("attention.self.value.bias"), d);
      vec(a.b_o, n("attention.output.dense.bias"), d);
      norm(L.norm1, n("attention.output.LayerNorm"), true);
      linear_w(L.ffn.W_1, n("intermediate.dense.weight"), f, d);
      vec(L.ffn.b_1, n("intermediate.dense.bias"), f);
      linear_w(L.ffn.W_2, n("output.dense.weight"), d, f);
      vec(L.ffn.b_2, n("output.dense.bias"), d);
      norm(L.norm2, n("output.LayerNorm"), true);
      break;
    case ModelFamily::gpt2: {
      // q, k, v: the thirds of c_attn's columns (Conv1D (d, 3d)).
      if (stored_size < 3 * d * d) stored.reset(new float[stored_size = 3 * d * d]);
      read(n("attn.c_attn.weight"), stored.get());
      mha::Tensor<float, 2>* W[3] = {&a.W_q, &a.W_k, &a.W_v};
      for (std::size_t part = 0; part < 3; ++part) {
        W[part]->resize({d, d});
        for (std::size_t i = 0; i < d; ++i)
          std::copy(stored.get() + i * 3 * d + part * d, stored.get() + i * 3 * d + (part + 1) * d,
                    W[part]->data() + i * d);
      }
      mha::Tensor<float, 1> qkv_b;
      vec(qkv_b, n("attn.c_attn.bias"), 3 * d);
      mha::Tensor<float, 1>* b[3] = {&a.b_q, &a.b_k, &a.b_v};
      for (std::size_t part = 0; part < 3; ++part) {
        b[part]->resize({d});
        std::copy(qkv_b.data() + part * d, qkv_b.data() + (part + 1) * d, b[part]->data());
      }
      conv1d_w(a.W_o, n("attn.c_proj.weight"), d, d);
      vec(a.b_o, n("attn.c_proj.bias"), d);
      norm(L.norm1, n("ln_1"), true);
      norm(L.norm2, n("ln_2"), true);
      conv1d_w(L.ffn.W_1, n("mlp.c_fc.weight"), d, f);
      vec(L.ffn.b_1, n("mlp.c_fc.bias"), f);
      conv1d_w(L.ffn.W_2, n("mlp.c_proj.weight"), f, d);
      vec(L.ffn.b_2, n("mlp.c_proj.bias"), d);
      break;
    }
    case ModelFamily::llama:
      linear_w(a.W_q, n("self_attn.q_proj.weight"), q, d);
      linear_w(a.W_k, n("self_attn.k_proj.weight"), kv, d);
      linear_w(a.W_v, n("self_attn.v_proj.weight"), kv, d);
      linear_w(a.W_o, n("self_attn.o_proj.weight"), d, q);
      if (c.qkv_bias) {
        vec(a.b_q, n("self_attn.q_proj.bias"), q);
        vec(a.b_k, n("self_attn.k_proj.bias"), kv);
        vec(a.b_v, n("self_attn.v_proj.bias"), kv);
        a.b_o.resize({d});  // zeros: the kernel adds all four biases or none
        a.b_o.fill(0.0f);
      }
      if (c.qk_norm) {
        vec(a.q_norm, n("self_attn.q_norm.weight"), c.head_dim);
        vec(a.k_norm, n("self_attn.k_norm.weight"), c.head_dim);
      }
      norm(L.norm1, n("input_layernorm"), false);
      norm(L.norm2, n("post_attention_layernorm"), false);
      linear_w(L.ffn.W_gate, n("mlp.gate_proj.weight"), f, d);
      linear_w(L.ffn.W_1, n("mlp.up_proj.weight"), f, d);
      linear_w(L.ffn.W_2, n("mlp.down_proj.weight"), d, f);
      break;
  }
}

Norm<float> Checkpoint::final_norm() const {
  Norm<float> nm;
  const std::size_t d = config_.d_model;
  if (config_.family == ModelFamily::bert) return nm;
  const std::string name = config_.family == ModelFamily::gpt2 ? "ln_f" : "model.norm";
  nm.gamma = mha::Tensor<float, 1>({d});
  read(name + ".weight", nm.gamma.data());
  if (config_.family == ModelFamily::gpt2) {
    nm.beta = mha::Tensor<float, 1>({d});
    read(name + ".bias", nm.beta.data());
  }
  nm.rms = config_.family == ModelFamily::llama;
  return nm;
}

Norm<float> Checkpoint::embedding_norm() const {
  Norm<float> nm;
  if (config_.family != ModelFamily::bert) return nm;
  const std::size_t d = config_.d_model;
  nm.gamma = mha::Tensor<float, 1>({d});
  nm.beta = mha::Tensor<float, 1>({d});
  read("embeddings.LayerNorm.weight", nm.gamma.data());
  read("embeddings.LayerNorm.bias", nm.beta.data());
  return nm;
}

void Checkpoint::embed(const std::int32_t* ids, const std::size_t* positions, std::size_t count,
                       float* out) const {
  const ModelConfig& c = config_;
  const std::size_t d = c.d_model;
  const std::string word = c.family == ModelFamily::bert   ? "embeddings.word_embeddings.weight"
                           : c.family == ModelFamily::gpt2 ? "wte.weight"
                                                           : "model.embed_tokens.weight";
  const std::string stored = prefix_ + word;
  const SafetensorsFile& file = *files_[where_.at(stored)];
  for (std::size_t i = 0; i < count; ++i)
    file.read_rows(stored, static_cast<std::size_t>(ids[i]), 1, out + i * d);
  if (c.family == ModelFamily::llama) return;
  const std::string pos =
      c.family == ModelFamily::bert ? "embeddings.position_embeddings.weight" : "wpe.weight";
  const std::string pos_stored = prefix_ + pos;
  const SafetensorsFile& pfile = *files_[where_.at(pos_stored)];
  std::vector<float> row(d);
  for (std::size_t i = 0; i < count; ++i) {
    pfile.read_rows(pos_stored, positions[i], 1, row.data());
    for (std::size_t j = 0; j < d; ++j) out[i * d + j] += row[j];
  }
  if (c.family != ModelFamily::bert) return;
  const std::string type_stored = prefix_ + "embeddings.token_type_embeddings.weight";
  files_[where_.at(type_stored)]->read_rows(type_stored, 0, 1, row.data());  // token type 0
  for (std::size_t i = 0; i < count; ++i)
    for (std::size_t j = 0; j < d; ++j) out[i * d + j] += row[j];
}

void Checkpoint::lm_head_rows(std::size_t v0, std::size_t count, float* out) const {
  const ModelConfig& c = config_;
  std::string stored = "lm_head.weight";
  if (c.tie_word_embeddings || !where_.count(stored))
    stored = prefix_ + (c.family == ModelFamily::gpt2 ? "wte.weight" : "model.embed_tokens.weight");
  files_[where_.at(stored)]->read_rows(stored, v0, count, out);
}

}  // namespace mha
