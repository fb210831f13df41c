// Fuzz target for the .npy reader: mha::parse_npy on the input bytes, and
// mha::read_npy on the same bytes written to a scratch file. The two share
// their checks, so they must agree: both refuse with the same message, or both
// return the same array. Accepted arrays must pass check_array (size
// invariants, float conversion, re-encoding round trip).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "fuzz_common.hpp"
#include "mha/error.hpp"
#include "mha/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const mha_fuzz::ScratchFile scratch(".npy");
  const std::string& path = scratch.path();
  const std::string bytes(reinterpret_cast<const char*>(data), size);

  std::optional<mha::NpyArray> from_bytes, from_file;
  std::string bytes_error, file_error;
  try {
    from_bytes = mha::parse_npy(bytes, path);
  } catch (const mha::Error& e) {
    bytes_error = e.what();
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
  }

  mha_fuzz::write_file(path, data, size);
  try {
    from_file = mha::read_npy(path);
  } catch (const mha::Error& e) {
    file_error = e.what();
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
  }

  if (from_bytes.has_value() != from_file.has_value() || bytes_error != file_error) {
    std::fprintf(stderr, "parse_npy: %s\nread_npy:  %s\n",
                 from_bytes ? "accepted" : bytes_error.c_str(),
                 from_file ? "accepted" : file_error.c_str());
    FUZZ_CHECK(!"parse_npy and read_npy disagree");
  }
  if (!from_bytes) return 0;
  FUZZ_CHECK(mha_fuzz::same_array(*from_bytes, *from_file));
  mha_fuzz::check_array(*from_bytes, path);
  return 0;
}
