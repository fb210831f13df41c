// GGUF files (ggml's and llama.cpp's checkpoint format, ggml's docs/gguf.md),
// versions 2 and 3, little-endian:
//
//   "GGUF", uint32 version, uint64 tensor_count, uint64 metadata_kv_count,
//   metadata_kv_count x {string key, uint32 value type, value},
//   tensor_count x {string name, uint32 n_dims, uint64 dims[n_dims],
//                   uint32 ggml type, uint64 offset},
//   padding to general.alignment (default 32), then the tensor data; each
//   offset is relative to the data's start and a multiple of the alignment.
//
// A string is a uint64 length and that many bytes; an array is a uint32
// element type, a uint64 count and the elements. dims[0] is the innermost
// axis (a row's length): a PyTorch weight of shape (out, in) has dims
// [in, out].
//
// Everything is checked before anything is allocated: every length, count
// and offset against the bytes the file has left, dims against overflow,
// tensors' bytes against the data section, against each other (no overlap)
// and against the alignment, names and keys against duplicates. A file that
// fails is refused with one line naming it and the key or tensor at fault.
// Tensors of any type ggml defines are listed; read() dequantizes the types
// ggml_quants.hpp reads and refuses the others by name.
//
//   mha::GgufFile f("model-Q4_K_M.gguf");
//   std::string arch = f.get_string("general.architecture");
//   const mha::GgufTensor* t = f.find_tensor("blk.0.attn_q.weight");
//   std::vector<float> w(t->size());
//   f.read(t->name, w.data());  // C order: t->shape(), (out, in)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "mha/io/ggml_quants.hpp"

namespace mha {

// gguf_metadata_value_type: the numbers are the file's.
enum class GgufValueType : std::uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);  // "uint32", "bool", "string", ...

// One metadata value: a scalar (values holds one element) or an array of
// scalars of one type (nested arrays, which ggml refuses too, are refused).
struct GgufValue {
  GgufValueType type = GgufValueType::uint8;  // of the value, or of an array's elements
  bool is_array = false;
  // The vector of `type`'s C++ type, in the file's order.
  std::variant<std::vector<std::uint8_t>, std::vector<std::int8_t>, std::vector<std::uint16_t>,
               std::vector<std::int16_t>, std::vector<std::uint32_t>, std::vector<std::int32_t>,
               std::vector<float>, std::vector<bool>, std::vector<std::string>,
               std::vector<std::uint64_t>, std::vector<std::int64_t>, std::vector<double>>
      values;

  std::size_t size() const;      // elements (1 for a scalar)
  std::string describe() const;  // "uint32", "array of 3 string"
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<std::uint64_t> dims;  // as the file lists them: dims[0] is a row's length
  std::uint64_t offset = 0;         // from the data section's start
  std::uint64_t bytes = 0;          // stored bytes: blocks * the type's block bytes

  std::vector<std::size_t> shape() const;  // C order (dims reversed), as NumPy shows it
  std::size_t size() const;                // elements
  std::size_t row_size() const;            // dims[0] (1 for a 0-d tensor)
  std::size_t rows() const;                // the product of dims[1..]
};

// Whether `path` is a regular file that starts with GGUF's magic ("GGUF").
bool is_gguf_file(const std::string& path);

class GgufFile {
 public:
  // Reads and checks the header, the metadata and the tensor infos; throws
  // mha::Error (invalid_input) naming `path` on anything malformed.
  explicit GgufFile(std::string path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }  // of the data section, in the file

  // Metadata in the file's order; find() is null when the key is absent.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  // A scalar of the key; each throws (invalid_input) naming the file and the
  // key when it is absent or of another kind. get_u64 takes any integer type
  // holding a value >= 0, get_i64 any integer type that fits int64, get_f64
  // a finite float32 or float64 (NaN and infinities refused by the key).
  std::string get_string(const std::string& key) const;
  std::uint64_t get_u64(const std::string& key) const;
  std::int64_t get_i64(const std::string& key) const;
  double get_f64(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  // Arrays, likewise: of strings; of any integer type; of float32 or float64.
  std::vector<std::string> get_array_strings(const std::string& key) const;
  std::vector<std::int64_t> get_array_i64(const std::string& key) const;
  std::vector<double> get_array_f64(const std::string& key) const;

  // Tensors in the file's order; find_tensor() is null when absent.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;
  // The whole tensor (size() floats, C order), or rows [row0, row0 + rows)
  // of it (rows * row_size() floats): read with pread a bounded chunk at a
  // time and dequantized. Refuses, naming the tensor, a type mha does not
  // read or rows out of range.
  void read(const std::string& name, float* out) const;
  void read_rows(const std::string& name, std::size_t row0, std::size_t rows, float* out) const;

 private:
  const GgufTensor& tensor(const std::string& name) const;
  const GgufValue& value(const std::string& key, const char* expected) const;

  std::string path_;
  int fd_ = -1;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, std::size_t> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
};

}  // namespace mha
