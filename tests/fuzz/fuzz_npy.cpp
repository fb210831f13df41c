// Fuzz target for the .npy reader: mha::parse_npy on the input bytes, and
// mha::read_npy on the same bytes written to a scratch file. The two share
// their checks, so they must agree: both refuse with the same message, or both
// return the same array; so must parse_npy_header, read_npy_header and
// mha::inspect_npy (which must also count every element it accepts). Accepted arrays must pass
// check_array (size invariants, float conversion, re-encoding round trip).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/inspect/inspect.hpp"
#include "mha/io/npy.hpp"

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
  // The header alone (mha inspect) makes the same checks, with the same
  // messages, and describes the array the readers return.
  const auto check_header = [&](auto&& read, const std::string& error) {
    std::string header_error;
    try {
      const mha::NpyHeaderInfo h = read();
      FUZZ_CHECK(from_bytes.has_value());
      FUZZ_CHECK(h.dtype == from_bytes->dtype && h.shape == from_bytes->shape);
      FUZZ_CHECK(h.data_bytes == from_bytes->data.size());
      FUZZ_CHECK(h.header_bytes + h.data_bytes == size);
    } catch (const mha::Error& e) {
      header_error = e.what();
    }
    FUZZ_CHECK(header_error == error);
  };
  check_header([&] { return mha::parse_npy_header(bytes, path); }, bytes_error);
  check_header([&] { return mha::read_npy_header(path); }, file_error);
  // mha inspect streams what read_npy accepts (small chunks, to cross rows
  // and chunk boundaries) and refuses the rest with read_npy's message.
  std::string inspect_error;
  try {
    mha::InspectOptions options;
    options.chunk_bytes = 24;
    const mha::InspectResult r = mha::inspect_npy(path, options);
    FUZZ_CHECK(from_file.has_value());
    FUZZ_CHECK(r.stats.count == from_file->size());
    FUZZ_CHECK(r.stats.finite + r.stats.nan + r.stats.posinf + r.stats.neginf == r.stats.count);
    (void)r.to_json().dump();
  } catch (const mha::Error& e) {
    inspect_error = e.what();
  }
  FUZZ_CHECK(inspect_error == file_error);

  if (!from_bytes) return 0;
  FUZZ_CHECK(mha_fuzz::same_array(*from_bytes, *from_file));
  mha_fuzz::check_array(*from_bytes, path);
  return 0;
}
