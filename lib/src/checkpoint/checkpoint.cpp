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
#include "mha/kernel/blas.hpp"
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

// Calls fn(spec, name, shape) for every tensor of `stack` the config has, in
// the table's order, each layer's in turn (as gemma.cpp's ForEachTensor: one
// walk for checking, sizing and loading). Layers [l0, l1) only; the
// model-wide tensors when `model_wide`.
template <class F>
void for_each_tensor(const ModelConfig& c, std::size_t l0, std::size_t l1, bool model_wide, F fn,
                     Stack stack = Stack::main) {
  if (model_wide)
    for (const TensorSpec& t : c.family->tensors)
      if (!per_layer(t.role) && t.stack == stack && has_tensor(t, c))
        fn(t, std::string(t.name), tensor_shape(t, c));
  for (std::size_t l = l0; l < l1; ++l)
    for (const TensorSpec& t : c.family->tensors)
      if (per_layer(t.role) && t.stack == stack && has_tensor(t, c))
        fn(t, tensor_name(t, l), tensor_shape(t, c));
}

// The stacks a config has and their layers: an encoder-decoder's decoder second.
std::vector<std::pair<Stack, std::size_t>> stacks(const ModelConfig& c) {
  std::vector<std::pair<Stack, std::size_t>> out = {{Stack::main, c.num_layers}};
  if (c.encoder_decoder) out.emplace_back(Stack::decoder, c.num_decoder_layers);
  return out;
}

const TensorSpec* find_role(const ModelConfig& c, Role role, Part part, Stack stack = Stack::main) {
  for (const TensorSpec& t : c.family->tensors)
    if (t.role == role && t.part == part && t.stack == stack && has_tensor(t, c)) return &t;
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

Checkpoint::Checkpoint(const std::string& dir, ComputeType compute) : compute_(compute), dir_(dir) {
  if (compute == ComputeType::float64)
    fail_input(dir +
               ": a whole model computes in float32 or bfloat16, not float64 (its forward is "
               "float32)");
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
  // BART's final_logits_bias is a buffer of the generation head: a
  // checkpoint without it (BartModel) adds nothing to the logits.
  if (const TensorSpec* bias = find_role(config_, Role::logits_bias, Part::weight);
      bias && !where_.count(bias->name))
    config_.logits_bias = false;
  // DeiTForImageClassificationWithTeacher: its distillation head beside the
  // CLS token's (cls_classifier where DeiTForImageClassification has classifier).
  for (const TensorSpec& t : config_.family->tensors)
    if (config_.classifier && t.role == Role::distillation_classifier && t.part == Part::weight &&
        where_.count(t.name))
      config_.distillation_head = true;
  // An image classifier's head (ViTForImageClassification): its rows are the
  // classes, named by id2label. A ViTModel has none and runs without it; with
  // the distillation head, a missing CLS head is refused with the other tensors.
  if (const TensorSpec* head = find_role(config_, Role::classifier, Part::weight); head) {
    const auto it = where_.find(head->name);
    if (it == where_.end() && config_.distillation_head) {
      config_.num_labels = std::max<std::size_t>(config_.labels.size(), 1);
    } else if (it == where_.end()) {
      config_.classifier = false;
      config_.labels.clear();
    } else {
      const Shape& s = files_[it->second]->find(head->name)->shape;
      if (s.size() != 2 || s[0] == 0 || s[0] > 0x7fffffff)
        fail_input(files_[it->second]->path() + ": tensor " + echo(head->name) + " has shape " +
                   shape_text(s) + "; expected (num_labels, " + std::to_string(config_.d_model) +
                   "), a row per class");
      config_.num_labels = s[0];
      if (config_.labels.empty()) {
        for (std::size_t i = 0; i < s[0]; ++i)
          config_.labels.push_back("LABEL_" + std::to_string(i));
      } else if (config_.labels.size() != s[0]) {
        fail_input(config + ": key 'id2label' names " + std::to_string(config_.labels.size()) +
                   " labels, but tensor " + echo(head->name) + " has " + std::to_string(s[0]) +
                   " rows; expected one label per row of the classifier");
      }
    }
  }
  // Every layer has tensors of its own: a config.json with more layers than
  // the weights have tensors is refused before the tensor list is built.
  if (config_.num_layers + config_.num_decoder_layers > where_.size())
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
  const TensorSpec* first_spec = find_role(config_, Role::token_embedding, Part::weight);
  if (!first_spec) first_spec = find_role(config_, Role::patch_projection, Part::weight);  // ViT
  const std::string first = first_spec->name;
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
  // The heads (the LM head, BART's bias of its logits, a classifier) are outside the base model.
  return t.role == Role::lm_head || t.role == Role::logits_bias || t.role == Role::classifier ||
                 t.role == Role::distillation_classifier
             ? name
             : prefix_ + name;
}

void Checkpoint::check_tensors() const {
  const auto check = [&](const TensorSpec& spec, const std::string& name, const Shape& shape) {
    const std::string stored = stored_name(spec, name);
    auto it = where_.find(stored);
    if (it == where_.end())
      fail_input(dir_ + ": no weights file has tensor " + echo(stored, 160) +
                 "; expected one of shape " + shape_text(shape) + " for a " + config_.model_type +
                 " of this config.json");
    const StoredTensor* t = files_[it->second]->find(stored);
    if (t->shape != shape)
      fail_input(files_[it->second]->path() + ": tensor " + echo(stored, 160) + " has shape " +
                 shape_text(t->shape) + "; config.json implies " + shape_text(shape));
  };
  for (const auto& [stack, layers] : stacks(config_))
    for_each_tensor(config_, 0, layers, true, check, stack);
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
  for (const auto& [stack, layers] : stacks(config_))
    for_each_tensor(
        config_, 0, layers, true,
        [&](const TensorSpec&, const std::string&, const Shape& s) { n += float32_size(s); },
        stack);
  return n;
}

std::uint64_t Checkpoint::layer_float32_bytes() const {
  // An encoder-decoder's larger layer: the decoder's, with its cross-attention.
  std::uint64_t most = 0;
  for (const auto& [stack, layers] : stacks(config_)) {
    std::uint64_t n = 0;
    for_each_tensor(
        config_, 0, std::min<std::size_t>(1, layers), false,
        [&](const TensorSpec&, const std::string&, const Shape& s) { n += float32_size(s); },
        stack);
    most = std::max(most, n);
  }
  return most;
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

Target target(TransformerLayer<float>& L, Role r, std::size_t slot, Part part, bool decoder) {
  Weights<float>& a = L.self_attn;
  Weights<float>& x = L.cross_attn;
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
    case Role::ffn_norm:  // a decoder layer's third norm (transformer.hpp)
      return norm(decoder ? L.norm3 : L.norm2);
    case Role::cross_norm:
      return norm(L.norm2);
    case Role::cross_q:
      return lin(x.W_q, x.b_q, x.packed_q);
    case Role::cross_k:
      return lin(x.W_k, x.b_k, x.packed_k);
    case Role::cross_v:
      return lin(x.W_v, x.b_v, x.packed_v);
    case Role::cross_o:
      return lin(x.W_o, x.b_o, x.packed_o);
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
  layer(l, L, threads, Stack::main);
}

void Checkpoint::layer(std::size_t l, TransformerLayer<float>& L, int threads, Stack stack) const {
  const ModelConfig& c = config_;
  const bool decoder = stack == Stack::decoder;
  // bfloat16 passes with the native GEMM read matrices straight into its
  // packed layout: no float32 W is laid out.
  const bool packed = compute_ == ComputeType::bfloat16 && bf16_packing();
  // Norms, QK-norms and biases that a layer lacks stay empty; every layer has the same.
  for (Norm<float>* n : {&L.norm1, &L.norm2, &L.norm3, &L.post_attn, &L.post_ffn})
    n->rms = c.rms_norm;
  // One scratch buffer for every tensor: float32 (read() fills it), or a BF16
  // matrix's bits as stored when it is packed.
  std::unique_ptr<float[]> stored;
  std::unique_ptr<std::uint16_t[]> bits;
  std::size_t stored_size = 0, bits_size = 0;
  for_each_tensor(
      c, l, l + 1, false,
      [&](const TensorSpec& t, const std::string& name, const Shape& shape) {
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
          const Target to = target(L, t.role, s, t.part, decoder);
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
      },
      stack);
  Weights<float>& a = L.self_attn;
  if (a.b_q.size() && !a.b_o.size()) {  // zeros: the kernel adds all four biases or none
    a.b_o.resize({c.d_model});
    a.b_o.fill(0.0f);
  }
  if (a.b_o.size() && !a.b_q.size()) {  // ViT with qkv_bias false: an output bias alone
    a.b_q.resize({c.h * c.head_dim});
    a.b_k.resize({c.kv_heads * c.head_dim});
    a.b_v.resize({c.kv_heads * c.head_dim});
    for (Tensor<float, 1>* b : {&a.b_q, &a.b_k, &a.b_v}) b->fill(0.0f);
  }
}

Norm<float> Checkpoint::norm_of(Role role, Stack stack) const {
  Norm<float> nm;
  nm.rms = config_.rms_norm;
  for (Part part : {Part::weight, Part::bias}) {
    const TensorSpec* t = find_role(config_, role, part, stack);
    if (!t) continue;
    Tensor<float, 1>& v = part == Part::weight ? nm.gamma : nm.beta;
    v = Tensor<float, 1>({config_.d_model});
    read(stored_name(*t, t->name), v.data());
    if (part == Part::weight) plus_one(config_, v);
  }
  return nm;
}

Norm<float> Checkpoint::final_norm() const {
  return norm_of(Role::final_norm, Stack::main);
}

Norm<float> Checkpoint::final_norm(Stack stack) const {
  return norm_of(Role::final_norm, stack);
}

Norm<float> Checkpoint::embedding_norm(Stack stack) const {
  return norm_of(Role::embedding_norm, stack);
}

std::vector<float> Checkpoint::relative_bias(Stack stack) const {
  const TensorSpec* t = find_role(config_, Role::relative_bias, Part::weight, stack);
  if (!t) return {};
  std::vector<float> table(config_.relative_buckets * config_.h);  // (buckets, h)
  read(stored_name(*t, t->name), table.data());
  return table;
}

std::vector<float> Checkpoint::logits_bias() const {
  const TensorSpec* t = find_role(config_, Role::logits_bias, Part::weight);
  if (!t) return {};
  std::vector<float> bias(config_.vocab_size);  // stored (1, vocab_size)
  read(stored_name(*t, t->name), bias.data());
  return bias;
}

Norm<float> Checkpoint::embedding_norm() const {
  return norm_of(Role::embedding_norm, Stack::main);
}

void Checkpoint::embed(const std::int32_t* ids, const std::size_t* positions, std::size_t count,
                       float* out) const {
  embed(ids, positions, count, out, Stack::main);
}

void Checkpoint::embed(const std::int32_t* ids, const std::size_t* positions, std::size_t count,
                       float* out, Stack stack, SiteHook<float>* hook) const {
  const ModelConfig& c = config_;
  const std::size_t d = c.d_model;
  auto table = [&](Role role) -> std::pair<const TensorSource*, std::string> {
    // The stack's own table, else the model's (an encoder-decoder shares its token embedding).
    const TensorSpec* t = find_role(c, role, Part::weight, stack);
    if (!t && role == Role::token_embedding) t = find_role(c, role, Part::weight);
    if (!t) return {nullptr, ""};
    const std::string stored = stored_name(*t, t->name);
    return {files_[where_.at(stored)].get(), stored};
  };
  auto wants = [&](SiteKind kind) { return hook && hook->wants(Site{kind, stack, 0}); };
  const auto [words, word_name] = table(Role::token_embedding);
  for (std::size_t i = 0; i < count; ++i)
    words->read_rows(word_name, static_cast<std::size_t>(ids[i]), 1, out + i * d);
  if (c.embed_scale != 1) {  // in float32, as the reference multiplies
    const float scale = static_cast<float>(c.embed_scale);
    for (std::size_t i = 0; i < count * d; ++i) out[i] *= scale;
  }
  if (wants(SiteKind::embed)) hook->tensor(Site{SiteKind::embed, stack, 0}, out, count, d, d);
  std::vector<float> row(d);
  if (const auto [pos, pos_name] = table(Role::position_embedding); pos) {
    if (wants(SiteKind::pos_embed)) {  // all rows at once, for the hook
      std::vector<float> rows(count * d);
      for (std::size_t i = 0; i < count; ++i)
        pos->read_rows(pos_name, positions[i], 1, rows.data() + i * d);
      hook->tensor(Site{SiteKind::pos_embed, stack, 0}, rows.data(), count, d, d);
      for (std::size_t i = 0; i < count * d; ++i) out[i] += rows[i];
    } else {
      for (std::size_t i = 0; i < count; ++i) {
        pos->read_rows(pos_name, positions[i], 1, row.data());
        for (std::size_t j = 0; j < d; ++j) out[i * d + j] += row[j];
      }
    }
  }
  if (const auto [types, type_name] = table(Role::type_embedding); types) {
    types->read_rows(type_name, 0, 1, row.data());  // token type 0
    for (std::size_t i = 0; i < count; ++i)
      for (std::size_t j = 0; j < d; ++j) out[i * d + j] += row[j];
  }
}

void Checkpoint::embed_patches(const float* pixels, std::size_t B, float* out) const {
  const ModelConfig& c = config_;
  const std::size_t d = c.d_model, p = c.patch_size, C = c.num_channels, H = c.image_height,
                    Wd = c.image_width, rows = c.patch_rows(), cols = c.patch_cols(),
                    N = rows * cols, K = C * p * p, P = c.prefix_tokens(), T = P + N;
  auto read_role = [&](Role role, Part part, std::size_t n) {
    std::vector<float> v(n);
    const TensorSpec* t = find_role(c, role, part);
    read(stored_name(*t, t->name), v.data());
    return v;
  };
  // The Conv2d's weight (d, C, p, p) is an nn.Linear (d, K) on patches flattened as (C, p, p).
  const std::vector<float> w = read_role(Role::patch_projection, Part::weight, d * K),
                           bias = read_role(Role::patch_projection, Part::bias, d),
                           cls = read_role(Role::cls_token, Part::weight, d),
                           dist = c.distillation_token
                                      ? read_role(Role::distillation_token, Part::weight, d)
                                      : std::vector<float>(),
                           pos = read_role(Role::position_embedding, Part::weight, T * d);
  std::vector<float> patches(N * K);  // (N, K): patch n = (row, col), row-major as flatten(2)
  for (std::size_t b = 0; b < B; ++b) {
    const float* image = pixels + b * C * H * Wd;  // (C, H, W)
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t q = 0; q < cols; ++q)
        for (std::size_t ch = 0; ch < C; ++ch)
          for (std::size_t i = 0; i < p; ++i)
            std::copy_n(image + (ch * H + r * p + i) * Wd + q * p, p,
                        patches.data() + (r * cols + q) * K + (ch * p + i) * p);
    // (T, d): the CLS token, DeiT's distillation token, then the patches
    float* x = out + b * T * d;
    // x[P:] (N, d) = patches (N, K) w^T (K, d)
    gemm<float>(false, true, N, d, K, 1.0f, patches.data(), K, w.data(), K, 0.0f, x + P * d, d,
                compute_ == ComputeType::bfloat16);
    for (std::size_t n = P; n < T; ++n)
      for (std::size_t j = 0; j < d; ++j) x[n * d + j] += bias[j];
    std::copy_n(cls.data(), d, x);
    if (c.distillation_token) std::copy_n(dist.data(), d, x + d);
    for (std::size_t i = 0; i < T * d; ++i) x[i] += pos[i];
  }
}

ClassifierHead Checkpoint::classifier() const {
  ClassifierHead head;
  auto read_head = [&](Role role, std::vector<float>& weight, std::vector<float>& bias) {
    const TensorSpec* w = find_role(config_, role, Part::weight);
    const TensorSpec* b = find_role(config_, role, Part::bias);
    if (!w || !b) return;
    weight.resize(config_.num_labels * config_.d_model);
    bias.resize(config_.num_labels);
    read(stored_name(*w, w->name), weight.data());
    read(stored_name(*b, b->name), bias.data());
  };
  read_head(Role::classifier, head.weight, head.bias);
  read_head(Role::distillation_classifier, head.distillation_weight, head.distillation_bias);
  return head;
}

void Checkpoint::lm_head_rows(std::size_t v0, std::size_t count, float* out) const {
  const ModelConfig& c = config_;
  const TensorSpec* head = find_role(c, Role::lm_head, Part::weight);
  if (!head || !where_.count(head->name)) head = find_role(c, Role::token_embedding, Part::weight);
  const std::string stored = stored_name(*head, head->name);
  files_[where_.at(stored)]->read_rows(stored, v0, count, out);
}

}  // namespace mha
