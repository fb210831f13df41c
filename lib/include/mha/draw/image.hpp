// An RGB8 raster image: what `mha plot` draws into and png.hpp encodes.
// Pixel (x, y) is column x, row y from the top-left; 3 bytes r, g, b each,
// rows stored top to bottom without padding (PNG's own order).
//
//   mha::Image img(200, 100, mha::Rgb{255, 255, 255});  // white
//   img.fill_rect(10, 10, 50, 20, mha::Rgb{68, 1, 84});  // clipped to the image
//   mha::Rgb c = img.at(15, 15);
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mha {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
  bool operator!=(const Rgb& o) const { return !(*this == o); }
};

// An axis-aligned rectangle of pixels: columns [x, x + w), rows [y, y + h).
struct Box {
  int x = 0, y = 0, w = 0, h = 0;
  int center_x() const { return x + w / 2; }
  int center_y() const { return y + h / 2; }
};

class Image {
 public:
  Image() = default;
  // Throws mha::Error (invalid_input) for a negative size.
  Image(int width, int height, Rgb background = Rgb{255, 255, 255});

  int width() const { return width_; }
  int height() const { return height_; }
  bool contains(int x, int y) const { return x >= 0 && y >= 0 && x < width_ && y < height_; }

  Rgb at(int x, int y) const;  // x, y must lie inside
  void set(int x, int y, Rgb c) {
    if (!contains(x, y)) return;
    std::uint8_t* p = &pixels_[3 * (static_cast<std::size_t>(y) * width_ + x)];
    p[0] = c.r, p[1] = c.g, p[2] = c.b;
  }
  // Mixes c over the pixel with coverage `alpha` in [0, 255] (anti-aliased text).
  void blend(int x, int y, Rgb c, int alpha);
  // Fills the part of the rectangle that lies inside the image.
  void fill_rect(int x, int y, int w, int h, Rgb c);
  void fill_rect(const Box& b, Rgb c) { fill_rect(b.x, b.y, b.w, b.h, c); }
  // A 1-pixel outline just outside `b` (b's own pixels are left alone).
  void frame(const Box& b, Rgb c);

  // Row y's 3 * width() bytes.
  const std::uint8_t* row(int y) const {
    return pixels_.data() + 3 * static_cast<std::size_t>(y) * width_;
  }

 private:
  int width_ = 0, height_ = 0;
  std::vector<std::uint8_t> pixels_;
};

}  // namespace mha
