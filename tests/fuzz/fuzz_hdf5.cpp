// Fuzz target for the HDF5 reader and the Keras layouts on it: the input as an
// HDF5 file image (mha::Hdf5File, as a .keras member is opened), every object
// it lists described and every dataset read (after the reader's own checks of
// dtype, storage and declared size), then the input as a .weights.h5 file
// through mha::read_keras_weights. Every refusal is an input error in one
// line; whatever is read has as many bytes as its shape and dtype say, and
// no dataset has an empty dimension once a Keras layer's weights are taken.
// libhdf5 (Debian's 1.10, not instrumented) does the decoding; this target
// holds mha's side of it: bounds, links, sizes, messages.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/config/keras_file.hpp"
#include "mha/io/hdf5.hpp"

namespace {

void check_error(const mha::Error& e) {
  FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
  FUZZ_CHECK(std::strchr(e.what(), '\n') == nullptr);
}

void walk(const mha::Hdf5File& f, const std::string& group, int depth) {
  FUZZ_CHECK(depth <= mha::Hdf5File::kMaxDepth + 1);
  for (const std::string& child : f.children(group)) {
    const std::string path = group.empty() ? child : group + "/" + child;
    if (f.is_group(path)) {
      walk(f, path, depth + 1);
      continue;
    }
    if (!f.is_dataset(path)) continue;  // a named datatype
    const mha::Hdf5Dataset& d = f.dataset(path);
    try {
      const mha::NpyArray a = f.read(path);
      FUZZ_CHECK(d.dtype && a.dtype == *d.dtype && a.shape == d.shape);
      FUZZ_CHECK(a.data.size() == d.bytes);
    } catch (const mha::Error& e) {
      check_error(e);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto image = std::make_shared<const std::string>(reinterpret_cast<const char*>(data), size);
  try {
    const mha::Hdf5File f(image, "image.h5");
    walk(f, "", 0);
  } catch (const mha::Error& e) {
    check_error(e);
    FUZZ_CHECK(std::string(e.what()).rfind("image.h5", 0) == 0);  // names the file first
  }
  static const mha_fuzz::ScratchFile scratch(".weights.h5");
  mha_fuzz::write_file(scratch.path(), data, size);
  try {
    for (const auto& [name, a] :
         mha::read_keras_weights(scratch.path(), std::nullopt, std::uint64_t{64} << 20, {})) {
      FUZZ_CHECK(!name.empty());
      FUZZ_CHECK(std::find(a.shape.begin(), a.shape.end(), std::size_t{0}) == a.shape.end());
      mha_fuzz::check_array(a, name);
    }
  } catch (const mha::Error& e) {
    check_error(e);
  }
  return 0;
}
