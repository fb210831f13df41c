// Images read as 8-bit RGB: PNG through libpng, JPEG through libjpeg(-turbo),
// told apart by their first bytes. Bounded: the file is read once, whole (a
// regular file of at most the caller's byte limit, or a pipe through
// stream_input.hpp, capped the same way while it is read), and decoded from
// memory; every PNG chunk's length is checked against the bytes after it and
// the header's width x height against kMaxImagePixels and the byte limit
// before libpng or libjpeg allocates anything; libjpeg's working memory (a
// progressive JPEG's coefficients) is held to the byte limit and its scans to
// max_jpeg_scans; a file that ends early is refused.
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

#include "mha/io/checksum.hpp"

namespace mha {

// 2^27 pixels (384 MiB as RGB): a 11585 x 11585 image.
constexpr std::uint64_t kMaxImagePixels = std::uint64_t{1} << 27;
// The longest side (libpng's default limit; a JPEG's sides stop at 65500).
constexpr std::uint64_t kMaxImageSide = 1000000;
// Scans of a progressive JPEG (encoders write about 10): each one passes over
// the whole image, so a small file of thousands of scans takes minutes. At
// most kMaxJpegScans, and at most kMaxJpegScanPixels pixels across the scans
// (64 scans of a 4096 x 4096 image).
constexpr std::uint64_t kMaxJpegScans = 1000;
constexpr std::uint64_t kMaxJpegScanPixels = std::uint64_t{1} << 30;
// The scans a JPEG of `pixels` pixels may have.
constexpr std::uint64_t max_jpeg_scans(std::uint64_t pixels) {
  return pixels == 0 || kMaxJpegScanPixels / pixels >= kMaxJpegScans
             ? kMaxJpegScans
             : (kMaxJpegScanPixels / pixels > 0 ? kMaxJpegScanPixels / pixels : 1);
}

struct RgbImage {
  std::size_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // (height, width, 3), C order
  std::string format;             // "png", "jpeg" or "array"
  // How the stored pixels became 8-bit RGB ("" when they were): e.g.
  // "16-bit RGBA: high bytes, alpha dropped".
  std::string converted;
};

// Throws mha::Error (invalid_input), one line naming `path`: a file over
// `max_bytes`, not a PNG or JPEG, a chunk longer than the bytes after it, a
// header over kMaxImagePixels or kMaxImageSide or whose pixels take more than
// `max_bytes` (3 bytes a pixel), corrupt or truncated data, CMYK JPEG. The
// path is opened once (a FIFO is read once); `file`, when given, receives the
// size and CRC-32 of the bytes read (run.json records them).
RgbImage read_image(const std::string& path, std::uint64_t max_bytes, FileChecksum* file = nullptr);

// The same from `size` bytes in memory; `name` stands for the file in messages.
RgbImage decode_image(const unsigned char* data, std::size_t size, const std::string& name,
                      std::uint64_t max_bytes);

}  // namespace mha
