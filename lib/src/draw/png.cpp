#include "mha/draw/png.hpp"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <vector>

#include "mha/base/error.hpp"

namespace mha {
namespace {

struct PngContext {
  std::ostream* out = nullptr;
  char message[256] = "";
};

// libpng's error handler must not return: after recording the message, jump
// back to the setjmp in encode().
void on_error(png_structp png, png_const_charp message) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof ctx->message, "%s", message);
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}
void on_write(png_structp png, png_bytep data, std::size_t size) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  ctx->out->write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}
void on_flush(png_structp png) {
  static_cast<PngContext*>(png_get_io_ptr(png))->out->flush();
}

// Holds no object with a destructor, so libpng's longjmp out of any of the
// calls below skips no C++ cleanup; false with ctx.message on failure.
bool encode(PngContext& ctx, const Image& image, png_bytep* rows) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &ctx, on_error, on_warning);
  if (!png) {
    std::snprintf(ctx.message, sizeof ctx.message, "libpng could not start (out of memory?)");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(ctx.message, sizeof ctx.message, "out of memory");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, &ctx, on_write, on_flush);
  // Heatmaps are runs of one color repeated row after row, which deflate
  // finds by itself; PNG's prediction filters only blur them. A 4096-token
  // plot of 8 heads takes 3.3 MB with libpng's adaptive filters at zlib level
  // 6, and 2.6 MB unfiltered at level 3, in a third of the time (0.25 s).
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
  png_set_compression_level(png, 3);
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width()),
               static_cast<png_uint_32>(image.height()), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  char key[] = "Software", text[] = "mha " MHA_VERSION;
  png_text chunk{};
  chunk.compression = PNG_TEXT_COMPRESSION_NONE;
  chunk.key = key;
  chunk.text = text;
  png_set_text(png, info, &chunk, 1);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

void write_png(std::ostream& out, const Image& image, const std::string& name) {
  if (image.width() < 1 || image.height() < 1)
    fail_runtime(name + ": cannot encode an empty " + std::to_string(image.width()) + "x" +
                 std::to_string(image.height()) + " image as PNG");
  // libpng takes row pointers; it never writes through them.
  std::vector<png_bytep> rows(static_cast<std::size_t>(image.height()));
  for (int y = 0; y < image.height(); ++y) rows[y] = const_cast<png_bytep>(image.row(y));
  PngContext ctx;
  ctx.out = &out;
  if (!encode(ctx, image, rows.data()))
    fail_runtime(name + ": PNG encoding failed: " + ctx.message);
}

}  // namespace mha
