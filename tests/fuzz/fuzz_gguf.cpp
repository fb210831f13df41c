// Fuzz target for the GGUF reader: mha::GgufFile on the input bytes written
// to a scratch file. Every error is invalid_input in one line; an accepted
// file keeps its promises: version 2 or 3, a power-of-two alignment, every
// tensor's bytes aligned, inside the data section and apart from the others,
// find() and find_tensor() agreeing with the lists, the typed getters either
// answering or refusing with invalid_input; every tensor of a type mha reads
// is read whole (bounded: its bytes are in the file) and row by row, the rows
// equal to the whole bit for bit; the others are refused by name. The file is
// then opened as a checkpoint (mha::Checkpoint), which refuses it or accepts
// no more blocks than tensors and only finite float metadata.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/checkpoint/checkpoint.hpp"
#include "mha/io/gguf.hpp"

namespace {

template <class F>
void answers_or_refuses(F&& f) {
  try {
    f();
  } catch (const mha::Error& e) {
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
    FUZZ_CHECK(std::strchr(e.what(), '\n') == nullptr);
  }
}

void check(const mha::GgufFile& f, std::uint64_t file_size) {
  FUZZ_CHECK(f.version() == 2 || f.version() == 3);
  const std::uint64_t a = f.alignment();
  FUZZ_CHECK(a != 0 && (a & (a - 1)) == 0);
  FUZZ_CHECK(f.data_offset() <= file_size);

  for (const auto& entry : f.metadata()) {
    const std::string& key = entry.first;  // not a structured binding: lambdas capture it
    const mha::GgufValue& v = entry.second;
    FUZZ_CHECK(f.find(key) == &v);
    FUZZ_CHECK(v.is_array || v.size() == 1);
    FUZZ_CHECK(v.type != mha::GgufValueType::array);
    FUZZ_CHECK(!v.describe().empty());
    answers_or_refuses([&] { f.get_string(key); });
    answers_or_refuses([&] { f.get_u64(key); });
    answers_or_refuses([&] { f.get_i64(key); });
    answers_or_refuses([&] { f.get_f64(key); });
    answers_or_refuses([&] { f.get_bool(key); });
    answers_or_refuses([&] { f.get_array_strings(key); });
    answers_or_refuses([&] { f.get_array_i64(key); });
    answers_or_refuses([&] { f.get_array_f64(key); });
  }

  const std::uint64_t data_bytes = file_size - f.data_offset();
  for (const mha::GgufTensor& t : f.tensors()) {
    FUZZ_CHECK(f.find_tensor(t.name) == &t);
    FUZZ_CHECK(f.data_offset() % a == 0);
    FUZZ_CHECK(t.offset % a == 0);
    FUZZ_CHECK(t.offset <= data_bytes && t.bytes <= data_bytes - t.offset);
    FUZZ_CHECK(t.dims.size() <= 4);
    const mha::GgmlTypeInfo& type = mha::ggml_type_info(t.type);
    FUZZ_CHECK(t.row_size() % type.block_elements == 0);
    FUZZ_CHECK(t.bytes == t.size() / type.block_elements * type.block_bytes);
    FUZZ_CHECK(t.size() == t.rows() * t.row_size());
    for (const mha::GgufTensor& u : f.tensors())
      FUZZ_CHECK(&u == &t || t.bytes == 0 || u.bytes == 0 || t.offset + t.bytes <= u.offset ||
                 u.offset + u.bytes <= t.offset);

    if (!type.dequantized) {
      bool refused = false;
      try {
        f.read(t.name, nullptr);  // refused before anything is written
      } catch (const mha::Error& e) {
        refused = e.kind() == mha::ErrorKind::invalid_input &&
                  std::string(e.what()).find("which mha does not read") != std::string::npos;
      }
      FUZZ_CHECK(refused);
      continue;
    }
    std::vector<float> whole(t.size());  // bounded: t.bytes are in the file
    f.read(t.name, whole.data());
    if (t.size() == 0 || t.rows() > 64) continue;  // rows of an empty tensor may be long
    std::vector<float> row(t.row_size());
    for (std::size_t r = 0; r < t.rows(); ++r) {
      f.read_rows(t.name, r, 1, row.data());
      FUZZ_CHECK(row.empty() || std::memcmp(row.data(), whole.data() + r * row.size(),
                                            row.size() * sizeof(float)) == 0);
    }
  }
}

// The file as a checkpoint (gguf_source.cpp: config.json rebuilt from the metadata, tensors
// checked by name and shape; no weights read). Refused as an input error, or accepted with
// no more blocks than tensors and every float metadata key of its architecture finite (NaN
// once became JSON null, the key's default).
void check_checkpoint(const std::string& path, const mha::GgufFile& f) {
  std::unique_ptr<mha::Checkpoint> c;
  try {
    c = std::make_unique<mha::Checkpoint>(path);
  } catch (const mha::Error& e) {
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
    FUZZ_CHECK(std::strchr(e.what(), '\n') == nullptr);
    return;
  }
  FUZZ_CHECK(c->gguf());
  FUZZ_CHECK(c->config().num_layers > 0 && c->config().num_layers <= f.tensors().size());
  const std::string arch = c->gguf_architecture() + ".";
  for (const auto& [key, v] : f.metadata())
    if (key.compare(0, arch.size(), arch) == 0 && !v.is_array &&
        (v.type == mha::GgufValueType::float32 || v.type == mha::GgufValueType::float64)) {
      const double x = v.type == mha::GgufValueType::float32
                           ? std::get<std::vector<float>>(v.values)[0]
                           : std::get<std::vector<double>>(v.values)[0];
      FUZZ_CHECK(std::isfinite(x));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const mha_fuzz::ScratchFile scratch(".gguf");
  const std::string& path = scratch.path();
  mha_fuzz::write_file(path, data, size);
  std::unique_ptr<mha::GgufFile> f;
  try {
    f = std::make_unique<mha::GgufFile>(path);
  } catch (const mha::Error& e) {
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
    FUZZ_CHECK(std::strchr(e.what(), '\n') == nullptr);
    FUZZ_CHECK(std::string(e.what()).rfind(path + ": ", 0) == 0);  // names the file first
    return 0;
  }
  check(*f, size);  // an accepted file reads without an error
  check_checkpoint(path, *f);
  return 0;
}
