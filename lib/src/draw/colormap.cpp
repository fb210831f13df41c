#include "mha/draw/colormap.hpp"

#include <cmath>

namespace mha {

const std::array<Rgb, 256>& viridis_table() {
  static const std::array<Rgb, 256> table = {{
#include "viridis_table.inc"
  }};
  return table;
}

Rgb viridis(double v) {
  if (!(v > 0)) return viridis_table()[0];  // also NaN
  if (v >= 1) return viridis_table()[255];
  return viridis_table()[static_cast<std::size_t>(std::lround(v * 255))];
}

}  // namespace mha
