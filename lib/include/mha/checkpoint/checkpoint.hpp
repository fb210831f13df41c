// A checkpoint directory in the layout model hubs publish: config.json, the
// weights in model.safetensors or sharded (model.safetensors.index.json and
// the shards it names), and usually tokenizer.json. Opening one reads and
// checks config.json, every weights file's header and every tensor the
// family needs (its name and shape), and no weights: a layer's weights are
// read, converted to float32 and laid out for the kernel (x @ W) only when
// the forward reaches the layer (layer()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mha/checkpoint/model_config.hpp"
#include "mha/kernel/compute_type.hpp"
#include "mha/kernel/site.hpp"
#include "mha/kernel/weights.hpp"

namespace mha {

class TensorSource;

// An image classifier's head (ViTForImageClassification's classifier):
// weight (num_labels, d_model) as nn.Linear stores it, bias (num_labels), on
// the CLS token; DeiTForImageClassificationWithTeacher's second head on the
// distillation token (distillation_classifier; empty for one head).
struct ClassifierHead {
  std::vector<float> weight, bias;
  std::vector<float> distillation_weight, distillation_bias;
};

struct TensorSpec;
enum class Role;

class Checkpoint {
 public:
  // Throws mha::Error (invalid_input) naming the file and what was expected:
  // no config.json, no weights, a shard missing from the index, a tensor
  // missing or of the wrong shape, a `compute` of float64.
  // `compute`: what every pass on it computes in (compute()).
  explicit Checkpoint(const std::string& dir, ComputeType compute = ComputeType::float32);
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  // What every pass on this checkpoint (forward.hpp, the LM head) computes
  // in, fixed when it is opened: float32 throughout, or bfloat16, every GEMM
  // on bfloat16 operands summed in float32 (the kernel's bf16_gemm, natively
  // where the CPU has AVX512_BF16, blas.hpp), norms, softmax and residuals in
  // float32.
  ComputeType compute() const { return compute_; }
  // The weights files, in the order read (shards in name order), and the
  // bytes of each before its tensors' data.
  std::vector<std::string> weight_files() const;
  std::vector<std::uint64_t> weight_header_bytes() const;
  // Whether the checkpoint is a GGUF file (its metadata stands for config.json),
  // and its general.architecture ("llama", "gemma3", ...; else empty).
  bool gguf() const { return gguf_; }
  const std::string& gguf_architecture() const { return gguf_architecture_; }
  // The dtypes the weights are stored in ("F32", "BF16", ...), sorted.
  std::vector<std::string> stored_dtypes() const;
  // The model in float32, and its largest layer in float32 (bytes).
  std::uint64_t float32_bytes() const;
  std::uint64_t layer_float32_bytes() const;

  // Layer l's weights, read and converted now, into `L` (its tensors are
  // reused when their sizes match, as every layer's do: one layer's memory
  // serves the whole pass). With compute() bfloat16 where the GEMM runs natively
  // (packed_weights.hpp's bf16_packing()), each matrix goes straight into the
  // kernel's packed bfloat16 layout (W's packed_*; W itself left empty), a
  // tensor at a time through one float32 scratch: no float32 copy of the
  // layer. `threads` pack it.
  void layer(std::size_t l, TransformerLayer<float>& L, int threads = 1) const;
  // The same for layer l of `stack` (an encoder-decoder's decoder layers
  // have their cross-attention and its norm: norm2, the feed-forward's norm3).
  void layer(std::size_t l, TransformerLayer<float>& L, int threads, Stack stack) const;
  Norm<float> final_norm() const;      // empty when the family has none (BERT)
  Norm<float> embedding_norm() const;  // BERT's embeddings.LayerNorm; else empty
  // An encoder-decoder's stacks' own (the decoder's: Stack::decoder).
  Norm<float> final_norm(Stack stack) const;
  Norm<float> embedding_norm(Stack stack) const;
  // T5's relative position bias table of `stack`, (buckets, h) row-major;
  // empty for families without one.
  std::vector<float> relative_bias(Stack stack) const;
  // BART's final_logits_bias (vocab_size), added to the LM head's logits;
  // empty when the checkpoint has none.
  std::vector<float> logits_bias() const;
  // Embedding rows: out (count, d_model) = the embedding of token ids[i]
  // (times the family's embed_scale) + the learned position table's row
  // positions[i] (the caller adds position_offset) + token type 0's, where
  // the family has them; before embedding_norm. Only the rows named are read.
  void embed(const std::int32_t* ids, const std::size_t* positions, std::size_t count,
             float* out) const;
  // The same with `stack`'s position table (BART's decoder has its own); the
  // token embedding is shared. With a hook, the token embeddings (times
  // embed_scale) and the position rows are shown at hook_embed and
  // hook_pos_embed (site.hpp) before they are summed, as (count, d_model).
  void embed(const std::int32_t* ids, const std::size_t* positions, std::size_t count, float* out,
             Stack stack, SiteHook<float>* hook = nullptr) const;
  // ViT: the embeddings of B images, `pixels` (B, num_channels, image_height,
  // image_width) as the image processor leaves them: out (B, P + N, d_model)
  // = [the CLS token; DeiT's distillation token; each patch's projection
  // (the Conv2d, bias added)] + the position table, patches row by row (P =
  // prefix_tokens(); image_input() configs only).
  void embed_patches(const float* pixels, std::size_t B, float* out) const;
  // The classifier of an image classifier (ModelConfig::classifier), read
  // now, with the distillation head where it has one; empty when it has none.
  ClassifierHead classifier() const;
  // The LM head's rows [v0, v0 + count) (vocabulary entries, d_model each):
  // lm_head.weight, or the input embedding when tied. Causal LMs only.
  void lm_head_rows(std::size_t v0, std::size_t count, float* out) const;

 private:
  void read(const std::string& stored, float* out) const;
  std::string stored_name(const TensorSpec& t, const std::string& name) const;
  Norm<float> norm_of(Role role, Stack stack) const;
  void open_weights();
  // where_ and prefix_ from files_ (a sharded checkpoint's weight_map, from
  // `index`, checked against them).
  void index_weights(const std::map<std::string, std::string>& weight_map,
                     const std::string& index = "");
  void check_tensors() const;

  ComputeType compute_ = ComputeType::float32;
  bool gguf_ = false;
  std::string gguf_architecture_;
  std::string dir_;
  ModelConfig config_;
  std::string prefix_;  // "bert.", "transformer.", ... or "" before the family's names
  std::vector<std::unique_ptr<TensorSource>> files_;
  std::map<std::string, std::size_t> where_;  // tensor name (as stored) -> files_ index
};

}  // namespace mha
