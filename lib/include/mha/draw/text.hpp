// Text for plots: UTF-8 strings set in DejaVu Sans through FreeType,
// anti-aliased. The font file is embedded into the binary at build time
// (lib/src/font_data.cpp), so nothing is looked up at run time (no fontconfig).
//
//   mha::TextBox box = mha::measure_text("head 3", 15);   // width x line height
//   mha::draw_text(img, 10, 4, "head 3", 15, mha::Rgb{0, 0, 0});
//   mha::draw_text(img, 2, 80, "query t", 12, black, mha::TextDirection::up);
//
// Sizes are FreeType pixel sizes (the em square, about 1.4 times the height
// of a capital letter). Code points the font lacks show as its .notdef box;
// bytes that are not UTF-8 as U+FFFD.
#pragma once

#include <cstddef>
#include <string>

#include "mha/draw/image.hpp"

namespace mha {

enum class TextDirection {
  right,  // horizontal, left to right
  up,     // rotated 90 degrees counter-clockwise: reads bottom to top
};

// The box a line of text occupies unrotated: `width` is the advance of the
// whole string, `height` the font's line height (ascent + descent) and
// `ascent` the distance from the box's top to the baseline.
struct TextBox {
  int width = 0, height = 0, ascent = 0;
};

TextBox measure_text(const std::string& utf8, int px);

// Draws `utf8` with the top-left corner of its box at (x, y): the box is
// measure_text's width x height for `right`, and height wide x width tall
// for `up` (the string's start at the bottom). Pixels outside the image are
// skipped. Thread-safe, as is measure_text.
void draw_text(Image& image, int x, int y, const std::string& utf8, int px, Rgb color,
               TextDirection direction = TextDirection::right);

// `utf8` if it fits in max_width pixels at `px`, else its longest prefix
// (whole code points) followed by an ellipsis that does.
std::string fit_text(const std::string& utf8, int px, int max_width);

// The embedded DejaVu Sans (TrueType) file.
const unsigned char* embedded_font_data();
std::size_t embedded_font_size();

}  // namespace mha
