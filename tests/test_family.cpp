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
#include "test_util.hpp"

namespace {

using json = nlohmann::json;
using mha::Layout;
using mha::ModelConfig;
using mha::Role;
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
// the checkpoint another one of bfloat16's 17,152 values from 2^-7 up).
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
      for (std::size_t l = 0; l < c.num_layers; ++l) add(t, l);
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

bool stores(const ModelConfig& c, Role role, mha::Part part) {
  for (const mha::TensorSpec& t : c.family->tensors)
    if (t.role == role && t.part == part && mha::has_tensor(t, c)) return true;
  return false;
}

// Layer 1's tensors where the kernel expects them, each role by the
// reference's layout of its stored tensor. A bfloat16 checkpoint whose GEMMs
// run natively lays its matrices out packed (Checkpoint::layer), with no
// float32 W: checked through unpack_bf16.
void check_layer(const mha::Checkpoint& ck, const std::map<std::string, Stored>& stored) {
  const ModelConfig& c = ck.config();
  mha::TransformerLayer<float> L;
  ck.layer(1, L, 2);
  const bool packed = ck.bf16_gemm() && mha::bf16_packing();
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
  CHECK(matrices == (packed ? (L.ffn.gated() ? 7u : 6u) : 0u));
  const std::size_t d = c.d_model, q = c.h * c.head_dim, kv = c.kv_heads * c.head_dim,
                    hd = c.head_dim, f = c.d_ff;
  const float one = c.norm_plus_one ? 1.0f : 0.0f;
  std::size_t checked = 0;
  for (const mha::TensorSpec& t : c.family->tensors) {
    if (!mha::per_layer(t.role) || !mha::has_tensor(t, c)) continue;
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
      case Role::ffn_norm:
        norm(L.norm2);
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
  if (c.qkv_bias && !stores(c, Role::o, mha::Part::bias)) {
    // Qwen2: no o_proj bias stored; the kernel adds four or none, so b_o is zeros
    REQUIRE(L.self_attn.b_o.size() == d);
    for (std::size_t i = 0; i < d; ++i) CHECK(L.self_attn.b_o(i) == 0.0f);
  }
}

}  // namespace

namespace {

// One model_type of a family file: its config.json, then the features it
// must set, then the tensors in place and the refusals.
void check_model_type(const char* family, json config,
                      const std::function<void(const ModelConfig&)>& features) {
  const std::string type = config["model_type"];
  INFO(family << ": " << type);
  const ModelConfig c = mha::parse_model_config(config.dump(), "config.json");
  REQUIRE(c.family != nullptr);
  CHECK(std::string(c.family->name) == family);
  CHECK(c.num_layers == 2);
  features(c);

  mha::test::TempDir tmp("family");
  const auto tensors = all_tensors(c);
  {
    const std::string dir = tmp / "whole";
    write_checkpoint(dir, config, tensors);
    const mha::Checkpoint ck(dir);
    std::uint64_t bytes = 0;
    for (const auto& [name, s] : tensors) bytes += 4 * s.v.size();
    CHECK(ck.float32_bytes() == bytes);
    check_layer(ck, tensors);
  }
  {
    // The same for a bfloat16 pass: the packed layout where the GEMM runs
    // natively (else float32 as above), from values exact in bfloat16, in
    // F32 and BF16 files (whose bits are packed as stored).
    const auto exact = all_tensors(c, true);
    for (const bool bf16_file : {false, true}) {
      INFO((bf16_file ? "BF16 file" : "F32 file"));
      const std::string dir = tmp / (bf16_file ? "bf16_file" : "f32_file");
      write_checkpoint(dir, config, exact, bf16_file);
      mha::Checkpoint ck(dir);
      CHECK(ck.stored_dtypes() == std::vector<std::string>{bf16_file ? "BF16" : "F32"});
      ck.set_bf16_gemm(true);
      check_layer(ck, exact);
    }
  }
  // Layer 1's last tensor missing, then one of the wrong shape: refused by
  // name when the directory is opened (headers only).
  std::string last;
  for (const mha::TensorSpec& t : c.family->tensors)
    if (mha::per_layer(t.role) && mha::has_tensor(t, c)) last = mha::tensor_name(t, 1);
  auto missing = tensors;
  missing.erase(last);
  write_checkpoint(tmp / "missing", config, missing);
  mha::test::require_invalid([&] { mha::Checkpoint(tmp / "missing"); },
                             "no weights file has tensor \"" + last + "\"");
  auto wrong = tensors;
  Stored& s = wrong.at(last);
  s.shape[0] += 1;
  s.v.resize(s.v.size() + (s.shape.size() == 2 ? s.shape[1] : 1), 0.5f);
  write_checkpoint(tmp / "wrong", config, wrong);
  mha::test::require_invalid([&] { mha::Checkpoint(tmp / "wrong"); },
                             "tensor \"" + last + "\" has shape");
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
