#include "mha/io/image.hpp"

#include <png.h>
// jpeglib.h needs FILE and size_t declared first
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

#include <jpeglib.h>
// after jpeglib.h: the message codes (JWRN_JPEG_EOF)
#include <jerror.h>

#include "mha/base/error.hpp"

namespace mha {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

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
  if (pixels * 3 > max_bytes)
    fail_input(path + ": " + format + " of " + size_text(w, h) + " pixels needs " +
               std::to_string(pixels * 3) + " bytes as RGB, over max_memory (" +
               std::to_string(max_bytes) + " bytes)");
}

// ---- PNG ------------------------------------------------------------------

struct PngRead {
  std::FILE* file = nullptr;
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

// png_header and png_pixels hold no object with a destructor, so libpng's
// longjmp out of their calls skips no C++ cleanup; false with r.message.
bool png_header(PngRead& r, png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_init_io(png, r.file);
  png_set_sig_bytes(png, 8);
  png_read_info(png, info);
  int interlace = 0;
  png_get_IHDR(png, info, &r.width, &r.height, &r.depth, &r.color, &interlace, nullptr, nullptr);
  r.trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  return true;
}

bool png_pixels(PngRead& r, png_structp png, png_infop info, png_bytep* rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  if (r.depth == 16) png_set_strip_16(png);  // the high byte, as PIL unpacks 16-bit RGB
  if (r.color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (r.color == PNG_COLOR_TYPE_GRAY && r.depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if ((r.color & PNG_COLOR_MASK_ALPHA) || r.trns) png_set_strip_alpha(png);
  if (!(r.color & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != std::size_t{r.width} * 3) {
    std::snprintf(r.message, sizeof r.message, "rows of %zu bytes after conversion to RGB",
                  static_cast<std::size_t>(png_get_rowbytes(png, info)));
    return false;
  }
  png_read_image(png, rows);
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

RgbImage read_png(const std::string& path, std::FILE* file, std::uint64_t max_bytes) {
  PngRead r;
  r.file = file;
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
    if (std::feof(file))
      fail_input(path + ": truncated PNG (the file ends before its image data does)");
    fail_input(path + ": invalid PNG (libpng: " + r.message + ")");
  };
  if (!png_header(r, png, info)) failed();
  check_size(path, "PNG", r.width, r.height, max_bytes);
  RgbImage image;
  image.width = r.width;
  image.height = r.height;
  image.format = "png";
  image.converted = png_conversion(r);
  image.rgb.resize(image.width * image.height * 3);
  std::vector<png_bytep> rows(image.height);
  for (std::size_t y = 0; y < image.height; ++y) rows[y] = image.rgb.data() + y * image.width * 3;
  if (!png_pixels(r, png, info, rows.data())) failed();
  return image;
}

// ---- JPEG -----------------------------------------------------------------

struct JpegRead {
  jpeg_error_mgr manager;  // first: libjpeg's err pointer is this struct's address
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
  bool truncated = false;
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

// As png_header and png_pixels: no object with a destructor in these frames.
bool jpeg_header(JpegRead& r, jpeg_decompress_struct& cinfo, std::FILE* file) {
  if (setjmp(r.jump)) return false;
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, file);
  jpeg_read_header(&cinfo, TRUE);
  return true;
}

bool jpeg_pixels(JpegRead& r, jpeg_decompress_struct& cinfo, unsigned char* rgb) {
  if (setjmp(r.jump)) return false;
  cinfo.out_color_space = JCS_RGB;  // YCbCr converted, grey repeated
  jpeg_start_decompress(&cinfo);
  const std::size_t stride = std::size_t{cinfo.output_width} * 3;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = rgb + std::size_t{cinfo.output_scanline} * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

RgbImage read_jpeg(const std::string& path, std::FILE* file, std::uint64_t max_bytes) {
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
    if (r.truncated || std::feof(file))
      fail_input(path + ": truncated JPEG (the file ends before its image data does)");
    fail_input(path + ": invalid JPEG (libjpeg: " + r.message + ")");
  };
  const bool header = jpeg_header(r, cinfo, file);
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
  image.rgb.resize(image.width * image.height * 3);
  if (!jpeg_pixels(r, cinfo, image.rgb.data())) failed();
  if (cinfo.output_width != image.width || cinfo.output_height != image.height)
    fail_input(path + ": JPEG decoded to a size other than its header's");
  return image;
}

}  // namespace

RgbImage read_image(const std::string& path, std::uint64_t max_bytes) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) fail_input(path + ": cannot open (" + std::strerror(errno) + ")");
  unsigned char head[8] = {};
  const std::size_t n = std::fread(head, 1, sizeof head, file.get());
  if (n == 8 && png_sig_cmp(head, 0, 8) == 0) return read_png(path, file.get(), max_bytes);
  if (n >= 3 && head[0] == 0xFF && head[1] == 0xD8 && head[2] == 0xFF) {
    std::rewind(file.get());
    return read_jpeg(path, file.get(), max_bytes);
  }
  fail_input(path + ": not a PNG or JPEG file (by its first bytes); expected an image");
}

}  // namespace mha
