// Fuzz target for the image reader (PNG through libpng, JPEG through libjpeg):
// mha::decode_image on the input bytes and mha::read_image on the same bytes
// in a scratch file must agree (the same pixels, or the same message). Every
// refusal is invalid_input in one line; an accepted image has its promised
// size (at least 1 x 1, within kMaxImagePixels, kMaxImageSide and the 4 MiB
// limit given here) and goes through a resize and a centre crop. The limit
// keeps each input cheap; the regressions (tests/fuzz/regressions/image)
// declare 2^31 - 1-byte chunks, huge IHDRs, a 65535 x 65535 SOF.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/checkpoint/image_processor.hpp"
#include "mha/io/image.hpp"

namespace {

constexpr std::uint64_t kLimit = std::uint64_t{4} << 20;

using mha_fuzz::check_message;

void check_image(const mha::RgbImage& im) {
  FUZZ_CHECK(im.width >= 1 && im.height >= 1);
  FUZZ_CHECK(im.width <= mha::kMaxImageSide && im.height <= mha::kMaxImageSide);
  FUZZ_CHECK(std::uint64_t{im.width} * im.height <= mha::kMaxImagePixels);
  FUZZ_CHECK(std::uint64_t{im.width} * im.height * 3 <= kLimit);
  FUZZ_CHECK(im.rgb.size() == im.width * im.height * 3);
  FUZZ_CHECK(im.format == "png" || im.format == "jpeg");
  const mha::RgbImage small = mha::resize_image(im, 7, 5, 2);
  FUZZ_CHECK(small.width == 7 && small.height == 5 && small.rgb.size() == 7 * 5 * 3);
  const mha::RgbImage crop = mha::center_crop(im, 4, 4);
  FUZZ_CHECK(crop.width == 4 && crop.height == 4 && crop.rgb.size() == 4 * 4 * 3);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const mha_fuzz::ScratchFile scratch(".img");
  const std::string& name = scratch.path();
  mha::RgbImage from_memory, from_file;
  std::string memory_error, file_error;
  try {
    from_memory = mha::decode_image(data, size, name, kLimit);
    check_image(from_memory);
  } catch (const mha::Error& e) {
    check_message(e);
    memory_error = e.what();
  }
  mha_fuzz::write_file(name, data, size);
  try {
    mha::FileChecksum file;
    from_file = mha::read_image(name, kLimit, &file);
    FUZZ_CHECK(file.bytes == size);
  } catch (const mha::Error& e) {
    check_message(e);
    file_error = e.what();
  }
  FUZZ_CHECK(memory_error == file_error);
  FUZZ_CHECK(from_memory.width == from_file.width && from_memory.height == from_file.height);
  FUZZ_CHECK(from_memory.rgb == from_file.rgb && from_memory.converted == from_file.converted);
  return 0;
}
