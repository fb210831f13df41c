// .safetensors files (the format model hubs publish checkpoints in): an
// 8-byte little-endian header length N, N bytes of JSON header
// {"NAME": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
//  "__metadata__": {...}}, then the tensors' raw little-endian bytes, offsets
// relative to the end of the header.
//
// Reading checks everything before allocating: the header length against a
// 100 MiB cap and the file's size, the JSON, every tensor's dtype (F32, F64,
// F16, BF16), shape and offsets against the file and against its shape and
// dtype, that no two tensors overlap and that the data has no gaps. BF16
// tensors are widened to float32 exactly (bits << 16).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mha/io/npy.hpp"

namespace mha {

// Whether a file's first bytes (9 or more) start like a safetensors file: a
// plausible header length followed by '{'. file_kind.hpp asks it of files not
// named .safetensors.
bool looks_like_safetensors(const std::string& head);

// Every tensor of the file; throws mha::Error (invalid_input) naming the file
// and the tensor on anything malformed.
std::map<std::string, NpyArray> read_safetensors(const std::string& path);

// The tensor names of the file (its header alone, with every check), and the
// named tensors only: each is read from its own offsets, so one layer of a
// large checkpoint costs that layer's bytes.
std::vector<std::string> safetensors_names(const std::string& path);
std::map<std::string, NpyArray> read_safetensors(const std::string& path,
                                                 const std::set<std::string>& only);

// One file opened for reading tensor by tensor, as a whole-model run reads a
// checkpoint layer after layer: the header is read and checked once (as
// above); each tensor, or a range of rows of one, is read from its own
// offsets and converted to float32 (F32 as stored, BF16 and F16 widened
// exactly, F64 rounded to nearest), so memory holds what is asked for and no
// more.
class SafetensorsFile {
 public:
  struct Tensor {
    std::string dtype;  // "F32", "BF16", "F16" or "F64"
    std::vector<std::size_t> shape;
    std::uint64_t begin = 0, end = 0;  // data_offsets, relative to the data's start
    std::size_t size() const;          // elements
  };
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t data_start() const { return data_start_; }  // 8 + the header's length
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const Tensor* find(const std::string& name) const;  // null when absent
  // Rows [row0, row0 + rows) of the tensor's first axis (a 1-D tensor's
  // elements), into out (rows * row_size floats).
  void read_rows(const std::string& name, std::size_t row0, std::size_t rows, float* out) const;
  void read(const std::string& name, float* out) const;  // the whole tensor
  // A BF16 tensor's values as stored (bfloat16 bits), into out (size()
  // values): for readers that keep them in bfloat16.
  void read_bfloat16(const std::string& name, std::uint16_t* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t data_start_ = 0;
  std::map<std::string, Tensor> tensors_;
};

// The same from bytes in memory; `name` starts every message.
std::map<std::string, NpyArray> parse_safetensors(const std::string& bytes,
                                                  const std::string& name);

// The bytes of a safetensors file holding `tensors` (float16/32/64 only), in
// the order given, aligned to 8 bytes as the reference writer does.
std::string encode_safetensors(const std::vector<std::pair<std::string, NpyArray>>& tensors);

}  // namespace mha
