// Fuzz target for the .safetensors reader: mha::parse_safetensors on the input
// bytes and mha::read_safetensors on the same bytes written to a scratch file
// must agree (the same message, or the same tensors); every error is
// invalid_input; an accepted file re-encodes (float tensors) to bytes that
// parse back to the same tensors.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/io/safetensors.hpp"

namespace {

bool same(const std::map<std::string, mha::NpyArray>& a,
          const std::map<std::string, mha::NpyArray>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, x] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.dtype != x.dtype || it->second.shape != x.shape ||
        it->second.data != x.data)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const mha_fuzz::ScratchFile scratch(".safetensors");
  const std::string& path = scratch.path();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::optional<std::map<std::string, mha::NpyArray>> from_bytes, from_file;
  std::string bytes_error, file_error;
  try {
    from_bytes = mha::parse_safetensors(bytes, path);
  } catch (const mha::Error& e) {
    bytes_error = e.what();
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
  }
  mha_fuzz::write_file(path, data, size);
  try {
    from_file = mha::read_safetensors(path);
  } catch (const mha::Error& e) {
    file_error = e.what();
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
  }
  FUZZ_CHECK(from_bytes.has_value() == from_file.has_value());
  if (!from_bytes) {
    FUZZ_CHECK(bytes_error == file_error);
    return 0;
  }
  FUZZ_CHECK(same(*from_bytes, *from_file));
  std::vector<std::pair<std::string, mha::NpyArray>> tensors(from_bytes->begin(),
                                                             from_bytes->end());
  FUZZ_CHECK(same(mha::parse_safetensors(mha::encode_safetensors(tensors), path), *from_bytes));
  return 0;
}
