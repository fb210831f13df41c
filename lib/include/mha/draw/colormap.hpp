// Viridis, matplotlib's perceptually uniform colormap (dark purple at 0,
// teal at 0.5, yellow at 1), as a 256-entry RGB8 table that
// scripts/make_viridis.py generates from matplotlib into
// lib/src/viridis_table.inc. A value v in [0, 1] takes the nearest entry,
// index round(255 v); values outside [0, 1] take the end entries.
//
//   mha::Rgb c = mha::viridis(0.5);  // entry 128: {33, 145, 140}
#pragma once

#include <array>

#include "mha/draw/image.hpp"

namespace mha {

const std::array<Rgb, 256>& viridis_table();

// The nearest of the 256 entries to v (clamped to [0, 1]); NaN gets entry 0
// (callers that mean "no value" pick their own color, see heatmap.hpp).
Rgb viridis(double v);

}  // namespace mha
