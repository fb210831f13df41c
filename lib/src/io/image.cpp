#include "mha/io/image.hpp"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>
// jpeglib.h needs FILE and size_t declared first
#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

#include <jpeglib.h>
// after jpeglib.h: the message codes (JWRN_JPEG_EOF)
#include <jerror.h>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/io/stream_input.hpp"

namespace mha {

namespace {

std::string size_text(std::uint64_t w, std::uint64_t h) {
  return std::to_string(w) + " x " + std::to_string(h);
}

// The header's size against the limits, before any pixel buffer exists.
void check_size(const std::string& path, const char* format, std::uint64_t w, std::uint64_t h,
                std::uint64_t max_bytes) {
  if (w == 0 || h == 0)
    fail_input(path + ": " + format + " of " + size_text(w, h) + " pixels; expected an image");
  const std::uint64_t pixels = w * h;  // each under 2^32: no wrap
  if (pixels > kMaxImagePixels)
    fail_input(path + ": " + format + " of " + size_text(w, h) + " pixels, over the " +
               std::to_string(kMaxImagePixels) + " pixels an image may have");
  if (w > kMaxImageSide || h > kMaxImageSide)
    fail_input(path + ": " + format + " of " + size_text(w, h) + " pixels, over the " +
               std::to_string(kMaxImageSide) + " pixels a side may have");
  if (pixels * 3 > max_bytes)
    fail_input(path + ": " + format + " of " + size_text(w, h) + " pixels needs " +
               std::to_string(pixels * 3) + " bytes as RGB, over max_memory (" +
               std::to_string(max_bytes) + " bytes)");
}

// ---- PNG ------------------------------------------------------------------

std::uint32_t be32(const unsigned char* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

// A chunk's type for a message: its four letters, anything else escaped.
std::string chunk_name(const unsigned char* type) {
  return echo(std::string(reinterpret_cast<const char*>(type), 4));
}

// The chunks from the signature to IEND, each length checked against the
// bytes after it before libpng sees it (libpng allocates an ancillary
// chunk's declared length before reading it: 2 GB for a 150-byte file); then
// IHDR's size against the limits. libpng checks the rest (CRCs, order).
void png_chunks(const unsigned char* data, std::size_t size, const std::string& path,
                std::uint64_t max_bytes) {
  std::size_t at = 8;  // after the signature
  for (bool first = true;; first = false) {
    if (size - at < 8)
      fail_input(path + ": truncated PNG (the file ends at byte " + std::to_string(size) +
                 ", before its IEND chunk)");
    const std::uint32_t length = be32(data + at);
    const unsigned char* type = data + at + 4;
    if (length > 0x7fffffffu)
      fail_input(path + ": invalid PNG: chunk " + chunk_name(type) + " at byte " +
                 std::to_string(at) + " declares " + std::to_string(length) +
                 " bytes, over the 2^31 - 1 a chunk may hold");
    if (length > size - at - 8 || size - at - 8 - length < 4)
      fail_input(path + ": truncated PNG: chunk " + chunk_name(type) + " at byte " +
                 std::to_string(at) + " declares " + std::to_string(length) +
                 " bytes, but the file ends " + std::to_string(size - at - 8) + " bytes after " +
                 "its header");
    if (first) {
      if (std::memcmp(type, "IHDR", 4) != 0 || length != 13)
        fail_input(path + ": invalid PNG: its first chunk is " + chunk_name(type) + " of " +
                   std::to_string(length) + " bytes; expected IHDR of 13");
      check_size(path, "PNG", be32(data + at + 8), be32(data + at + 12), max_bytes);
    }
    at += std::size_t{length} + 12;
    if (std::memcmp(type, "IEND", 4) == 0) return;
  }
}

struct PngRead {
  const unsigned char* data = nullptr;
  std::size_t size = 0, at = 0;
  bool ended = false;  // libpng asked for bytes past the end
  char message[256] = "";
  png_uint_32 width = 0, height = 0;
  int depth = 0, color = 0;
  bool trns = false;
};

// libpng's error handler must not return: record the message, then jump back
// to the setjmp of png_header or png_pixels.
void png_on_error(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", message);
  png_longjmp(png, 1);
}
void png_on_warning(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep out, std::size_t n) {
  auto* r = static_cast<PngRead*>(png_get_io_ptr(png));
  if (n > r->size - r->at) {
    r->ended = true;
    png_error(png, "the file ends");
  }
  std::memcpy(out, r->data + r->at, n);
  r->at += n;
}

// png_header and png_pixels hold no object with a destructor, so libpng's
// longjmp out of their calls skips no C++ cleanup; false with r.message.
bool png_header(PngRead& r, png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, &r, png_read_bytes);
  png_set_sig_bytes(png, 8);
  r.at = 8;
  // No chunk it stores may be longer than the file; and the chunks that no
  // conversion below reads (text, ICC profiles, EXIF, gamma...) are skipped
  // unread: their (compressed) contents cannot cost memory.
  png_set_chunk_malloc_max(png, r.size);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_read_info(png, info);
  int interlace = 0;
  png_get_IHDR(png, info, &r.width, &r.height, &r.depth, &r.color, &interlace, nullptr, nullptr);
  r.trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  return true;
}

bool png_pixels(PngRead& r, png_structp png, png_infop info, unsigned char* rgb) {
  if (setjmp(png_jmpbuf(png))) return false;
  if (r.depth == 16) png_set_strip_16(png);  // the high byte, as PIL unpacks 16-bit RGB
  if (r.color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (r.color == PNG_COLOR_TYPE_GRAY && r.depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if ((r.color & PNG_COLOR_MASK_ALPHA) || r.trns) png_set_strip_alpha(png);
  if (!(r.color & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t stride = std::size_t{r.width} * 3;
  if (png_get_rowbytes(png, info) != stride) {
    std::snprintf(r.message, sizeof r.message, "rows of %zu bytes after conversion to RGB",
                  static_cast<std::size_t>(png_get_rowbytes(png, info)));
    return false;
  }
  // png_read_image's loop, without its array of row pointers (8 bytes a row)
  for (int pass = 0; pass < passes; ++pass)
    for (png_uint_32 y = 0; y < r.height; ++y) png_read_row(png, rgb + y * stride, nullptr);
  png_read_end(png, nullptr);  // the chunks after the image, up to IEND, checked
  return true;
}

std::string png_conversion(const PngRead& r) {
  std::string kind;
  switch (r.color) {
    case PNG_COLOR_TYPE_GRAY:
      kind = "grey";
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      kind = "grey+alpha";
      break;
    case PNG_COLOR_TYPE_PALETTE:
      kind = "palette";
      break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      kind = "RGBA";
      break;
    default:
      kind = "RGB";
  }
  std::string out;
  if (r.depth != 8 && r.color != PNG_COLOR_TYPE_PALETTE)
    out = std::to_string(r.depth) + "-bit " + kind +
          (r.depth == 16 ? ": high bytes" : ": scaled to 8 bits");
  else if (r.color != PNG_COLOR_TYPE_RGB)
    out = kind;
  if (r.color == PNG_COLOR_TYPE_PALETTE) out += ": looked up";
  if (!(r.color & PNG_COLOR_MASK_COLOR)) out += ", repeated in R, G, B";
  if ((r.color & PNG_COLOR_MASK_ALPHA) || r.trns)
    out += (r.color & PNG_COLOR_MASK_ALPHA) ? ", alpha dropped" : ", tRNS transparency dropped";
  return out;
}

RgbImage decode_png(const unsigned char* data, std::size_t size, const std::string& path,
                    std::uint64_t max_bytes) {
  png_chunks(data, size, path, max_bytes);
  PngRead r;
  r.data = data;
  r.size = size;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    fail_runtime(path + ": libpng could not start (out of memory?)");
  }
  struct Destroy {
    png_structp& png;
    png_infop& info;
    ~Destroy() { png_destroy_read_struct(&png, &info, nullptr); }
  } destroy{png, info};
  auto failed = [&]() {
    if (r.ended) fail_input(path + ": truncated PNG (the file ends before its image data does)");
    fail_input(path + ": invalid PNG (libpng: " + r.message + ")");
  };
  if (!png_header(r, png, info)) failed();
  check_size(path, "PNG", r.width, r.height, max_bytes);  // as png_chunks read it
  RgbImage image;
  image.width = r.width;
  image.height = r.height;
  image.format = "png";
  image.converted = png_conversion(r);
  image.rgb.resize(image.width * image.height * 3);
  if (!png_pixels(r, png, info, image.rgb.data())) failed();
  return image;
}

// ---- JPEG -----------------------------------------------------------------

struct JpegRead {
  jpeg_error_mgr manager;  // first: libjpeg's err pointer is this struct's address
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
  bool truncated = false, too_many_scans = false;
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* r = reinterpret_cast<JpegRead*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, r->message);
  std::longjmp(r->jump, 1);
}
// A file that ends early is only a warning to libjpeg (it fills the rest with
// grey); PIL refuses it ("image file is truncated"), and so does this.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  auto* r = reinterpret_cast<JpegRead*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    r->truncated = true;
    std::longjmp(r->jump, 1);
  }
}
// Called as libjpeg reads on, also at each new scan (as djpeg -maxscans counts them).
void jpeg_on_progress(j_common_ptr cinfo) {
  auto* r = reinterpret_cast<JpegRead*>(cinfo->err);
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  const std::uint64_t pixels = std::uint64_t{d->image_width} * d->image_height;
  if (static_cast<std::uint64_t>(d->input_scan_number) > max_jpeg_scans(pixels)) {
    r->too_many_scans = true;
    std::longjmp(r->jump, 1);
  }
}

// As png_header and png_pixels: no object with a destructor in these frames.
bool jpeg_header(JpegRead& r, jpeg_decompress_struct& cinfo, const unsigned char* data,
                 std::size_t size) {
  if (setjmp(r.jump)) return false;
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  return true;
}

// A progressive JPEG is read whole here, every scan (into libjpeg's buffers).
bool jpeg_start(JpegRead& r, jpeg_decompress_struct& cinfo) {
  if (setjmp(r.jump)) return false;
  cinfo.out_color_space = JCS_RGB;  // YCbCr converted, grey repeated
  jpeg_start_decompress(&cinfo);
  return true;
}

bool jpeg_pixels(JpegRead& r, jpeg_decompress_struct& cinfo, unsigned char* rgb) {
  if (setjmp(r.jump)) return false;
  const std::size_t stride = std::size_t{cinfo.output_width} * 3;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = rgb + std::size_t{cinfo.output_scanline} * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

RgbImage decode_jpeg(const unsigned char* data, std::size_t size, const std::string& path,
                     std::uint64_t max_bytes) {
  JpegRead r;
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&r.manager);
  r.manager.error_exit = jpeg_on_error;
  r.manager.emit_message = jpeg_on_message;
  struct Destroy {
    jpeg_decompress_struct& cinfo;
    ~Destroy() { jpeg_destroy_decompress(&cinfo); }
  };
  std::unique_ptr<Destroy> destroy;
  auto failed = [&]() {
    if (r.truncated)
      fail_input(path + ": truncated JPEG (the file ends before its image data does)");
    if (r.too_many_scans)
      fail_input(
          path + ": a progressive JPEG of more than " +
          std::to_string(max_jpeg_scans(std::uint64_t{cinfo.image_width} * cinfo.image_height)) +
          " scans, the most one of " + size_text(cinfo.image_width, cinfo.image_height) +
          " pixels may have (" + std::to_string(kMaxJpegScans) + ", and 2^30 pixels " +
          "decoded across its scans)");
    if (r.manager.msg_code == JERR_NO_BACKING_STORE)
      fail_input(path + ": decoding this " + (cinfo.progressive_mode ? "progressive " : "") +
                 "JPEG needs more than max_memory (" + std::to_string(max_bytes) +
                 " bytes) of working memory");
    fail_input(path + ": invalid JPEG (libjpeg: " + r.message + ")");
  };
  const bool header = jpeg_header(r, cinfo, data, size);
  destroy.reset(new Destroy{cinfo});  // jpeg_create_decompress ran (it cannot fail but on memory)
  if (!header) failed();
  check_size(path, "JPEG", cinfo.image_width, cinfo.image_height, max_bytes);
  RgbImage image;
  image.format = "jpeg";
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK)
    fail_input(path + ": a CMYK JPEG; expected RGB (YCbCr) or greyscale");
  if (cinfo.jpeg_color_space == JCS_GRAYSCALE) image.converted = "grey, repeated in R, G, B";
  image.width = cinfo.image_width;
  image.height = cinfo.image_height;
  // libjpeg's own buffers (a progressive JPEG keeps every coefficient of the
  // image: 2 bytes a sample) within the same limit: past it, libjpeg would
  // need a backing store, which it refuses.
  cinfo.mem->max_memory_to_use = static_cast<long>(max_bytes);
  r.progress.progress_monitor = jpeg_on_progress;
  cinfo.progress = &r.progress;
  if (!jpeg_start(r, cinfo)) failed();
  image.rgb.resize(image.width * image.height * 3);  // once libjpeg has what it needs
  if (!jpeg_pixels(r, cinfo, image.rgb.data())) failed();
  if (cinfo.output_width != image.width || cinfo.output_height != image.height)
    fail_input(path + ": JPEG decoded to a size other than its header's");
  return image;
}

bool is_png(const unsigned char* data, std::size_t size) {
  return size >= 8 && png_sig_cmp(data, 0, 8) == 0;
}
bool is_jpeg(const unsigned char* data, std::size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

[[noreturn]] void not_an_image(const std::string& path) {
  fail_input(path + ": not a PNG or JPEG file (by its first bytes); expected an image");
}

std::string too_large(const std::string& path, std::uint64_t bytes, std::uint64_t max_bytes) {
  return path + ": a file of " + std::to_string(bytes) + " bytes, over the " +
         std::to_string(max_bytes) +
         " an image file may have (it is held in memory to be decoded: at most max_memory and "
         "384 MiB)";
}

// A regular file, whole, from one descriptor: its size (fstat) checked
// against the limit before it is read.
std::string read_regular(const std::string& path, std::uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_input(path + ": cannot open (" + std::strerror(errno) + ")");
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_input(path + ": cannot read (" + std::strerror(errno) + ")");
  if (S_ISDIR(st.st_mode)) fail_input(path + ": is a directory; expected a PNG or JPEG file");
  const auto bytes = static_cast<std::uint64_t>(st.st_size);
  if (bytes > max_bytes) fail_input(too_large(path, bytes, max_bytes));
  std::string data(static_cast<std::size_t>(bytes), '\0');
  std::size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::read(fd, &data[got], data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_input(path + ": cannot read (" + std::strerror(errno) + ")");
    if (n == 0) break;  // shrunk since fstat
    got += static_cast<std::size_t>(n);
  }
  data.resize(got);
  return data;
}

}  // namespace

RgbImage decode_image(const unsigned char* data, std::size_t size, const std::string& name,
                      std::uint64_t max_bytes) {
  if (is_png(data, size)) return decode_png(data, size, name, max_bytes);
  if (is_jpeg(data, size)) return decode_jpeg(data, size, name, max_bytes);
  not_an_image(name);
}

RgbImage read_image(const std::string& path, std::uint64_t max_bytes, FileChecksum* file) {
  std::string regular;
  const std::string* bytes = &regular;
  if (is_stream_input(path)) {
    // A FIFO or /dev/fd/N: read once, refused as soon as its first bytes are
    // not an image's or it passes the limit.
    bytes = &stream_input_bytes(path, [&](const std::string& so_far) -> std::uint64_t {
      const auto* p = reinterpret_cast<const unsigned char*>(so_far.data());
      if (so_far.size() >= 8 && !is_png(p, so_far.size()) && !is_jpeg(p, so_far.size()))
        not_an_image(path);
      if (so_far.size() > max_bytes)
        fail_input(path + ": a pipe or device of more than " + std::to_string(max_bytes) +
                   " bytes, the most an image file may have (it is held in memory to be "
                   "decoded: at most max_memory and 384 MiB)");
      return 0;
    });
  } else {
    regular = read_regular(path, max_bytes);
  }
  if (bytes->size() > max_bytes) fail_input(too_large(path, bytes->size(), max_bytes));
  if (file) {
    file->bytes = bytes->size();
    file->crc32 = crc32_update(0, bytes->data(), bytes->size());
  }
  return decode_image(reinterpret_cast<const unsigned char*>(bytes->data()), bytes->size(), path,
                      max_bytes);
}

}  // namespace mha
