#include "mha/checkpoint/checkpoint.hpp"
#include "mha/base/message.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/io/gguf.hpp"
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

#include "gguf_source.hpp"
#include "mha/base/error.hpp"
#include "mha/kernel/packed_weights.hpp"
#include "tensor_source.hpp"
#include "transpose.hpp"

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

// Calls fn(spec, name, shape) for every tensor the config has, in the
// table's order, each layer's in turn (as gemma.cpp's ForEachTensor: one
// walk for checking, sizing and loading). Layers [l0, l1) only; the
// model-wide tensors when `model_wide`.
template <class F>
void for_each_tensor(const ModelConfig& c, std::size_t l0, std::size_t l1, bool model_wide, F fn) {
  if (model_wide)
    for (const TensorSpec& t : c.family->tensors)
      if (!per_layer(t.role) && has_tensor(t, c)) fn(t, std::string(t.name), tensor_shape(t, c));
  for (std::size_t l = l0; l < l1; ++l)
    for (const TensorSpec& t : c.family->tensors)
      if (per_layer(t.role) && has_tensor(t, c)) fn(t, tensor_name(t, l), tensor_shape(t, c));
}

const TensorSpec* find_role(const ModelConfig& c, Role role, Part part) {
  for (const TensorSpec& t : c.family->tensors)
    if (t.role == role && t.part == part && has_tensor(t, c)) return &t;
  return nullptr;
}

std::uint64_t float32_size(const Shape& shape) {
  std::uint64_t s = 4;
  for (std::size_t v : shape) s *= v;
  return s;
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
  std::string config = dir + "/config.json";
  if (is_gguf_file(dir)) {
    // A GGUF file: the checkpoint it was converted from (gguf_source.hpp).
    GgufView view = open_gguf(dir);
    gguf_ = true;
    gguf_architecture_ = view.architecture;
    config = dir + " (its metadata as config.json)";
    config_ = parse_model_config(view.config.dump(), config);
    files_.push_back(std::move(view.tensors));
    index_weights({});
  } else {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      fail_input(dir +
                 ": not a directory or GGUF file; expected a checkpoint directory (config.json, "
                 "model.safetensors or model.safetensors.index.json, tokenizer.json) or a .gguf "
                 "file");
    if (!is_file(config))
      fail_input(dir +
                 ": has no config.json; expected a checkpoint directory as model hubs publish");
    config_ = read_model_config(config);
    open_weights();
  }
  // A base model saved without its task head (config.json's architectures
  // GPTNeoXModel, OPTModel): an untied LM head that no file holds leaves the
  // model without next-token scores. A causal LM's missing head is refused
  // with the other tensors.
  if (const TensorSpec* head = find_role(config_, Role::lm_head, Part::weight);
      head && config_.base_model && !where_.count(head->name))
    config_.lm_head = false;
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
  for (const std::string& p : paths) files_.push_back(open_safetensors(p));
  index_weights(weight_map, index);
}

void Checkpoint::index_weights(const std::map<std::string, std::string>& weight_map,
                               const std::string& index) {
  for (std::size_t i = 0; i < files_.size(); ++i) {
    const std::string& p = files_[i]->path();
    for (const auto& [name, t] : files_[i]->tensors()) {
      const auto [it, fresh] = where_.emplace(name, i);
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
  const std::string first = find_role(config_, Role::token_embedding, Part::weight)->name;
  std::vector<std::string> prefixes = {""};
  prefixes.insert(prefixes.end(), config_.family->prefixes.begin(), config_.family->prefixes.end());
  for (const std::string& p : prefixes)
    if (where_.count(p + first)) {
      prefix_ = p;
      return;
    }
  fail_input(files_.front()->path() + ": has no tensor " + echo(first) + "; expected a " +
             config_.model_type + " checkpoint in the reference implementation's names");
}

std::string Checkpoint::stored_name(const TensorSpec& t, const std::string& name) const {
  return t.role == Role::lm_head ? name : prefix_ + name;  // the LM head is outside the base model
}

void Checkpoint::check_tensors() const {
  for_each_tensor(config_, 0, config_.num_layers, true,
                  [&](const TensorSpec& spec, const std::string& name, const Shape& shape) {
                    const std::string stored = stored_name(spec, name);
                    auto it = where_.find(stored);
                    if (it == where_.end())
                      fail_input(dir_ + ": no weights file has tensor " + echo(stored) +
                                 "; expected one of shape " + shape_text(shape) + " for a " +
                                 config_.model_type + " of this config.json");
                    const StoredTensor* t = files_[it->second]->find(stored);
                    if (t->shape != shape)
                      fail_input(files_[it->second]->path() + ": tensor " + echo(stored) +
                                 " has shape " + shape_text(t->shape) + "; config.json implies " +
                                 shape_text(shape));
                  });
}

std::vector<std::string> Checkpoint::weight_files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::vector<std::uint64_t> Checkpoint::weight_header_bytes() const {
  std::vector<std::uint64_t> out;
  for (const auto& f : files_) out.push_back(f->header_bytes());
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
  for_each_tensor(
      config_, 0, config_.num_layers, true,
      [&](const TensorSpec&, const std::string&, const Shape& s) { n += float32_size(s); });
  return n;
}

std::uint64_t Checkpoint::layer_float32_bytes() const {
  std::uint64_t n = 0;
  for_each_tensor(
      config_, 0, std::min<std::size_t>(1, config_.num_layers), false,
      [&](const TensorSpec&, const std::string&, const Shape& s) { n += float32_size(s); });
  return n;
}

void Checkpoint::read(const std::string& stored, float* out) const {
  files_[where_.at(stored)]->read(stored, out);
}

namespace {

// The kernel's tensors a layer role fills: slot s of role r.
struct Target {
  Tensor<float, 2>* W = nullptr;
  Tensor<float, 1>* b = nullptr;  // also a norm's gamma (weight) and beta (bias)
  PackedBf16* packed = nullptr;   // W's packed words, for bfloat16 passes
};

Target target(TransformerLayer<float>& L, Role r, std::size_t slot, Part part) {
  Weights<float>& a = L.self_attn;
  FeedForward<float>& f = L.ffn;
  auto norm = [&](Norm<float>& n) {
    return Target{nullptr, part == Part::weight ? &n.gamma : &n.beta};
  };
  auto lin = [&](Tensor<float, 2>& W, Tensor<float, 1>& b, PackedBf16& p) {
    return Target{&W, &b, &p};
  };
  switch (r) {
    case Role::attn_norm:
      return norm(L.norm1);
    case Role::ffn_norm:
      return norm(L.norm2);
    case Role::post_attn_norm:
      return norm(L.post_attn);
    case Role::post_ffn_norm:
      return norm(L.post_ffn);
    case Role::q_norm:
      return {nullptr, &a.q_norm};
    case Role::k_norm:
      return {nullptr, &a.k_norm};
    case Role::q:
      return lin(a.W_q, a.b_q, a.packed_q);
    case Role::k:
      return lin(a.W_k, a.b_k, a.packed_k);
    case Role::v:
      return lin(a.W_v, a.b_v, a.packed_v);
    case Role::qkv:
      return slot == 0   ? lin(a.W_q, a.b_q, a.packed_q)
             : slot == 1 ? lin(a.W_k, a.b_k, a.packed_k)
                         : lin(a.W_v, a.b_v, a.packed_v);
    case Role::o:
      return lin(a.W_o, a.b_o, a.packed_o);
    case Role::up:
      return lin(f.W_1, f.b_1, f.packed_1);
    case Role::gate:
      return lin(f.W_gate, f.b_gate, f.packed_gate);
    case Role::gate_up:
      return slot == 0 ? lin(f.W_gate, f.b_gate, f.packed_gate) : lin(f.W_1, f.b_1, f.packed_1);
    case Role::down:
      return lin(f.W_2, f.b_2, f.packed_2);
    default:
      return {};
  }
}

// A norm's weight w as the family scales by it: (1 + w) where norm_plus_one
// (Gemma), added in float32 as the reference adds it.
void plus_one(const ModelConfig& c, Tensor<float, 1>& w) {
  if (c.norm_plus_one)
    for (float& x : w) x += 1.0f;
}

}  // namespace

void Checkpoint::layer(std::size_t l, TransformerLayer<float>& L, int threads) const {
  const ModelConfig& c = config_;
  // bfloat16 passes with the native GEMM read matrices straight into its
  // packed layout: no float32 W is laid out.
  const bool packed = bf16_gemm_ && bf16_packing();
  // Norms, QK-norms and biases that a layer lacks stay empty; every layer has the same.
  for (Norm<float>* n : {&L.norm1, &L.norm2, &L.post_attn, &L.post_ffn}) n->rms = c.rms_norm;
  // One scratch buffer for every tensor: float32 (read() fills it), or a BF16
  // matrix's bits as stored when it is packed.
  std::unique_ptr<float[]> stored;
  std::unique_ptr<std::uint16_t[]> bits;
  std::size_t stored_size = 0, bits_size = 0;
  for_each_tensor(
      c, l, l + 1, false, [&](const TensorSpec& t, const std::string& name, const Shape& shape) {
        std::size_t n = 1;
        for (std::size_t v : shape) n *= v;
        const bool matrix = shape.size() == 2;
        const std::string as_stored = stored_name(t, name);
        const TensorSource& file = *files_[where_.at(as_stored)];
        const StoredTensor& held = *file.find(as_stored);
        const bool raw = packed && matrix && held.dtype == "BF16";
        // A Conv1D weight the source holds transposed is packed for bfloat16 from
        // the data as held, as nn.Linear's (out, in) is: no transposing pass.
        // (float32's layout wants (in, out); the source's transpose runs on the
        // pass's threads, faster than transposing here.)
        const bool flipped = packed && matrix && held.transposed && !raw;
        if (raw) {
          if (bits_size < n) bits.reset(new std::uint16_t[bits_size = n]);
          file.read_bfloat16(as_stored, bits.get());
        } else {
          if (stored_size < n) stored.reset(new float[stored_size = n]);
          if (flipped)
            file.read_transposed(as_stored, stored.get(), threads);
          else
            file.read(as_stored, stored.get(), threads);
        }
        // Whether the data read is (in, out) with columns as the kernel's (Conv1D as stored).
        const bool columns = t.layout == Layout::conv1d && !flipped;
        const std::size_t R = shape[0], C = matrix ? shape[1] : 1;
        for (std::size_t s = 0; s < slots(t.role); ++s) {
          const Target to = target(L, t.role, s, t.part);
          std::size_t width = R;  // the kernel's columns (a vector's size)
          if (slots(t.role) > 1)
            width = slot_size(t.role, s, c);
          else if (matrix && t.layout == Layout::conv1d)
            width = C;
          if (!matrix) {  // a bias or a norm's weight
            to.b->resize({width});
            for (const Piece& p : pieces(t, s, c))
              std::copy_n(stored.get() + p.from, p.count, to.b->data() + p.to);
            if (t.part == Part::weight && !to.W) plus_one(c, *to.b);
            continue;
          }
          const std::size_t in = t.layout == Layout::conv1d ? R : C;
          if (packed) {
            if (to.W->size()) *to.W = Tensor<float, 2>();
            reserve_bf16(*to.packed, in, width);
            for (const Piece& p : pieces(t, s, c)) {
              const bool rows = !columns;  // nn.Linear: (out, in)
              const std::size_t from = rows ? p.from * in : p.from, ld = rows ? in : C;
              if (raw)
                pack_bf16_columns(*to.packed, p.to, p.count, bits.get() + from, ld, rows, threads);
              else
                pack_bf16_columns(*to.packed, p.to, p.count, stored.get() + from, ld, rows,
                                  threads);
            }
            continue;
          }
          *to.packed = PackedBf16();
          to.W->resize({in, width});
          float* w = to.W->data();
          for (const Piece& p : pieces(t, s, c)) {
            if (columns) {  // (in, out) as is: columns [from, from + count)
              for (std::size_t i = 0; i < in; ++i)
                std::copy_n(stored.get() + i * C + p.from, p.count, w + i * width + p.to);
            } else {  // nn.Linear (out, in): rows [from, from + count), transposed
              transpose_into(stored.get() + p.from * in, p.count, in, w + p.to, width);
            }
          }
        }
      });
  Weights<float>& a = L.self_attn;
  if (a.b_q.size() && !a.b_o.size()) {  // zeros: the kernel adds all four biases or none
    a.b_o.resize({c.d_model});
    a.b_o.fill(0.0f);
  }
}

Norm<float> Checkpoint::norm_of(Role role) const {
  Norm<float> nm;
  nm.rms = config_.rms_norm;
  for (Part part : {Part::weight, Part::bias}) {
    const TensorSpec* t = find_role(config_, role, part);
    if (!t) continue;
    Tensor<float, 1>& v = part == Part::weight ? nm.gamma : nm.beta;
    v = Tensor<float, 1>({config_.d_model});
    read(stored_name(*t, t->name), v.data());
    if (part == Part::weight) plus_one(config_, v);
  }
  return nm;
}

Norm<float> Checkpoint::final_norm() const {
  return norm_of(Role::final_norm);
}

Norm<float> Checkpoint::embedding_norm() const {
  return norm_of(Role::embedding_norm);
}

void Checkpoint::embed(const std::int32_t* ids, const std::size_t* positions, std::size_t count,
                       float* out) const {
  const ModelConfig& c = config_;
  const std::size_t d = c.d_model;
  auto table = [&](Role role) -> std::pair<const TensorSource*, std::string> {
    const TensorSpec* t = find_role(c, role, Part::weight);
    if (!t) return {nullptr, ""};
    const std::string stored = stored_name(*t, t->name);
    return {files_[where_.at(stored)].get(), stored};
  };
  const auto [words, word_name] = table(Role::token_embedding);
  for (std::size_t i = 0; i < count; ++i)
    words->read_rows(word_name, static_cast<std::size_t>(ids[i]), 1, out + i * d);
  if (c.embed_scale != 1) {  // in float32, as the reference multiplies
    const float scale = static_cast<float>(c.embed_scale);
    for (std::size_t i = 0; i < count * d; ++i) out[i] *= scale;
  }
  std::vector<float> row(d);
  if (const auto [pos, pos_name] = table(Role::position_embedding); pos) {
    for (std::size_t i = 0; i < count; ++i) {
      pos->read_rows(pos_name, positions[i], 1, row.data());
      for (std::size_t j = 0; j < d; ++j) out[i * d + j] += row[j];
    }
  }
  if (const auto [types, type_name] = table(Role::type_embedding); types) {
    types->read_rows(type_name, 0, 1, row.data());  // token type 0
    for (std::size_t i = 0; i < count; ++i)
      for (std::size_t j = 0; j < d; ++j) out[i * d + j] += row[j];
  }
}

void Checkpoint::lm_head_rows(std::size_t v0, std::size_t count, float* out) const {
  const ModelConfig& c = config_;
  const TensorSpec* head = find_role(c, Role::lm_head, Part::weight);
  if (!head || !where_.count(head->name)) head = find_role(c, Role::token_embedding, Part::weight);
  const std::string stored = stored_name(*head, head->name);
  files_[where_.at(stored)]->read_rows(stored, v0, count, out);
}

}  // namespace mha
