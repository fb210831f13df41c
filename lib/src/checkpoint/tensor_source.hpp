// Where a checkpoint's tensors come from, by the reference implementation's
// names and shapes: a safetensors file, or a GGUF file seen as the checkpoint
// it was converted from. Internal to checkpoint/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mha {

// A tensor as a source holds it: its dtype as stored ("F32", "BF16", "F16",
// "F64", or a GGUF type's name such as "Q4_K") and its shape (C order).
struct StoredTensor {
  std::string dtype;
  std::vector<std::size_t> shape;
  // A matrix the source holds transposed (a GGUF file's GPT-2 Conv1D
  // weights): read() transposes it; read_transposed() gives it as held,
  // (shape[1], shape[0]), for readers that can take it so.
  bool transposed = false;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual const std::string& path() const = 0;
  // The bytes before the tensors' data (a run's record checksums them).
  virtual std::uint64_t header_bytes() const = 0;
  virtual const std::map<std::string, StoredTensor>& tensors() const = 0;
  const StoredTensor* find(const std::string& name) const {
    const auto it = tensors().find(name);
    return it == tensors().end() ? nullptr : &it->second;
  }
  // The whole tensor, or rows [row0, row0 + rows) of its first axis, in
  // float32 (C order). `threads` may convert (dequantize) it in pieces.
  virtual void read(const std::string& name, float* out, int threads = 1) const = 0;
  virtual void read_rows(const std::string& name, std::size_t row0, std::size_t rows,
                         float* out) const = 0;
  // A `transposed` matrix as the source holds it (shape[1], shape[0]).
  virtual void read_transposed(const std::string& name, float* out, int threads) const = 0;
  // A tensor stored as BF16: its bits as stored (dtype "BF16" only).
  virtual void read_bfloat16(const std::string& name, std::uint16_t* out) const = 0;
};

// A safetensors file (io/safetensors.hpp), its header read and checked now.
std::unique_ptr<TensorSource> open_safetensors(const std::string& path);

}  // namespace mha
