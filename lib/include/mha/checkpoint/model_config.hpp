// A whole model's hyperparameters, read from the config.json a model hub
// publishes beside a checkpoint (Hugging Face's keys), for the families this
// tool runs from text: BERT, GPT-2, and the LLaMA family (LLaMA, Mistral,
// Qwen2, Qwen3). Each family's defaults are its reference implementation's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mha/kernel/options.hpp"

namespace mha {

enum class ModelFamily { bert, gpt2, llama };

struct ModelConfig {
  std::string model_type;  // as config.json says: bert, gpt2, llama, mistral, qwen2, qwen3
  ModelFamily family = ModelFamily::llama;
  std::size_t num_layers = 0;  // num_hidden_layers / n_layer
  std::size_t d_model = 0;     // hidden_size / n_embd
  std::size_t h = 0;           // num_attention_heads / n_head
  std::size_t kv_heads = 0;    // num_key_value_heads (grouped-query attention); h when absent
  std::size_t head_dim = 0;    // head_dim, else d_model / h
  std::size_t d_ff = 0;        // intermediate_size / n_inner (GPT-2: 4 d_model)
  std::size_t vocab_size = 0;
  std::size_t max_positions = 0;    // max_position_embeddings / n_positions
  std::size_t type_vocab_size = 0;  // BERT's token types
  double norm_eps = 1e-5;           // layer_norm_eps / layer_norm_epsilon / rms_norm_eps
  double rope_theta = 10000;
  double rope_scaling = 1;         // rope_scaling {"type": "linear", "factor": f}
  std::size_t sliding_window = 0;  // Mistral (Qwen2 with use_sliding_window); 0 = none
  Activation activation = Activation::gelu;
  bool tie_word_embeddings = false;  // the LM head is the input embedding
  bool causal = true;                // every family but BERT
  bool pre_norm = true;              // BERT is post-norm
  bool rms_norm = true;              // the LLaMA family
  bool qkv_bias = false;             // BERT, GPT-2 (all four), Qwen2 (q, k, v)
  bool qk_norm = false;              // Qwen3
  std::optional<std::int64_t> pad_token_id, bos_token_id, eos_token_id;
  std::string torch_dtype;  // as stored, e.g. "float32", "bfloat16" ("" when absent)

  bool has_lm_head() const { return family != ModelFamily::bert; }
};

// The model types read, in the order messages list them.
const std::vector<std::string>& known_model_types();

// Reads and checks `path` (a config.json): one-line errors (mha::Error,
// invalid_input) name the file and the key, and what was expected.
ModelConfig read_model_config(const std::string& path);
// The same on the text of a config.json read from `path` (the fuzzer's entry).
ModelConfig parse_model_config(std::string_view text, const std::string& path);

}  // namespace mha
