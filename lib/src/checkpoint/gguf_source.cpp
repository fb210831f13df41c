#include "gguf_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/io/gguf.hpp"
#include "transpose.hpp"

namespace mha {

namespace {

using json = nlohmann::json;

// What the converter did to a tensor, undone on reading.
enum class Undo {
  nothing,
  unpermute,  // LlamaModel.permute of q_proj / k_proj rows (heads: `heads`)
  minus_one,  // Gemma's norm weights, stored as 1 + w
  transpose,  // GPT-2's Conv1D weights, stored transposed
};

struct Mapped {
  std::string gguf;  // the tensor's name in the file
  Undo undo = Undo::nothing;
  std::size_t heads = 0;
};

// The reference implementation's name of each GGUF layer tensor, per
// architecture (llama.cpp's gguf-py tensor_mapping.py and constants.py).
struct LayerName {
  const char* gguf;  // after "blk.N."
  const char* hf;    // after the layer's prefix
};

const std::vector<LayerName>& llama_layer_names() {
  static const std::vector<LayerName> names = {
      {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  return names;
}

// Gemma 2 and 3: ffn_norm is the pre-feed-forward norm (FFN_PRE_NORM's name).
const std::vector<LayerName>& gemma2_layer_names() {
  static const std::vector<LayerName> names = {{"attn_norm", "input_layernorm"},
                                               {"attn_q", "self_attn.q_proj"},
                                               {"attn_k", "self_attn.k_proj"},
                                               {"attn_v", "self_attn.v_proj"},
                                               {"attn_output", "self_attn.o_proj"},
                                               {"attn_q_norm", "self_attn.q_norm"},
                                               {"attn_k_norm", "self_attn.k_norm"},
                                               {"post_attention_norm", "post_attention_layernorm"},
                                               {"ffn_norm", "pre_feedforward_layernorm"},
                                               {"post_ffw_norm", "post_feedforward_layernorm"},
                                               {"ffn_gate", "mlp.gate_proj"},
                                               {"ffn_up", "mlp.up_proj"},
                                               {"ffn_down", "mlp.down_proj"}};
  return names;
}

const std::vector<LayerName>& gpt2_layer_names() {
  static const std::vector<LayerName> names = {
      {"attn_norm", "ln_1"}, {"attn_qkv", "attn.c_attn"}, {"attn_output", "attn.c_proj"},
      {"ffn_norm", "ln_2"},  {"ffn_up", "mlp.c_fc"},      {"ffn_down", "mlp.c_proj"}};
  return names;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class GgufTensors final : public TensorSource {
 public:
  GgufTensors(std::unique_ptr<GgufFile> file, std::map<std::string, Mapped> map)
      : file_(std::move(file)), map_(std::move(map)) {
    for (const auto& [hf, m] : map_) {
      const GgufTensor& t = *file_->find_tensor(m.gguf);
      std::vector<std::size_t> shape = t.shape();
      if (m.undo == Undo::transpose) std::reverse(shape.begin(), shape.end());
      tensors_[hf] = {ggml_type_info(t.type).name, shape, m.undo == Undo::transpose};
    }
  }
  const std::string& path() const override { return file_->path(); }
  std::uint64_t header_bytes() const override { return file_->data_offset(); }
  const std::map<std::string, StoredTensor>& tensors() const override { return tensors_; }

  void read(const std::string& name, float* out, int threads) const override {
    const Mapped& m = mapped(name);
    const GgufTensor& t = *file_->find_tensor(m.gguf);
    if (m.undo == Undo::nothing) return dequantize(t, out, threads);
    if (m.undo == Undo::minus_one) {
      dequantize(t, out, threads);
      for (std::size_t i = 0, n = t.size(); i < n; ++i) out[i] -= 1.0f;
      return;
    }
    std::vector<float> stored(t.size());
    dequantize(t, stored.data(), threads);
    // A bias (1-d) is a column: its elements are the rows.
    const bool column = t.dims.size() == 1;
    const std::size_t rows = column ? t.size() : t.rows(), cols = column ? 1 : t.row_size();
    if (m.undo == Undo::transpose) {  // stored (rows, cols) -> (cols, rows), 64 rows a task
      constexpr std::size_t kRows = 64;
      parallel_for((rows + kRows - 1) / kRows, threads, [&](std::size_t piece, int) {
        const std::size_t r0 = piece * kRows;
        transpose_into(stored.data() + r0 * cols, std::min(kRows, rows - r0), cols, out + r0, rows);
      });
      return;
    }
    // LlamaModel.permute: reference row h*d + j*(d/2) + i is stored at h*d + 2*i + j.
    const std::size_t d = rows / m.heads, half = d / 2;
    for (std::size_t h = 0; h < m.heads; ++h)
      for (std::size_t j = 0; j < 2; ++j)
        for (std::size_t i = 0; i < half; ++i)
          std::copy_n(stored.data() + (h * d + 2 * i + j) * cols, cols,
                      out + (h * d + j * half + i) * cols);
  }

  void read_transposed(const std::string& name, float* out, int threads) const override {
    const Mapped& m = mapped(name);
    if (m.undo != Undo::transpose)
      fail_input(path() + ": tensor " + echo(m.gguf) + " is not held transposed");
    dequantize(*file_->find_tensor(m.gguf), out, threads);
  }

  void read_rows(const std::string& name, std::size_t row0, std::size_t rows,
                 float* out) const override {
    const Mapped& m = mapped(name);
    if (m.undo == Undo::nothing) return file_->read_rows(m.gguf, row0, rows, out);
    const StoredTensor& s = tensors_.at(name);
    const std::size_t first = s.shape.empty() ? 1 : s.shape[0];
    if (row0 > first || rows > first - row0)
      fail_input(path() + ": tensor " + echo(m.gguf) + " has " + std::to_string(first) +
                 " rows, not " + std::to_string(row0 + rows));
    std::size_t n = 1;
    for (std::size_t v : s.shape) n *= v;
    std::vector<float> all(n);
    read(name, all.data(), 1);
    const std::size_t row = first ? n / first : 0;
    std::copy_n(all.data() + row0 * row, rows * row, out);
  }

  void read_bfloat16(const std::string& name, std::uint16_t* out) const override {
    const StoredTensor& s = tensors_.at(name);
    if (s.dtype != "BF16")
      fail_input(path() + ": tensor " + echo(mapped(name).gguf) + " is " + s.dtype + ", not BF16");
    std::size_t n = 1;
    for (std::size_t v : s.shape) n *= v;
    std::vector<float> values(n);
    read(name, values.data(), 1);  // BF16 widened exactly
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &values[i], 4);
      out[i] = static_cast<std::uint16_t>(bits >> 16);
    }
  }

 private:
  // The tensor as stored, dequantized: its rows in pieces of kRows over the
  // pool (each piece its own reads; the values do not depend on the cut).
  void dequantize(const GgufTensor& t, float* out, int threads) const {
    constexpr std::size_t kRows = 64;
    const std::size_t rows = t.rows(), row = t.row_size();
    if (threads <= 1 || rows <= kRows) return file_->read(t.name, out);
    parallel_for((rows + kRows - 1) / kRows, threads, [&](std::size_t piece, int) {
      const std::size_t r0 = piece * kRows;
      file_->read_rows(t.name, r0, std::min(kRows, rows - r0), out + r0 * row);
    });
  }

  const Mapped& mapped(const std::string& name) const {
    const auto it = map_.find(name);
    if (it == map_.end()) fail_input(path() + ": has no tensor for " + echo(name));
    return it->second;
  }

  std::unique_ptr<GgufFile> file_;
  std::map<std::string, Mapped> map_;
  std::map<std::string, StoredTensor> tensors_;
};

// `{arch}.key` as a size, or `fallback` when absent (nullopt: required).
std::size_t size_key(const GgufFile& f, const std::string& key,
                     std::optional<std::size_t> fallback) {
  if (!f.find(key)) {
    if (fallback) return *fallback;
    fail_input(f.path() + ": has no metadata key " + echo(key) +
               "; expected it in a GGUF file of this architecture");
  }
  const std::uint64_t v = f.get_u64(key);
  if (v == 0 || v > (std::uint64_t{1} << 40))
    fail_input(f.path() + ": metadata key " + echo(key) + " is " + std::to_string(v) +
               "; expected a size from 1 to 2^40");
  return static_cast<std::size_t>(v);
}

double number_key(const GgufFile& f, const std::string& key, double fallback) {
  return f.find(key) ? f.get_f64(key) : fallback;
}

}  // namespace

GgufView open_gguf(const std::string& path) {
  auto file = std::make_unique<GgufFile>(path);
  const GgufFile& f = *file;
  const std::string arch = f.get_string("general.architecture");
  const std::string k = arch + ".";
  static const std::map<std::string, std::string> model_types = {
      {"llama", "llama"},   {"qwen2", "qwen2"},        {"qwen3", "qwen3"}, {"gemma", "gemma"},
      {"gemma2", "gemma2"}, {"gemma3", "gemma3_text"}, {"gpt2", "gpt2"}};
  const auto type = model_types.find(arch);
  if (type == model_types.end())
    fail_input(path + ": general.architecture is " + echo(arch) +
               "; expected one of llama, qwen2, qwen3, gemma, gemma2, gemma3, gpt2 (the GGUF "
               "architectures mha reads)");
  if (f.find_tensor("rope_freqs.weight"))
    fail_input(path +
               ": has tensor \"rope_freqs.weight\" (Llama 3's rope scaling factors); "
               "mha does not read that scaling from a GGUF file");

  const std::size_t layers = size_key(f, k + "block_count", std::nullopt);
  // Every block has tensors of its own (blk.N.*): a block_count past the tensors the file holds
  // is refused before a name is built for each block, and so is one whose last block is absent.
  if (layers > f.tensors().size())
    fail_input(path + ": metadata key " + echo(k + "block_count") + " is " +
               std::to_string(layers) + ", but the file holds only " +
               std::to_string(f.tensors().size()) +
               " tensors; expected the tensors of each block (blk.N.*)");
  const std::string last = "blk." + std::to_string(layers - 1) + ".";
  if (std::none_of(f.tensors().begin(), f.tensors().end(),
                   [&](const GgufTensor& t) { return t.name.compare(0, last.size(), last) == 0; }))
    fail_input(path + ": metadata key " + echo(k + "block_count") + " is " +
               std::to_string(layers) + ", but the file holds no tensor of block " +
               std::to_string(layers - 1) + " (" + last + "*); expected the tensors of each block");
  const std::size_t d = size_key(f, k + "embedding_length", std::nullopt);
  const std::size_t heads = size_key(f, k + "attention.head_count", std::nullopt);
  const std::size_t kv_heads = size_key(f, k + "attention.head_count_kv", heads);
  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2)
    fail_input(path + ": has no 2-d tensor \"token_embd.weight\"; expected the token embeddings");
  std::size_t vocab = static_cast<std::size_t>(embd->dims[1]);
  if (f.find(k + "vocab_size")) vocab = size_key(f, k + "vocab_size", std::nullopt);
  const bool untied = f.find_tensor("output.weight") != nullptr;

  json c;
  c["model_type"] = type->second;
  c["vocab_size"] = vocab;
  std::map<std::string, Mapped> map;
  auto add = [&](const std::string& hf, const std::string& gguf, Undo undo = Undo::nothing,
                 std::size_t n = 0) {
    if (f.find_tensor(gguf)) map[hf] = {gguf, undo, n};
  };
  if (arch == "gpt2") {
    c["architectures"] = {"GPT2LMHeadModel"};
    c["n_layer"] = layers;
    c["n_embd"] = d;
    c["n_head"] = heads;
    c["n_positions"] = size_key(f, k + "context_length", std::nullopt);
    c["n_inner"] = size_key(f, k + "feed_forward_length", 4 * d);
    c["layer_norm_epsilon"] = number_key(f, k + "attention.layer_norm_epsilon", 1e-5);
    add("wte.weight", "token_embd.weight");
    add("wpe.weight", "position_embd.weight");
    add("ln_f.weight", "output_norm.weight");
    add("ln_f.bias", "output_norm.bias");
    for (std::size_t l = 0; l < layers; ++l)
      for (const LayerName& n : gpt2_layer_names())
        for (const char* part : {".weight", ".bias"}) {
          const std::string g = "blk." + std::to_string(l) + "." + n.gguf + part;
          const bool matrix = std::string(part) == ".weight" && std::string(n.hf).find("ln_") != 0;
          add("h." + std::to_string(l) + "." + n.hf + part, g,
              matrix ? Undo::transpose : Undo::nothing);
        }
  } else {
    const bool gemma = arch.compare(0, 5, "gemma") == 0;
    static const std::map<std::string, std::string> architectures = {
        {"llama", "LlamaForCausalLM"},   {"qwen2", "Qwen2ForCausalLM"},
        {"qwen3", "Qwen3ForCausalLM"},   {"gemma", "GemmaForCausalLM"},
        {"gemma2", "Gemma2ForCausalLM"}, {"gemma3", "Gemma3ForCausalLM"}};
    c["architectures"] = {architectures.at(arch)};
    c["num_hidden_layers"] = layers;
    c["hidden_size"] = d;
    c["num_attention_heads"] = heads;
    c["num_key_value_heads"] = kv_heads;
    c["intermediate_size"] = size_key(f, k + "feed_forward_length", std::nullopt);
    c["max_position_embeddings"] = size_key(f, k + "context_length", std::size_t{2048});
    c["rms_norm_eps"] = number_key(f, k + "attention.layer_norm_rms_epsilon", 1e-6);
    c["rope_theta"] = number_key(f, k + "rope.freq_base", 10000.0);
    const std::size_t head_dim = size_key(f, k + "attention.key_length", d / heads);
    c["head_dim"] = head_dim;
    c["tie_word_embeddings"] = !untied;
    if (f.find(k + "rope.scaling.type")) {
      const std::string scaling = f.get_string(k + "rope.scaling.type");
      if (scaling == "linear")
        c["rope_scaling"] = {{"rope_type", "linear"},
                             {"factor", number_key(f, k + "rope.scaling.factor", 1.0)}};
      else if (scaling != "none")
        fail_input(path + ": metadata key " + echo(k + "rope.scaling.type") + " is " +
                   echo(scaling) + "; expected none or linear (the rope scalings mha reads)");
    }
    if (gemma) {
      c["hidden_activation"] = "gelu_pytorch_tanh";
      if (arch != "gemma") {
        // llama.cpp's f_attention_scale: 1/sqrt(d / heads) for the 27B models
        // (46 layers in Gemma 2, 62 in Gemma 3), else 1/sqrt(head_dim).
        const bool big = layers == (arch == "gemma2" ? 46u : 62u);
        c["query_pre_attn_scalar"] = big ? d / heads : head_dim;
        c["sliding_window"] = size_key(f, k + "attention.sliding_window", std::size_t{4096});
        if (f.find(k + "attn_logit_softcapping"))
          c["attn_logit_softcapping"] = f.get_f64(k + "attn_logit_softcapping");
        if (f.find(k + "final_logit_softcapping"))
          c["final_logit_softcapping"] = f.get_f64(k + "final_logit_softcapping");
      }
      if (arch == "gemma2") {
        if (!c.contains("attn_logit_softcapping")) c["attn_logit_softcapping"] = nullptr;
        if (!c.contains("final_logit_softcapping")) c["final_logit_softcapping"] = nullptr;
      }
      if (arch == "gemma3") {
        c["sliding_window_pattern"] = 6;
        c["rope_local_base_freq"] = number_key(f, k + "rope.freq_base_swa", 10000.0);
      }
    } else {
      c["hidden_act"] = "silu";
    }
    add("model.embed_tokens.weight", "token_embd.weight");
    add("model.norm.weight", "output_norm.weight", gemma ? Undo::minus_one : Undo::nothing);
    if (untied && !(arch == "gemma" || arch == "gemma2")) add("lm_head.weight", "output.weight");
    const auto& names =
        arch == "gemma2" || arch == "gemma3" ? gemma2_layer_names() : llama_layer_names();
    for (std::size_t l = 0; l < layers; ++l)
      for (const LayerName& n : names)
        for (const char* part : {".weight", ".bias"}) {
          const std::string g = "blk." + std::to_string(l) + "." + n.gguf + part;
          const std::string hf = "model.layers." + std::to_string(l) + "." + n.hf + part;
          const std::string base = n.gguf;
          Undo undo = Undo::nothing;
          std::size_t count = 0;
          if (arch == "llama" && (base == "attn_q" || base == "attn_k")) {
            undo = Undo::unpermute;
            count = base == "attn_q" ? heads : kv_heads;
          } else if (gemma && ends_with(base, "norm") && std::string(part) == ".weight") {
            undo = Undo::minus_one;
          }
          add(hf, g, undo, count);
        }
  }
  // A permuted tensor's rows must split into heads of an even size.
  for (const auto& [hf, m] : map)
    if (m.undo == Undo::unpermute) {
      const GgufTensor& t = *f.find_tensor(m.gguf);
      const std::size_t rows = t.dims.size() == 1 ? t.row_size() : t.rows();
      if (m.heads == 0 || rows % (2 * m.heads) != 0)
        fail_input(path + ": tensor " + echo(m.gguf) + " has " + std::to_string(rows) +
                   " rows; expected a multiple of 2 x " + std::to_string(m.heads) + " heads");
    }
  GgufView view;
  view.architecture = arch;
  view.config = std::move(c);
  view.tensors = std::make_unique<GgufTensors>(std::move(file), std::move(map));
  return view;
}

}  // namespace mha
