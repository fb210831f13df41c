#include "mha/draw/image.hpp"

#include <algorithm>
#include <string>

#include "mha/base/error.hpp"

namespace mha {

Image::Image(int width, int height, Rgb background) : width_(width), height_(height) {
  if (width < 0 || height < 0)
    fail_input("image size " + std::to_string(width) + "x" + std::to_string(height) +
               ": expected a non-negative width and height");
  pixels_.resize(3 * static_cast<std::size_t>(width) * static_cast<std::size_t>(height));
  fill_rect(0, 0, width, height, background);
}

Rgb Image::at(int x, int y) const {
  const std::uint8_t* p = &pixels_[3 * (static_cast<std::size_t>(y) * width_ + x)];
  return Rgb{p[0], p[1], p[2]};
}

void Image::blend(int x, int y, Rgb c, int alpha) {
  if (!contains(x, y) || alpha <= 0) return;
  if (alpha >= 255) return set(x, y, c);
  std::uint8_t* p = &pixels_[3 * (static_cast<std::size_t>(y) * width_ + x)];
  // Rounded (a * c + (255 - a) * p) / 255 per channel.
  auto mix = [alpha](int fg, int bg) {
    return static_cast<std::uint8_t>((alpha * fg + (255 - alpha) * bg + 127) / 255);
  };
  p[0] = mix(c.r, p[0]), p[1] = mix(c.g, p[1]), p[2] = mix(c.b, p[2]);
}

void Image::fill_rect(int x, int y, int w, int h, Rgb c) {
  const int x0 = std::max(x, 0), y0 = std::max(y, 0);
  const int x1 = std::min(x + w, width_), y1 = std::min(y + h, height_);
  if (x0 >= x1 || y0 >= y1) return;
  for (int yy = y0; yy < y1; ++yy) {
    std::uint8_t* p = &pixels_[3 * (static_cast<std::size_t>(yy) * width_ + x0)];
    for (int xx = x0; xx < x1; ++xx, p += 3) p[0] = c.r, p[1] = c.g, p[2] = c.b;
  }
}

void Image::frame(const Box& b, Rgb c) {
  fill_rect(b.x - 1, b.y - 1, b.w + 2, 1, c);
  fill_rect(b.x - 1, b.y + b.h, b.w + 2, 1, c);
  fill_rect(b.x - 1, b.y, 1, b.h, c);
  fill_rect(b.x + b.w, b.y, 1, b.h, c);
}

}  // namespace mha
