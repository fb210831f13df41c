// Fuzz target for the .npz reader. mha::read_npz only takes a path (and
// lib/src/npz.cpp is not ours to change), so the input is written to a
// scratch file first. Every array it returns must pass check_array, and the
// archive must survive a round trip: write_npz of what was read, read back,
// gives the same arrays under the same names.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/npz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const mha_fuzz::ScratchFile scratch(".npz");
  static const mha_fuzz::ScratchFile rewritten(".rewritten.npz");

  mha_fuzz::write_file(scratch.path(), data, size);
  std::map<std::string, mha::NpyArray> arrays;
  try {
    arrays = mha::read_npz(scratch.path());
  } catch (const mha::Error& e) {
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
    return 0;
  }

  for (const auto& [name, array] : arrays) mha_fuzz::check_array(array, name);

  // Anything read_npz accepts, write_npz must be able to write, and reading
  // that gives the same map. Failures here throw out of the target: a bug.
  const std::vector<std::pair<std::string, mha::NpyArray>> members(arrays.begin(), arrays.end());
  mha::write_npz(rewritten.path(), members);
  const auto back = mha::read_npz(rewritten.path());
  FUZZ_CHECK(back.size() == arrays.size());
  for (const auto& [name, array] : arrays) {
    const auto it = back.find(name);
    FUZZ_CHECK(it != back.end());
    FUZZ_CHECK(mha_fuzz::same_array(array, it->second));
  }
  return 0;
}
