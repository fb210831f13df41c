// Images read as 8-bit RGB: PNG through libpng, JPEG through libjpeg(-turbo),
// told apart by their first bytes. Bounded: the header's width x height is
// checked against kMaxImagePixels and the caller's byte limit before any
// pixel buffer is allocated, and a file that ends early is refused.
//
// What becomes RGB, as PIL's Image.convert("RGB") makes it: grey is
// repeated in the three channels, a palette is looked up, alpha (an alpha
// channel or a tRNS chunk) is dropped, not blended. 16-bit samples keep
// their high byte (PIL's unpacking of 16-bit RGB); grey of 1, 2 or 4 bits
// is scaled to 0..255 (1 bit: 0 or 255).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mha {

// 2^27 pixels (384 MiB as RGB): a 11585 x 11585 image.
constexpr std::uint64_t kMaxImagePixels = std::uint64_t{1} << 27;

struct RgbImage {
  std::size_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // (height, width, 3), C order
  std::string format;             // "png", "jpeg" or "array"
  // How the stored pixels became 8-bit RGB ("" when they were): e.g.
  // "16-bit RGBA: high bytes, alpha dropped".
  std::string converted;
};

// Throws mha::Error (invalid_input), one line naming `path`: not a PNG or
// JPEG, a header over kMaxImagePixels or whose pixels take more than
// `max_bytes` (3 bytes a pixel), corrupt or truncated data, CMYK JPEG.
RgbImage read_image(const std::string& path, std::uint64_t max_bytes);

}  // namespace mha
