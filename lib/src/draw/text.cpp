#include "mha/draw/text.hpp"

#include <ft2build.h>
#include FT_FREETYPE_H

#include <mutex>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/base/shared_library.hpp"

#ifndef MHA_FREETYPE_SONAME
#define MHA_FREETYPE_SONAME "libfreetype.so.6"
#endif

namespace mha {
namespace {

// UTF-8 to code points; a malformed or overlong sequence becomes U+FFFD.
std::vector<char32_t> decode_utf8(const std::string& s) {
  std::vector<char32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    char32_t cp = extra == 0 ? c : extra == 1 ? c & 0x1f : extra == 2 ? c & 0x0f : c & 0x07;
    bool ok = extra >= 0 && i + static_cast<std::size_t>(extra) < s.size();
    for (int k = 1; ok && k <= extra; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    static const char32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (!ok || cp < kMin[extra < 0 ? 0 : extra] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) {
      out.push_back(0xfffd);
      ++i;  // resynchronise on the next byte
      continue;
    }
    out.push_back(cp);
    i += 1 + extra;
  }
  return out;
}

// FreeType, loaded when the first text is drawn rather than linked
// (mha/base/shared_library.hpp says why): the functions this file calls, with
// FreeType's names and types.
#define MHA_FREETYPE_FUNCTIONS(X) \
  X(FT_Init_FreeType)             \
  X(FT_New_Memory_Face)           \
  X(FT_Set_Pixel_Sizes)           \
  X(FT_Get_Char_Index)            \
  X(FT_Get_Kerning)               \
  X(FT_Load_Glyph)                \
  X(FT_Done_Face)                 \
  X(FT_Done_FreeType)

struct FreeType {
#define MHA_FREETYPE_MEMBER(name) decltype(&::name) name = nullptr;
  MHA_FREETYPE_FUNCTIONS(MHA_FREETYPE_MEMBER)
#undef MHA_FREETYPE_MEMBER

  FreeType() {
    const SharedLibrary library(
        MHA_FREETYPE_SONAME, "FreeType",
        "plot text needs Debian's libfreetype6 (scripts/setup.sh installs it)");
#define MHA_FREETYPE_BIND(name) library.bind(this->name, #name);
    MHA_FREETYPE_FUNCTIONS(MHA_FREETYPE_BIND)
#undef MHA_FREETYPE_BIND
  }
};

// One FreeType library and face for the process; FreeType objects are not
// thread-safe, so every use holds the mutex.
class Font {
 public:
  static Font& get() {
    static Font font;
    return font;
  }
  std::mutex mutex;

  // Sets the pixel size once per call site; cheap when unchanged.
  void set_size(int px) {
    if (px == size_) return;
    check(ft_.FT_Set_Pixel_Sizes(face_, 0, static_cast<FT_UInt>(px < 1 ? 1 : px)), "set size");
    size_ = px;
  }
  FT_Face face() const { return face_; }
  int ascent() const { return static_cast<int>((face_->size->metrics.ascender + 63) >> 6); }
  int descent() const { return static_cast<int>((-face_->size->metrics.descender + 63) >> 6); }

  // Walks the glyphs of `text`: calls f(slot, pen_x) for each, pen_x being
  // the glyph origin in pixels; returns the total advance in pixels.
  template <class F>
  int layout(const std::vector<char32_t>& text, bool render, F&& f) {
    FT_Pos pen = 0;  // 26.6 fixed point
    FT_UInt previous = 0;
    const bool kerning = FT_HAS_KERNING(face_);
    for (char32_t cp : text) {
      const FT_UInt glyph = ft_.FT_Get_Char_Index(face_, cp);
      if (kerning && previous && glyph) {
        FT_Vector delta{};
        ft_.FT_Get_Kerning(face_, previous, glyph, FT_KERNING_DEFAULT, &delta);
        pen += delta.x;
      }
      check(ft_.FT_Load_Glyph(face_, glyph, FT_LOAD_TARGET_LIGHT | (render ? FT_LOAD_RENDER : 0)),
            "load glyph");
      f(face_->glyph, static_cast<int>((pen + 32) >> 6));
      pen += face_->glyph->advance.x;
      previous = glyph;
    }
    return static_cast<int>((pen + 63) >> 6);
  }

 private:
  Font() {
    check(ft_.FT_Init_FreeType(&library_), "initialise FreeType");
    check(ft_.FT_New_Memory_Face(library_, embedded_font_data(),
                                 static_cast<FT_Long>(embedded_font_size()), 0, &face_),
          "open the embedded DejaVu Sans");
  }
  ~Font() {
    if (face_) ft_.FT_Done_Face(face_);
    if (library_) ft_.FT_Done_FreeType(library_);
  }
  static void check(FT_Error error, const char* what) {
    if (error)
      fail_runtime(std::string("text: FreeType could not ") + what + " (error " +
                   std::to_string(error) + ")");
  }
  FreeType ft_;
  FT_Library library_ = nullptr;
  FT_Face face_ = nullptr;
  int size_ = 0;
};

}  // namespace

TextBox measure_text(const std::string& utf8, int px) {
  Font& font = Font::get();
  std::lock_guard<std::mutex> lock(font.mutex);
  font.set_size(px);
  TextBox box;
  box.width = font.layout(decode_utf8(utf8), false, [](FT_GlyphSlot, int) {});
  box.ascent = font.ascent();
  box.height = font.ascent() + font.descent();
  return box;
}

void draw_text(Image& image, int x, int y, const std::string& utf8, int px, Rgb color,
               TextDirection direction) {
  Font& font = Font::get();
  std::lock_guard<std::mutex> lock(font.mutex);
  font.set_size(px);
  const std::vector<char32_t> text = decode_utf8(utf8);
  const int ascent = font.ascent();
  // The unrotated width is needed first to place the start of `up` text.
  const int width = direction == TextDirection::up ? font.layout(text, false, [](auto, int) {}) : 0;
  font.layout(text, true, [&](FT_GlyphSlot slot, int pen_x) {
    const FT_Bitmap& bm = slot->bitmap;
    for (unsigned row = 0; row < bm.rows; ++row) {
      const unsigned char* line = bm.buffer + static_cast<std::ptrdiff_t>(row) * bm.pitch;
      for (unsigned col = 0; col < bm.width; ++col) {
        // (tx, ty): the pixel in the unrotated box, ty down from its top.
        const int tx = pen_x + slot->bitmap_left + static_cast<int>(col);
        const int ty = ascent - slot->bitmap_top + static_cast<int>(row);
        if (direction == TextDirection::right)
          image.blend(x + tx, y + ty, color, line[col]);
        else  // rotated counter-clockwise: the box's top edge becomes its left edge
          image.blend(x + ty, y + width - 1 - tx, color, line[col]);
      }
    }
  });
}

std::string fit_text(const std::string& utf8, int px, int max_width) {
  if (measure_text(utf8, px).width <= max_width) return utf8;
  // Byte offsets where code points start, so the cut never splits one.
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < utf8.size(); ++i)
    if ((static_cast<unsigned char>(utf8[i]) & 0xc0) != 0x80) starts.push_back(i);
  const std::string ellipsis = "\xe2\x80\xa6";  // U+2026
  for (std::size_t n = starts.size(); n-- > 0;) {
    std::string candidate = utf8.substr(0, starts[n]) + ellipsis;
    if (measure_text(candidate, px).width <= max_width) return candidate;
  }
  return measure_text(ellipsis, px).width <= max_width ? ellipsis : std::string();
}

}  // namespace mha
