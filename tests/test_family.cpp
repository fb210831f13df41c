// checkpoint/families/: one test case per family file, named after it
// (ctest -R checkpoint.family.gemma). Each reads every model_type the file
// accepts from a small config.json and checks the features it sets; writes a
// checkpoint with the family's every tensor (each element a distinct value)
// and checks where Checkpoint::layer puts each one, against the reference
// implementation's layout written out here (nn.Linear (out, in) transposed,
// Conv1D (in, out) as is, fused q | k | v by rows or columns or per head,
// gate | up, (1 + w) norms); and refuses a checkpoint missing one tensor, or
// with one of the wrong shape, naming it, before any weight is read.
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/checkpoint/checkpoint.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/checkpoint/model_config.hpp"
#include "mha/io/safetensors.hpp"
#include "mha/kernel/packed_weights.hpp"
#include "mha/pipeline/forward.hpp"
#include "test_util.hpp"

namespace {

using json = nlohmann::json;
using mha::Layout;
using mha::ModelConfig;
using mha::Role;
using mha::Stack;
using Shape = std::vector<std::size_t>;

// A stored tensor: shape and values (element i of the n-th tensor is
// n + i / 4096: distinct within and across tensors of under 4096 elements,
// and exact in float32; or, for bfloat16 passes, distinct values exact in
// bfloat16).
struct Stored {
  Shape shape;
  std::vector<float> v;
  float at(std::size_t r, std::size_t c) const { return v[r * shape[1] + c]; }
};

mha::NpyArray npy(const Stored& s) {
  mha::NpyArray a;
  a.dtype = mha::DType::f4;
  a.shape = s.shape;
  a.data.resize(s.v.size() * 4);
  std::memcpy(a.data.data(), s.v.data(), a.data.size());
  return a;
}

// Every tensor the config has, by name as stored, each with distinct values:
// exact in float32, or with `bfloat16` exact in bfloat16 (every element of
// the checkpoint another one of bfloat16's 17,152 values from 2^-7 up). An
// encoder-decoder's decoder tensors (Stack::decoder) for each of its
// num_decoder_layers layers, under their own names ("decoder.block.{l}...").
std::map<std::string, Stored> all_tensors(const ModelConfig& c, bool bfloat16 = false) {
  std::map<std::string, Stored> out;
  float n = 0;
  std::uint32_t next = 0x3c00;  // bfloat16 bits of the next value
  auto exact = [&] {
    const std::uint32_t bits = next++ << 16;
    REQUIRE(next < 0x7f80);  // finite
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
  };
  auto add = [&](const mha::TensorSpec& t, std::size_t l) {
    Stored s;
    s.shape = mha::tensor_shape(t, c);
    std::size_t size = 1;
    for (std::size_t d : s.shape) size *= d;
    n += 1;
    for (std::size_t i = 0; i < size; ++i)
      s.v.push_back(bfloat16 ? exact() : n + static_cast<float>(i) / 4096.0f);
    out[mha::tensor_name(t, l)] = s;
  };
  for (const mha::TensorSpec& t : c.family->tensors) {
    if (!mha::has_tensor(t, c)) continue;
    if (!mha::per_layer(t.role))
      add(t, 0);
    else
      for (std::size_t l = 0; l < (t.stack == Stack::decoder ? c.num_decoder_layers : c.num_layers);
           ++l)
        add(t, l);
  }
  return out;
}

// model.safetensors with every tensor in F32, or in BF16 (`bfloat16`: the
// values' upper halves, which must be exact; written here as the format
// lays it out: an 8-byte header size, the JSON header, the data).
void write_checkpoint(const std::string& dir, const json& config,
                      const std::map<std::string, Stored>& tensors, bool bfloat16 = false) {
  std::filesystem::create_directories(dir);
  mha::test::write_file(dir + "/config.json", config.dump());
  if (!bfloat16) {
    std::vector<std::pair<std::string, mha::NpyArray>> list;
    for (const auto& [name, s] : tensors) list.push_back({name, npy(s)});
    mha::test::write_file(dir + "/model.safetensors", mha::encode_safetensors(list));
    return;
  }
  json header = json::object();
  std::string data;
  for (const auto& [name, s] : tensors) {
    const std::size_t begin = data.size();
    for (const float x : s.v) {
      std::uint32_t u;
      std::memcpy(&u, &x, 4);
      REQUIRE((u & 0xffffu) == 0);
      data.push_back(static_cast<char>(u >> 16));
      data.push_back(static_cast<char>(u >> 24));
    }
    header[name] = {{"dtype", "BF16"}, {"shape", s.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  mha::test::write_file(dir + "/model.safetensors", file + text + data);
}

// W (in, out) == what the reference computes x @ W with: for each (i, o),
// `stored(o, i)` of the reference's own layout.
void check_matrix(const mha::Tensor<float, 2>& W, std::size_t in, std::size_t out,
                  const std::function<float(std::size_t i, std::size_t o)>& stored,
                  const std::string& what) {
  INFO(what);
  REQUIRE(W.shape()[0] == in);
  REQUIRE(W.shape()[1] == out);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < in; ++i)
    for (std::size_t o = 0; o < out; ++o) wrong += W(i, o) != stored(i, o);
  CHECK(wrong == 0);
}

void check_vector(const mha::Tensor<float, 1>& b, std::size_t n,
                  const std::function<float(std::size_t)>& stored, const std::string& what) {
  INFO(what);
  REQUIRE(b.size() == n);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += b(i) != stored(i);
  CHECK(wrong == 0);
}

bool stores(const ModelConfig& c, Role role, mha::Part part, Stack stack = Stack::main) {
  for (const mha::TensorSpec& t : c.family->tensors)
    if (t.role == role && t.part == part && t.stack == stack && mha::has_tensor(t, c)) return true;
  return false;
}

// Layer 1's tensors where the kernel expects them, each role by the
// reference's layout of its stored tensor. A bfloat16 checkpoint whose GEMMs
// run natively lays its matrices out packed (Checkpoint::layer), with no
// float32 W: checked through unpack_bf16. Of `stack`: an encoder-decoder's
// decoder layer adds its cross-attention (L.cross_attn) and its norm, which
// is norm2, the feed-forward's then norm3 (transformer.hpp); an encoder
// layer leaves both empty.
void check_layer(const mha::Checkpoint& ck, const std::map<std::string, Stored>& stored,
                 Stack stack = Stack::main) {
  const ModelConfig& c = ck.config();
  const bool decoder = stack == Stack::decoder;
  INFO((decoder ? "decoder layer 1" : "layer 1"));
  mha::TransformerLayer<float> L;
  ck.layer(1, L, 2, stack);
  const bool packed = ck.compute() == mha::ComputeType::bfloat16 && mha::bf16_packing();
  std::size_t matrices = 0;
  auto unpack = [&](mha::Tensor<float, 2>& W, const mha::PackedBf16& p) {
    if (p.empty()) return;  // a role this family lacks, or float32
    INFO("packed matrix " << matrices);
    CHECK(packed);
    CHECK(W.size() == 0);  // no float32 copy
    W = mha::unpack_bf16(p);
    ++matrices;
  };
  mha::Weights<float>& sa = L.self_attn;
  unpack(sa.W_q, sa.packed_q), unpack(sa.W_k, sa.packed_k), unpack(sa.W_v, sa.packed_v);
  unpack(sa.W_o, sa.packed_o), unpack(L.ffn.W_1, L.ffn.packed_1);
  unpack(L.ffn.W_2, L.ffn.packed_2), unpack(L.ffn.W_gate, L.ffn.packed_gate);
  mha::Weights<float>& x = L.cross_attn;
  unpack(x.W_q, x.packed_q), unpack(x.W_k, x.packed_k), unpack(x.W_v, x.packed_v);
  unpack(x.W_o, x.packed_o);
  CHECK(matrices == (packed ? (L.ffn.gated() ? 7u : 6u) + (decoder ? 4u : 0u) : 0u));
  const std::size_t d = c.d_model, q = c.h * c.head_dim, kv = c.kv_heads * c.head_dim,
                    hd = c.head_dim, f = c.d_ff;
  const float one = c.norm_plus_one ? 1.0f : 0.0f;
  std::size_t checked = 0;
  for (const mha::TensorSpec& t : c.family->tensors) {
    if (t.stack != stack || !mha::per_layer(t.role) || !mha::has_tensor(t, c)) continue;
    const std::string name = mha::tensor_name(t, 1);
    const Stored& s = stored.at(name);
    const bool bias = t.part == mha::Part::bias;
    auto w = [&](std::size_t r, std::size_t col) { return s.at(r, col); };
    // A Linear's W (in, out) from stored rows [r0, r0 + out), or a Conv1D's columns.
    auto linear = [&](const mha::Tensor<float, 2>& W, std::size_t in, std::size_t out,
                      std::size_t r0) {
      if (t.layout == Layout::conv1d)
        check_matrix(
            W, in, out, [&](std::size_t i, std::size_t o) { return w(i, r0 + o); }, name);
      else
        check_matrix(
            W, in, out, [&](std::size_t i, std::size_t o) { return w(r0 + o, i); }, name);
    };
    auto vec = [&](const mha::Tensor<float, 1>& b, std::size_t n, std::size_t e0, float add = 0) {
      check_vector(
          b, n, [&](std::size_t i) { return s.v[e0 + i] + add; }, name);
    };
    auto norm = [&](const mha::Norm<float>& nm) {
      if (bias)
        vec(nm.beta, d, 0);
      else
        vec(nm.gamma, d, 0, one);  // Gemma's (1 + w)
      CHECK(nm.rms == c.rms_norm);
    };
    const mha::Weights<float>& a = L.self_attn;
    switch (t.role) {
      case Role::attn_norm:
        norm(L.norm1);
        break;
      case Role::ffn_norm:  // a decoder's third norm
        norm(decoder ? L.norm3 : L.norm2);
        break;
      case Role::cross_norm:
        norm(L.norm2);
        break;
      case Role::cross_q:
        bias ? vec(x.b_q, q, 0) : linear(x.W_q, d, q, 0);
        break;
      case Role::cross_k:  // over the encoder's output (d_model)
        bias ? vec(x.b_k, kv, 0) : linear(x.W_k, d, kv, 0);
        break;
      case Role::cross_v:
        bias ? vec(x.b_v, kv, 0) : linear(x.W_v, d, kv, 0);
        break;
      case Role::cross_o:
        bias ? vec(x.b_o, d, 0) : linear(x.W_o, q, d, 0);
        break;
      case Role::post_attn_norm:
        norm(L.post_attn);
        break;
      case Role::post_ffn_norm:
        norm(L.post_ffn);
        break;
      case Role::q_norm:
        vec(a.q_norm, hd, 0, one);
        break;
      case Role::k_norm:
        vec(a.k_norm, hd, 0, one);
        break;
      case Role::q:
        bias ? vec(a.b_q, q, 0) : linear(a.W_q, d, q, 0);
        break;
      case Role::k:
        bias ? vec(a.b_k, kv, 0) : linear(a.W_k, d, kv, 0);
        break;
      case Role::v:
        bias ? vec(a.b_v, kv, 0) : linear(a.W_v, d, kv, 0);
        break;
      case Role::o:
        bias ? vec(a.b_o, d, 0) : linear(a.W_o, q, d, 0);
        break;
      case Role::qkv:
        if (t.layout == Layout::linear_heads) {
          // GPT-NeoX: qkv.view(B, T, h, 3 * head_dim), then q, k, v the thirds of each head
          const mha::Tensor<float, 2>* W3[3] = {&a.W_q, &a.W_k, &a.W_v};
          const mha::Tensor<float, 1>* b3[3] = {&a.b_q, &a.b_k, &a.b_v};
          for (std::size_t part = 0; part < 3; ++part) {
            auto row = [&](std::size_t o) { return (o / hd) * 3 * hd + part * hd + o % hd; };
            if (bias)
              check_vector(
                  *b3[part], q, [&](std::size_t o) { return s.v[row(o)]; }, name);
            else
              check_matrix(
                  *W3[part], d, q, [&](std::size_t i, std::size_t o) { return w(row(o), i); },
                  name);
          }
        } else if (bias) {
          vec(a.b_q, q, 0), vec(a.b_k, kv, q), vec(a.b_v, kv, q + kv);
        } else {
          linear(a.W_q, d, q, 0), linear(a.W_k, d, kv, q), linear(a.W_v, d, kv, q + kv);
        }
        break;
      case Role::up:
        bias ? vec(L.ffn.b_1, f, 0) : linear(L.ffn.W_1, d, f, 0);
        break;
      case Role::gate:
        linear(L.ffn.W_gate, d, f, 0);
        break;
      case Role::gate_up:  // Phi-3: gate, up_states = gate_up_proj(x).chunk(2, dim=-1)
        linear(L.ffn.W_gate, d, f, 0);
        linear(L.ffn.W_1, d, f, f);
        break;
      case Role::down:
        bias ? vec(L.ffn.b_2, d, 0) : linear(L.ffn.W_2, f, d, 0);
        break;
      default:
        FAIL("a model-wide role in a layer: " << name);
    }
    ++checked;
  }
  CHECK(checked > 0);
  if (c.qkv_bias && !stores(c, Role::o, mha::Part::bias, stack)) {
    // Qwen2: no o_proj bias stored; the kernel adds four or none, so b_o is zeros
    REQUIRE(L.self_attn.b_o.size() == d);
    for (std::size_t i = 0; i < d; ++i) CHECK(L.self_attn.b_o(i) == 0.0f);
  }
  if (stores(c, Role::o, mha::Part::bias, stack) && !stores(c, Role::q, mha::Part::bias, stack) &&
      !stores(c, Role::qkv, mha::Part::bias, stack)) {
    // ViT with qkv_bias false: an output bias alone; the kernel adds four, so b_q, b_k, b_v zeros
    std::size_t nonzero = 0;
    REQUIRE((sa.b_q.size() == q && sa.b_k.size() == kv && sa.b_v.size() == kv));
    for (const mha::Tensor<float, 1>* b : {&sa.b_q, &sa.b_k, &sa.b_v})
      for (const float v : *b) nonzero += v != 0.0f;
    CHECK(nonzero == 0);
  }
  // Nothing where the stack stores nothing: no bias or LayerNorm shift in a
  // stack without biases (T5, LLaMA), no cross-attention or third norm in
  // an encoder's (or a decoder-only model's) layer.
  bool biases = false;
  for (const mha::TensorSpec& t : c.family->tensors)
    biases |= t.stack == stack && mha::per_layer(t.role) && t.part == mha::Part::bias &&
              mha::has_tensor(t, c);
  if (!biases) {
    std::size_t filled = 0;
    for (const mha::Tensor<float, 1>* b :
         {&sa.b_q, &sa.b_k, &sa.b_v, &sa.b_o, &x.b_q, &x.b_k, &x.b_v, &x.b_o, &L.ffn.b_1,
          &L.ffn.b_2, &L.ffn.b_gate, &L.norm1.beta, &L.norm2.beta, &L.norm3.beta, &L.post_attn.beta,
          &L.post_ffn.beta})
      filled += b->size() != 0;
    CHECK(filled == 0);
  }
  if (!decoder) {
    CHECK((x.W_q.size() == 0 && x.W_k.size() == 0 && x.W_v.size() == 0 && x.W_o.size() == 0));
    CHECK((x.packed_q.empty() && x.packed_o.empty() && x.b_q.size() == 0 && L.norm3.empty()));
  }
}

// The stored tensor of a model-wide role of `stack`, or null (and its name).
const Stored* model_wide(const ModelConfig& c, const std::map<std::string, Stored>& stored,
                         Role role, mha::Part part, Stack stack, std::string* name = nullptr) {
  for (const mha::TensorSpec& t : c.family->tensors)
    if (t.role == role && t.part == part && t.stack == stack && mha::has_tensor(t, c)) {
      if (name) *name = t.name;
      return &stored.at(t.name);
    }
  return nullptr;
}

void check_values(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  CHECK(wrong == 0);
}

// The model-wide tensors where their accessors put them, in each stack:
// the final and embedding norms, T5's relative bias tables, BART's logits
// bias, an image classifier's head, the LM head's rows (lm_head.weight, or
// the tied embedding) and the embedding rows of three tokens (times
// embed_scale, plus the stack's own position table's rows and token type
// 0's); and each accessor empty where the family stores nothing for it.
void check_model_wide(const mha::Checkpoint& ck, const std::map<std::string, Stored>& stored) {
  const ModelConfig& c = ck.config();
  const std::size_t d = c.d_model;
  const float one = c.norm_plus_one ? 1.0f : 0.0f;
  std::vector<Stack> stacks = {Stack::main};
  if (c.encoder_decoder) stacks.push_back(Stack::decoder);
  for (const Stack stack : stacks) {
    INFO((stack == Stack::decoder ? "decoder stack" : "main stack"));
    for (const Role role : {Role::final_norm, Role::embedding_norm}) {
      const mha::Norm<float> n =
          role == Role::final_norm ? ck.final_norm(stack) : ck.embedding_norm(stack);
      std::string wname, bname;
      const Stored* w = model_wide(c, stored, role, mha::Part::weight, stack, &wname);
      const Stored* b = model_wide(c, stored, role, mha::Part::bias, stack, &bname);
      INFO((role == Role::final_norm ? "final norm" : "embedding norm"));
      CHECK(n.empty() == (w == nullptr));
      CHECK(n.rms == c.rms_norm);
      if (w)
        check_vector(
            n.gamma, d, [&](std::size_t i) { return w->v[i] + one; }, wname);
      if (b)
        check_vector(
            n.beta, d, [&](std::size_t i) { return b->v[i]; }, bname);
      CHECK((n.beta.size() == 0) == (b == nullptr));
    }
    std::string name;
    const std::vector<float> table = ck.relative_bias(stack);
    if (const Stored* r =
            model_wide(c, stored, Role::relative_bias, mha::Part::weight, stack, &name)) {
      check_values(table, r->v, name);  // (buckets, h) as stored
    } else {
      CHECK(table.empty());
    }
    if (c.image_input()) continue;
    // Token ids 3, 0 and the last at three rows of the position table
    // (Checkpoint::embed takes rows: the caller adds position_offset).
    const Stored* words = model_wide(c, stored, Role::token_embedding, mha::Part::weight,
                                     Stack::main);  // shared by the stacks
    const Stored* pos = model_wide(c, stored, Role::position_embedding, mha::Part::weight, stack);
    const Stored* types = model_wide(c, stored, Role::type_embedding, mha::Part::weight, stack);
    REQUIRE(words != nullptr);
    const std::int32_t ids[3] = {3, 0, static_cast<std::int32_t>(c.vocab_size - 1)};
    const std::size_t rows[3] = {1, 0, pos ? c.position_rows - 1 : 7};
    std::vector<float> got(3 * d), want(3 * d);
    ck.embed(ids, rows, 3, got.data(), stack);
    const float scale = static_cast<float>(c.embed_scale);
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < d; ++j) {
        float e = words->v[static_cast<std::size_t>(ids[i]) * d + j];
        if (c.embed_scale != 1) e *= scale;
        if (pos) e += pos->v[rows[i] * d + j];
        if (types) e += types->v[j];
        want[i * d + j] = e;
      }
    check_values(got, want, "embedding rows");
  }
  std::string name;
  const std::vector<float> bias = ck.logits_bias();
  if (const Stored* b =
          model_wide(c, stored, Role::logits_bias, mha::Part::weight, Stack::main, &name)) {
    check_values(bias, b->v, name);  // (1, vocab) as stored
  } else {
    CHECK(bias.empty());
  }
  const mha::ClassifierHead head = ck.classifier();
  if (const Stored* w =
          model_wide(c, stored, Role::classifier, mha::Part::weight, Stack::main, &name)) {
    check_values(head.weight, w->v, name);  // (num_labels, d_model) as stored
    const Stored* b = model_wide(c, stored, Role::classifier, mha::Part::bias, Stack::main, &name);
    REQUIRE(b != nullptr);
    check_values(head.bias, b->v, name);
  } else {
    CHECK((head.weight.empty() && head.bias.empty()));
  }
  if (c.lm_head) {
    const Stored* rows = model_wide(c, stored, Role::lm_head, mha::Part::weight, Stack::main);
    CHECK((rows == nullptr) == c.tie_word_embeddings);
    if (!rows) rows = model_wide(c, stored, Role::token_embedding, mha::Part::weight, Stack::main);
    REQUIRE(rows != nullptr);
    std::vector<float> got(2 * d);
    ck.lm_head_rows(c.vocab_size - 2, 2, got.data());  // the last two rows
    check_values(got, {rows->v.end() - static_cast<std::ptrdiff_t>(2 * d), rows->v.end()},
                 "LM head rows");
  }
}

}  // namespace

namespace {

using Opened = std::function<void(const mha::Checkpoint&, const std::map<std::string, Stored>&)>;

// A checkpoint's every check: its layers, its model-wide tensors, and the
// family's own (`opened`).
void check_checkpoint(const mha::Checkpoint& ck, const std::map<std::string, Stored>& tensors,
                      const Opened& opened) {
  check_layer(ck, tensors);
  if (ck.config().encoder_decoder) check_layer(ck, tensors, Stack::decoder);
  check_model_wide(ck, tensors);
  if (opened) opened(ck, tensors);
}

// A checkpoint without `name`, then with `name` one row (element) longer:
// refused by name when the directory is opened (headers only).
void check_refusals(const mha::test::TempDir& tmp, const json& config,
                    const std::map<std::string, Stored>& tensors, const std::string& name) {
  INFO(name);
  auto missing = tensors;
  REQUIRE(missing.erase(name) == 1);
  write_checkpoint(tmp / "missing", config, missing);
  mha::test::require_invalid([&] { mha::Checkpoint(tmp / "missing"); },
                             "no weights file has tensor \"" + name + "\"");
  auto wrong = tensors;
  Stored& s = wrong.at(name);
  s.shape[0] += 1;
  s.v.resize(s.v.size() + (s.shape.size() == 2 ? s.shape[1] : 1), 0.5f);
  write_checkpoint(tmp / "wrong", config, wrong);
  mha::test::require_invalid([&] { mha::Checkpoint(tmp / "wrong"); },
                             "tensor \"" + name + "\" has shape");
}

// The tensors a checkpoint of `c` stores: an image classifier's rows are its
// labels' (config.json's id2label; three without one), which the checkpoint
// reads from classifier.weight's shape.
std::map<std::string, Stored> stored_tensors(ModelConfig c, bool bfloat16 = false) {
  if (c.classifier) c.num_labels = c.labels.empty() ? 3 : c.labels.size();
  return all_tensors(c, bfloat16);
}

// One model_type of a family file: its config.json, then the features it
// must set, then the tensors in place (and `opened`, the family's own checks
// of each checkpoint) and the refusals: layer 1's last tensor, which is a
// decoder's in an encoder-decoder, and there the decoder's last model-wide
// tensor (T5's final norm, BART's embedding norm).
void check_model_type(const char* family, json config,
                      const std::function<void(const ModelConfig&)>& features,
                      const Opened& opened = {}) {
  const std::string type = config["model_type"];
  INFO(family << ": " << type);
  const ModelConfig c = mha::parse_model_config(config.dump(), "config.json");
  REQUIRE(c.family != nullptr);
  CHECK(std::string(c.family->name) == family);
  CHECK(c.num_layers == 2);
  features(c);

  mha::test::TempDir tmp("family");
  const auto tensors = stored_tensors(c);
  {
    const std::string dir = tmp / "whole";
    write_checkpoint(dir, config, tensors);
    const mha::Checkpoint ck(dir);
    std::uint64_t bytes = 0;
    for (const auto& [name, s] : tensors) bytes += 4 * s.v.size();
    CHECK(ck.float32_bytes() == bytes);
    check_checkpoint(ck, tensors, opened);
  }
  {
    // The same for a bfloat16 pass: the packed layout where the GEMM runs
    // natively (else float32 as above), from values exact in bfloat16, in
    // F32 and BF16 files (whose bits are packed as stored).
    const auto exact = stored_tensors(c, true);
    for (const bool bf16_file : {false, true}) {
      INFO((bf16_file ? "BF16 file" : "F32 file"));
      const std::string dir = tmp / (bf16_file ? "bf16_file" : "f32_file");
      write_checkpoint(dir, config, exact, bf16_file);
      mha::Checkpoint ck(dir, mha::ComputeType::bfloat16);
      CHECK(ck.stored_dtypes() == std::vector<std::string>{bf16_file ? "BF16" : "F32"});
      check_checkpoint(ck, exact, opened);
    }
  }
  // Layer 1's last tensor missing, then one of the wrong shape: refused by
  // name when the directory is opened (headers only).
  std::string last, decoder_wide;
  for (const mha::TensorSpec& t : c.family->tensors) {
    if (mha::per_layer(t.role) && mha::has_tensor(t, c)) last = mha::tensor_name(t, 1);
    if (!mha::per_layer(t.role) && t.stack == Stack::decoder) decoder_wide = t.name;
  }
  check_refusals(tmp, config, tensors, last);
  CHECK(decoder_wide.empty() == !c.encoder_decoder);
  if (!decoder_wide.empty()) check_refusals(tmp, config, tensors, decoder_wide);
}

json small(const char* type) {
  return {{"model_type", type},           {"num_hidden_layers", 2},  {"hidden_size", 8},
          {"num_attention_heads", 2},     {"intermediate_size", 12}, {"vocab_size", 20},
          {"max_position_embeddings", 16}};
}

}  // namespace

TEST_CASE("checkpoint.family.bert", "[checkpoint][family]") {
  check_model_type("bert", small("bert"), [](const ModelConfig& c) {
    CHECK((!c.causal && !c.lm_head && !c.rms_norm && c.norm_placement == mha::NormPlacement::post));
    CHECK((c.position_rows == 16 && c.position_offset == 0 && c.max_positions == 16));
    CHECK((c.type_vocab_size == 2 && !c.positions_skip_padding && !c.final_norm));
  });
  for (const char* type : {"roberta", "xlm-roberta"}) {
    json j = small(type);
    j["pad_token_id"] = 1;
    j["type_vocab_size"] = 1;
    check_model_type("bert", j, [](const ModelConfig& c) {
      // create_position_ids_from_input_ids: padding_idx + 1 on; 16 - 2 tokens
      CHECK((c.position_offset == 2 && c.positions_skip_padding && c.max_positions == 14));
      CHECK((c.type_vocab_size == 1 && c.norm_placement == mha::NormPlacement::post));
    });
  }
}

TEST_CASE("checkpoint.family.gpt2", "[checkpoint][family]") {
  const json j = {{"model_type", "gpt2"}, {"n_layer", 2},     {"n_embd", 8},
                  {"n_head", 2},          {"vocab_size", 20}, {"n_positions", 16}};
  check_model_type("gpt2", j, [](const ModelConfig& c) {
    CHECK((c.causal && c.lm_head && c.tie_word_embeddings && !c.rope));
    CHECK((c.d_ff == 32 && c.position_rows == 16 && c.activation == mha::Activation::gelu_tanh));
  });
}

TEST_CASE("checkpoint.family.llama", "[checkpoint][family]") {
  for (const char* type : {"llama", "mistral", "qwen2", "qwen3"}) {
    json j = small(type);
    j["num_key_value_heads"] = 1;
    j["head_dim"] = 6;
    j["sliding_window"] = 3;
    check_model_type("llama", j, [&](const ModelConfig& c) {
      const std::string t = type;
      CHECK((c.rope && c.rotary_dim == 6 && c.rms_norm && !c.norm_plus_one && c.kv_heads == 1));
      CHECK(c.qkv_bias == (t == "qwen2"));
      CHECK(c.qk_norm == (t == "qwen3"));
      CHECK(c.layer_sliding(1) == (t == "mistral"));  // Qwen: only with use_sliding_window
      CHECK(c.position_rows == 0);
    });
  }
}

TEST_CASE("checkpoint.family.gpt_neox", "[checkpoint][family]") {
  json j = small("gpt_neox");
  j["rotary_pct"] = 0.5;
  j["rotary_emb_base"] = 500;
  check_model_type("gpt_neox", j, [](const ModelConfig& c) {
    CHECK((c.parallel_residual && c.rope && c.head_dim == 4 && c.rotary_dim == 2));
    CHECK((c.rope_theta == 500 && !c.rms_norm && c.qkv_bias && !c.tie_word_embeddings));
    CHECK(c.activation == mha::Activation::gelu);
  });
  j["use_parallel_residual"] = false;
  j.erase("rotary_pct");  // GPTNeoXConfig's 0.25 of head_dim 4: one feature, not a pair
  mha::test::require_invalid([&] { mha::parse_model_config(j.dump(), "config.json"); },
                             "rotates 1 features");
  j["rotary_pct"] = 1.0;
  check_model_type("gpt_neox", j, [](const ModelConfig& c) {
    CHECK((!c.parallel_residual && c.rotary_dim == 4));
  });
}

TEST_CASE("checkpoint.family.gemma", "[checkpoint][family]") {
  for (const char* type : {"gemma", "gemma2", "gemma3_text"}) {
    json j = small(type);
    j["num_key_value_heads"] = 1;
    j["head_dim"] = 6;
    j["sliding_window"] = 3;
    j["sliding_window_pattern"] = 2;
    j["rope_local_base_freq"] = 100.0;
    check_model_type("gemma", j, [&](const ModelConfig& c) {
      const std::string t = type;
      CHECK((c.norm_plus_one && c.rms_norm && c.tie_word_embeddings));
      CHECK(c.embed_scale == std::sqrt(8.0));
      CHECK(c.activation == mha::Activation::gelu_tanh);
      if (t == "gemma") {
        CHECK((c.norm_placement == mha::NormPlacement::pre && c.attn_scale == 1 / std::sqrt(6.0)));
        CHECK((c.sliding_window == 0 && c.attn_softcap == 0 && c.final_softcap == 0));
        return;
      }
      CHECK(c.norm_placement == mha::NormPlacement::sandwich);
      CHECK(c.attn_scale == 1 / std::sqrt(t == "gemma2" ? 224.0 : 256.0));  // query_pre_attn_scalar
      CHECK((c.layer_sliding(0) && !c.layer_sliding(1)));  // layer 0 local, layer 1 global
      CHECK(c.qk_norm == (t == "gemma3_text"));
      CHECK(c.attn_softcap == (t == "gemma2" ? 50 : 0));
      CHECK(c.final_softcap == (t == "gemma2" ? 30 : 0));
      CHECK(c.rope_local_theta == (t == "gemma2" ? 0 : 100));
    });
  }
}

TEST_CASE("checkpoint.family.phi3", "[checkpoint][family]") {
  json j = small("phi3");
  j["num_key_value_heads"] = 1;
  j["partial_rotary_factor"] = 0.5;
  j["sliding_window"] = 3;
  check_model_type("phi3", j, [](const ModelConfig& c) {
    CHECK((c.rope && c.head_dim == 4 && c.rotary_dim == 2 && c.kv_heads == 1));
    CHECK((c.layer_sliding(0) && c.layer_sliding(1) && c.sliding_window == 3));
    CHECK((c.rms_norm && !c.tie_word_embeddings && c.activation == mha::Activation::silu));
  });
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  mha::test::require_invalid([&] { mha::parse_model_config(j.dump(), "config.json"); },
                             "key 'rope_scaling' has type \"longrope\"");
}

TEST_CASE("checkpoint.family.opt", "[checkpoint][family]") {
  json j = small("opt");
  j.erase("intermediate_size");
  j["ffn_dim"] = 12;
  j["word_embed_proj_dim"] = 8;
  check_model_type("opt", j, [](const ModelConfig& c) {
    CHECK((c.position_offset == 2 && c.position_rows == 18 && c.max_positions == 16));
    CHECK((c.norm_placement == mha::NormPlacement::pre && c.final_norm && c.qkv_bias));
    CHECK((c.activation == mha::Activation::relu && c.tie_word_embeddings && !c.rope));
  });
  j["do_layer_norm_before"] = false;  // OPT-350m: post-norm, no final layer norm
  check_model_type("opt", j, [](const ModelConfig& c) {
    CHECK((c.norm_placement == mha::NormPlacement::post && !c.final_norm));
  });
  j["word_embed_proj_dim"] = 4;
  mha::test::require_invalid([&] { mha::parse_model_config(j.dump(), "config.json"); },
                             "key 'word_embed_proj_dim' is 4");
}

TEST_CASE("checkpoint.family.stablelm", "[checkpoint][family]") {
  json j = small("stablelm");
  j["num_key_value_heads"] = 1;
  // StableLmConfig's partial_rotary_factor 0.25 of head_dim 4: one feature, not a pair
  mha::test::require_invalid([&] { mha::parse_model_config(j.dump(), "config.json"); },
                             "rotates 1 features");
  j["partial_rotary_factor"] = 0.5;
  for (const bool bias : {false, true}) {
    j["use_qkv_bias"] = bias;
    check_model_type("stablelm", j, [&](const ModelConfig& c) {
      CHECK((c.rope && c.head_dim == 4 && c.rotary_dim == 2 && c.kv_heads == 1));
      CHECK((!c.rms_norm && c.norm_placement == mha::NormPlacement::pre && c.final_norm));
      CHECK((c.qkv_bias == bias && !c.parallel_residual && !c.tie_word_embeddings));
      CHECK(c.activation == mha::Activation::silu);
    });
  }
  j["use_parallel_residual"] = true;
  mha::test::require_invalid([&] { mha::parse_model_config(j.dump(), "config.json"); },
                             "key 'use_parallel_residual' is true");
}

namespace {

ModelConfig parse(const json& j) {
  return mha::parse_model_config(j.dump(), "config.json");
}

void require_refused(const json& j, const std::string& fragment) {
  INFO(j.dump());
  mha::test::require_invalid([&] { parse(j); }, fragment);
}

// t5-small's shape, smaller: inner_dim = num_heads * d_kv = 6, not d_model.
json t5_config() {
  return {{"model_type", "t5"},
          {"num_layers", 2},
          {"d_model", 8},
          {"num_heads", 2},
          {"d_kv", 3},
          {"d_ff", 12},
          {"vocab_size", 20},
          {"relative_attention_num_buckets", 8},
          {"relative_attention_max_distance", 20},
          {"pad_token_id", 0},
          {"eos_token_id", 1}};
}

json bart_config() {
  return {{"model_type", "bart"},
          {"encoder_layers", 2},
          {"decoder_layers", 3},
          {"d_model", 8},
          {"encoder_attention_heads", 2},
          {"decoder_attention_heads", 2},
          {"encoder_ffn_dim", 12},
          {"decoder_ffn_dim", 12},
          {"vocab_size", 20},
          {"max_position_embeddings", 16},
          {"pad_token_id", 1},
          {"bos_token_id", 0},
          {"eos_token_id", 2}};
}

json vit_config() {
  return {{"model_type", "vit"},
          {"num_hidden_layers", 2},
          {"hidden_size", 8},
          {"num_attention_heads", 2},
          {"intermediate_size", 12},
          {"image_size", 8},
          {"patch_size", 4},
          {"num_channels", 3},
          {"id2label", {{"0", "cat"}, {"1", "dog"}, {"2", "car"}}}};
}

json deit_config() {
  json j = vit_config();
  j["model_type"] = "deit";
  return j;
}

// ViT's embeddings of two images, each black but for one pixel of 1 (a
// channel, row and column): that pixel's patch is the Conv2d's column of
// it (weight (d_model, channels, p, p) flattened as (channel, row, column)
// within the patch) plus its bias, every other patch the bias alone, the
// CLS token first (and DeiT's distillation token second); the position
// table's rows added to all.
void check_patch_embeddings(const mha::Checkpoint& ck, const std::map<std::string, Stored>& s) {
  const ModelConfig& c = ck.config();
  const std::size_t d = c.d_model, p = c.patch_size, C = c.num_channels, H = c.image_height,
                    W = c.image_width, K = C * p * p, P = c.distillation_token ? 2 : 1,
                    T = c.patch_rows() * c.patch_cols() + P;
  REQUIRE((T == c.position_rows && T == c.image_tokens() && P == c.prefix_tokens()));
  const std::size_t lit[2][3] = {{C - 1, H - 2, W - 3}, {0, 1, 2}};  // channel, row, column
  std::vector<float> pixels(2 * C * H * W, 0.0f), got(2 * T * d);
  for (std::size_t b = 0; b < 2; ++b)
    pixels[((b * C + lit[b][0]) * H + lit[b][1]) * W + lit[b][2]] = 1.0f;
  ck.embed_patches(pixels.data(), 2, got.data());
  const std::vector<float>& w = s.at("embeddings.patch_embeddings.projection.weight").v;
  const std::vector<float>& bias = s.at("embeddings.patch_embeddings.projection.bias").v;
  const std::vector<float>& cls = s.at("embeddings.cls_token").v;
  const std::vector<float>& pos = s.at("embeddings.position_embeddings").v;
  const std::vector<float>* dist =
      c.distillation_token ? &s.at("embeddings.distillation_token").v : nullptr;
  std::vector<float> want(2 * T * d);
  for (std::size_t b = 0; b < 2; ++b) {
    const auto [ch, y, x] = lit[b];
    const std::size_t patch = (y / p) * c.patch_cols() + x / p, k = (ch * p + y % p) * p + x % p;
    for (std::size_t n = 0; n < T; ++n)
      for (std::size_t j = 0; j < d; ++j) {
        float e = n == 0           ? cls[j]
                  : n == 1 && dist ? (*dist)[j]
                  : n - P == patch ? w[j * K + k] + bias[j]
                                   : bias[j];
        e += pos[n * d + j];
        want[(b * T + n) * d + j] = e;
      }
  }
  check_values(got, want, "patch embeddings");
}

}  // namespace

TEST_CASE("checkpoint.family.t5", "[checkpoint][family]") {
  // T5 v1.0 (t5-small): a ReLU feed-forward (wi), the LM head tied and its input scaled
  json j = t5_config();
  j["feed_forward_proj"] = "relu";
  j["decoder_start_token_id"] = 0;
  check_model_type("t5", j, [](const ModelConfig& c) {
    CHECK((c.encoder_decoder && c.num_decoder_layers == 2 && c.decoder_start_token_id == 0));
    CHECK((c.h == 2 && c.kv_heads == 2 && c.head_dim == 3 && c.d_ff == 12 && c.vocab_size == 20));
    CHECK((c.relative_buckets == 8 && c.relative_max_distance == 20 && c.position_rows == 0));
    CHECK((c.activation == mha::Activation::relu && !c.gated_ffn && c.tie_word_embeddings));
    CHECK(c.lm_head_scale == 1 / std::sqrt(8.0));  // sequence_output * model_dim**-0.5
    CHECK(c.attn_scale == 1);                      // no 1/sqrt(d_kv)
    CHECK((c.rms_norm && !c.norm_plus_one && c.norm_placement == mha::NormPlacement::pre));
    CHECK((c.final_norm && !c.qkv_bias && !c.logits_bias && c.embed_scale == 1));
    CHECK((!c.causal && c.lm_head && c.norm_eps == 1e-6 && c.max_positions == (1u << 20)));
  });
  // T5 v1.1 / FLAN-T5: gated tanh GELU (wi_0 the gate, wi_1 up), an untied, unscaled head; a
  // decoder of its own depth, starting from pad_token_id
  j = t5_config();
  j["feed_forward_proj"] = "gated-gelu";
  j["tie_word_embeddings"] = false;
  j["num_decoder_layers"] = 3;
  j["pad_token_id"] = 5;
  j["layer_norm_epsilon"] = 1e-5;
  check_model_type(
      "t5", j,
      [](const ModelConfig& c) {
        CHECK((c.num_layers == 2 && c.num_decoder_layers == 3 && c.decoder_start_token_id == 5));
        CHECK((c.gated_ffn && c.activation == mha::Activation::gelu_tanh));
        CHECK((!c.tie_word_embeddings && c.lm_head_scale == 1 && c.norm_eps == 1e-5));
      },
      [](const mha::Checkpoint& ck, const std::map<std::string, Stored>&) {
        // each stack's own table: (buckets, h), distinct
        CHECK(ck.relative_bias(Stack::main).size() == 16);
        CHECK(ck.relative_bias(Stack::main) != ck.relative_bias(Stack::decoder));
      });
  // feed_forward_proj: "ACT" or "gated-ACT"
  const struct {
    const char* proj;
    mha::Activation act;
    bool gated;
  } projections[] = {{"gelu", mha::Activation::gelu, false},
                     {"gated-gelu_new", mha::Activation::gelu_tanh, true},
                     {"gelu_pytorch_tanh", mha::Activation::gelu_tanh, false},
                     {"gated-silu", mha::Activation::silu, true},
                     {"swish", mha::Activation::silu, false},
                     {"gated-relu", mha::Activation::relu, true}};
  for (const auto& p : projections) {
    j = t5_config();
    j["feed_forward_proj"] = p.proj;
    INFO(p.proj);
    const ModelConfig c = parse(j);
    CHECK((c.activation == p.act && c.gated_ffn == p.gated && c.tie_word_embeddings));
  }
  // Hostile values tests/models/test_seq2seq.py's Errors does not send: the bounds exactly
  j = t5_config();
  j["relative_attention_num_buckets"] = 4;
  j["relative_attention_max_distance"] = 3;  // more than 4 / 2
  CHECK(parse(j).relative_buckets == 4);
  j["relative_attention_max_distance"] = 2;
  require_refused(j,
                  "key 'relative_attention_max_distance' is 2; expected more than "
                  "relative_attention_num_buckets / 2 = 2");
  j["relative_attention_num_buckets"] = 3;
  require_refused(j, "key 'relative_attention_num_buckets' is 3; expected at least 4");
  j = t5_config();
  j["feed_forward_proj"] = "gated-";
  require_refused(j, "key 'feed_forward_proj' is \"gated-\"; expected \"ACT\" or \"gated-ACT\"");
  j["feed_forward_proj"] = 1;
  require_refused(j, "key 'feed_forward_proj' is 1; expected a string");
  j = t5_config();
  j["tie_word_embeddings"] = "false";
  require_refused(j, "key 'tie_word_embeddings' is \"false\"; expected true or false");
}

TEST_CASE("checkpoint.family.bart", "[checkpoint][family]") {
  // facebook/bart-large's kind: scaled embeddings, the tied head and its bias
  json j = bart_config();
  j["scale_embedding"] = true;
  check_model_type("bart", j, [](const ModelConfig& c) {
    CHECK((c.encoder_decoder && c.num_layers == 2 && c.num_decoder_layers == 3));
    CHECK((c.h == 2 && c.kv_heads == 2 && c.head_dim == 4 && c.d_ff == 12));
    CHECK(c.attn_scale == 1 / std::sqrt(4.0));
    CHECK((c.position_offset == 2 && c.position_rows == 18 && c.max_positions == 16));
    CHECK(c.embed_scale == std::sqrt(8.0));
    CHECK((c.norm_placement == mha::NormPlacement::post && !c.rms_norm && !c.final_norm));
    CHECK((c.qkv_bias && c.norm_eps == 1e-5 && c.activation == mha::Activation::gelu));
    CHECK((c.logits_bias && c.tie_word_embeddings && c.lm_head && c.lm_head_scale == 1));
    CHECK((c.decoder_start_token_id == 2 && c.relative_buckets == 0 && !c.gated_ffn));
  });
  // unscaled, untied (lm_head.weight), another activation and start token
  j = bart_config();
  j["scale_embedding"] = false;
  j["tie_word_embeddings"] = false;
  j["activation_function"] = "relu";
  j["decoder_start_token_id"] = 0;
  check_model_type("bart", j, [](const ModelConfig& c) {
    CHECK((c.embed_scale == 1 && !c.tie_word_embeddings && c.logits_bias));
    CHECK((c.activation == mha::Activation::relu && c.decoder_start_token_id == 0));
  });

  const ModelConfig c = parse(j);
  const auto tensors = all_tensors(c);
  mha::test::TempDir tmp("family_bart");
  {
    // BartForConditionalGeneration's names: the base model's under "model.", its heads not
    std::map<std::string, Stored> prefixed;
    for (const auto& [name, s] : tensors)
      prefixed[name == "lm_head.weight" || name == "final_logits_bias" ? name : "model." + name] =
          s;
    write_checkpoint(tmp / "prefixed", j, prefixed);
    const mha::Checkpoint ck(tmp / "prefixed");
    CHECK(ck.config().logits_bias);
    check_checkpoint(ck, tensors, {});
  }
  {
    // BartModel: no final_logits_bias, none added
    auto base = tensors;
    REQUIRE(base.erase("final_logits_bias") == 1);
    write_checkpoint(tmp / "base", j, base);
    const mha::Checkpoint ck(tmp / "base");
    CHECK(!ck.config().logits_bias);
    CHECK(ck.logits_bias().empty());
    std::uint64_t bytes = 0;
    for (const auto& [name, s] : base) bytes += 4 * s.v.size();
    CHECK(ck.float32_bytes() == bytes);
    check_checkpoint(ck, base, {});
  }
  // final_logits_bias of the wrong length
  auto wrong = tensors;
  wrong.at("final_logits_bias").shape[1] += 1;
  wrong.at("final_logits_bias").v.push_back(0.5f);
  write_checkpoint(tmp / "wrong_bias", j, wrong);
  mha::test::require_invalid([&] { mha::Checkpoint(tmp / "wrong_bias"); },
                             "tensor \"final_logits_bias\" has shape (1, 21)");

  // Hostile values tests/models/test_seq2seq.py's Errors does not send
  j = bart_config();
  j["activation_function"] = "tanh";
  require_refused(j, "key 'activation_function' is \"tanh\"; expected gelu");
  j = bart_config();
  j["scale_embedding"] = 1;
  require_refused(j, "key 'scale_embedding' is 1; expected true or false");
  j = bart_config();
  j["decoder_start_token_id"] = -1;
  require_refused(j, "decoder_start_token_id -1 is outside the vocabulary (vocab_size 20)");
  j = bart_config();
  j["vocab_size"] = 2;  // BartConfig's decoder_start_token_id 2 outside it
  require_refused(j, "decoder_start_token_id 2 is outside the vocabulary (vocab_size 2)");
  j = bart_config();
  j["encoder_layers"] = 0;
  require_refused(j, "key 'encoder_layers' is 0; expected a positive integer");
}

TEST_CASE("checkpoint.family.vit", "[checkpoint][family]") {
  // ViTForImageClassification of 8 x 8 images: 4 patches, the CLS token first; id2label's classes
  json j = vit_config();
  check_model_type(
      "vit", j,
      [](const ModelConfig& c) {
        CHECK((c.image_input() && c.image_height == 8 && c.image_width == 8));
        CHECK((c.patch_size == 4 && c.num_channels == 3 && c.patch_rows() == 2 &&
               c.patch_cols() == 2));
        CHECK((c.position_rows == 5 && c.max_positions == 5 && c.position_offset == 0));
        CHECK((c.classifier && c.labels == std::vector<std::string>{"cat", "dog", "car"}));
        CHECK((c.qkv_bias && !c.causal && !c.lm_head && !c.rms_norm && c.final_norm));
        CHECK((c.norm_placement == mha::NormPlacement::pre && !c.encoder_decoder));
        CHECK((c.activation == mha::Activation::gelu && c.norm_eps == 1e-12));
        CHECK((c.head_dim == 4 && c.attn_scale == 1 / std::sqrt(4.0) && !c.rope));
      },
      [](const mha::Checkpoint& ck, const std::map<std::string, Stored>& s) {
        CHECK((ck.config().num_labels == 3 && ck.config().labels.size() == 3));
        check_patch_embeddings(ck, s);
      });
  // [height, width], no q, k, v biases, the tanh GELU; no id2label: LABEL_i
  j = vit_config();
  j["image_size"] = {8, 12};
  j["qkv_bias"] = false;
  j["hidden_act"] = "gelu_new";
  j.erase("id2label");
  check_model_type(
      "vit", j,
      [](const ModelConfig& c) {
        CHECK((c.image_height == 8 && c.image_width == 12 && c.patch_rows() == 2 &&
               c.patch_cols() == 3 && c.position_rows == 7));
        CHECK((!c.qkv_bias && c.activation == mha::Activation::gelu_tanh));
        CHECK((c.classifier && c.labels.empty()));
      },
      [](const mha::Checkpoint& ck, const std::map<std::string, Stored>& s) {
        CHECK(ck.config().labels == std::vector<std::string>{"LABEL_0", "LABEL_1", "LABEL_2"});
        check_patch_embeddings(ck, s);
      });
  // The border past the last whole patch is not seen
  j = vit_config();
  j["image_size"] = 10;
  CHECK(parse(j).position_rows == 5);

  j = vit_config();
  const ModelConfig c = parse(j);
  const auto tensors = stored_tensors(c);
  mha::test::TempDir tmp("family_vit");
  {
    // ViTForImageClassification's names: the base model's under "vit.", the classifier not
    std::map<std::string, Stored> prefixed;
    for (const auto& [name, s] : tensors)
      prefixed[name.rfind("classifier.", 0) == 0 ? name : "vit." + name] = s;
    write_checkpoint(tmp / "prefixed", j, prefixed);
    const mha::Checkpoint ck(tmp / "prefixed");
    CHECK(ck.config().num_labels == 3);
    check_checkpoint(ck, tensors, check_patch_embeddings);
  }
  {
    // ViTModel: no classifier, none run, id2label dropped
    auto base = tensors;
    REQUIRE((base.erase("classifier.weight") == 1 && base.erase("classifier.bias") == 1));
    write_checkpoint(tmp / "base", j, base);
    const mha::Checkpoint ck(tmp / "base");
    CHECK((!ck.config().classifier && ck.config().labels.empty()));
    std::uint64_t bytes = 0;
    for (const auto& [name, s] : base) bytes += 4 * s.v.size();
    CHECK(ck.float32_bytes() == bytes);
    check_checkpoint(ck, base, check_patch_embeddings);
  }
  // A classifier's bias missing, or its weight of another width than d_model
  auto missing = tensors;
  missing.erase("classifier.bias");
  write_checkpoint(tmp / "no_bias", j, missing);
  mha::test::require_invalid([&] { mha::Checkpoint(tmp / "no_bias"); },
                             "no weights file has tensor \"classifier.bias\"");
  auto wrong = tensors;
  wrong.at("classifier.weight").shape[1] -= 1;
  wrong.at("classifier.weight").v.resize(3 * 7);
  write_checkpoint(tmp / "wrong", j, wrong);
  mha::test::require_invalid([&] { mha::Checkpoint(tmp / "wrong"); },
                             "tensor \"classifier.weight\" has shape (3, 7); config.json implies "
                             "(3, 8)");

  // Hostile values (tests/models/test_vit.py sends none of config.json's image keys)
  j = vit_config();
  j["num_channels"] = 1;
  require_refused(j, "key 'num_channels' is 1; expected 3");
  j = vit_config();
  j["patch_size"] = 9;
  require_refused(j, "key 'patch_size' is 9 for images of 8 x 8; expected a patch inside");
  j["image_size"] = {16, 8};
  require_refused(j, "key 'patch_size' is 9 for images of 16 x 8");
  for (const json& size : {json::array({8}), json::array({8, 0}), json::array({8, 70000}),
                           json::array({8, 8.5}), json::array({8, 8, 8})}) {
    j = vit_config();
    j["image_size"] = size;
    require_refused(j, "key 'image_size' is " + size.dump() +
                           "; expected a positive integer or [height, width]");
  }
  j = vit_config();
  j["image_size"] = 70000;
  require_refused(j, "(and image_size at most 65536)");
}

TEST_CASE("checkpoint.family.deit", "[checkpoint][family]") {
  // DeiTForImageClassification: ViT's keys, the distillation token after the CLS token (6
  // positions for 4 patches), one classifier on the CLS token
  json j = deit_config();
  check_model_type(
      "deit", j,
      [](const ModelConfig& c) {
        CHECK((c.image_input() && c.patch_rows() == 2 && c.patch_cols() == 2));
        CHECK((c.distillation_token && c.prefix_tokens() == 2 && c.image_tokens() == 6));
        CHECK((c.position_rows == 6 && c.max_positions == 6));
        CHECK((c.classifier && !c.distillation_head && c.labels.size() == 3));
        CHECK((c.qkv_bias && !c.causal && !c.lm_head && !c.rms_norm && c.final_norm));
        CHECK((c.norm_placement == mha::NormPlacement::pre && c.norm_eps == 1e-12));
      },
      [](const mha::Checkpoint& ck, const std::map<std::string, Stored>& s) {
        CHECK((!ck.config().distillation_head && ck.classifier().distillation_weight.empty()));
        check_patch_embeddings(ck, s);
      });
  // ViT keeps one token before its patches
  CHECK((parse(vit_config()).prefix_tokens() == 1 && !parse(vit_config()).distillation_token));

  // DeiTForImageClassificationWithTeacher: deit.* and two heads, cls_classifier on the CLS
  // token and distillation_classifier on the distillation token, the logits their mean
  ModelConfig teacher = parse(j);
  teacher.distillation_head = true;
  const auto tensors = stored_tensors(teacher);
  REQUIRE((tensors.count("cls_classifier.weight") &&
           tensors.count("distillation_classifier.bias") && !tensors.count("classifier.weight")));
  std::map<std::string, Stored> prefixed;
  for (const auto& [name, s] : tensors)
    prefixed[name.find("classifier.") != std::string::npos ? name : "deit." + name] = s;
  mha::test::TempDir tmp("family_deit");
  write_checkpoint(tmp / "teacher", j, prefixed);
  {
    const mha::Checkpoint ck(tmp / "teacher");
    const ModelConfig& c = ck.config();
    CHECK((c.classifier && c.distillation_head && c.num_labels == 3));
    check_checkpoint(ck, tensors, check_patch_embeddings);
    const mha::ClassifierHead head = ck.classifier();
    check_values(head.weight, tensors.at("cls_classifier.weight").v, "cls_classifier.weight");
    check_values(head.bias, tensors.at("cls_classifier.bias").v, "cls_classifier.bias");
    check_values(head.distillation_weight, tensors.at("distillation_classifier.weight").v,
                 "distillation_classifier.weight");
    check_values(head.distillation_bias, tensors.at("distillation_classifier.bias").v,
                 "distillation_classifier.bias");
    // Two rows of T = 6 tokens: the logits read tokens 0 and 1 of each row only
    const std::size_t d = c.d_model, T = c.image_tokens(), L = c.num_labels;
    std::vector<float> hidden(2 * T * d);
    for (std::size_t i = 0; i < hidden.size(); ++i)
      hidden[i] = static_cast<float>((i * 7) % 13) / 8.0f - 0.75f;
    const std::vector<float> z = mha::classifier_logits(ck, head, hidden.data(), 2, T * d);
    REQUIRE(z.size() == 2 * L);
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t o = 0; o < L; ++o) {
        double cls = head.bias[o], dist = head.distillation_bias[o];
        for (std::size_t k = 0; k < d; ++k) {
          cls += double(head.weight[o * d + k]) * hidden[r * T * d + k];
          dist += double(head.distillation_weight[o * d + k]) * hidden[r * T * d + d + k];
        }
        CHECK(std::abs(z[r * L + o] - (cls + dist) / 2) <= 1e-5 * std::abs((cls + dist) / 2));
      }
  }
  // A teacher checkpoint missing its CLS head, or with a distillation head of another shape
  auto missing = prefixed;
  missing.erase("cls_classifier.weight");
  write_checkpoint(tmp / "no_cls", j, missing);
  mha::test::require_invalid([&] { mha::Checkpoint(tmp / "no_cls"); },
                             "no weights file has tensor \"cls_classifier.weight\"");
  auto wrong = prefixed;
  wrong.at("distillation_classifier.weight").shape[0] = 2;
  wrong.at("distillation_classifier.weight").v.resize(2 * 8);
  write_checkpoint(tmp / "wrong", j, wrong);
  mha::test::require_invalid([&] { mha::Checkpoint(tmp / "wrong"); },
                             "tensor \"distillation_classifier.weight\" has shape (2, 8); "
                             "config.json implies (3, 8)");
  // DeiTModel: no head, the distillation token still in place
  auto base = tensors;
  for (const char* name : {"cls_classifier.weight", "cls_classifier.bias",
                           "distillation_classifier.weight", "distillation_classifier.bias"})
    base.erase(name);
  write_checkpoint(tmp / "base", j, base);
  const mha::Checkpoint ck(tmp / "base");
  CHECK((!ck.config().classifier && !ck.config().distillation_head && ck.config().labels.empty()));
  check_checkpoint(ck, base, check_patch_embeddings);
}

TEST_CASE("checkpoint.family: the registry", "[checkpoint][family]") {
  // One registered family per file of families/, each model_type read by one family only.
  std::set<std::string> names, types, files;
  for (const mha::Family* f : mha::families()) {
    CHECK(names.insert(f->name).second);
    for (const std::string& t : f->model_types) CHECK(types.insert(t).second);
  }
  for (const auto& e : std::filesystem::directory_iterator(std::string(MHA_SOURCE_DIR) +
                                                           "/lib/src/checkpoint/families"))
    if (e.path().extension() == ".cpp") files.insert(e.path().stem().string());
  CHECK(names == files);
  CHECK(types.size() >= 11);
  CHECK(mha::known_model_types().size() == types.size());
}
