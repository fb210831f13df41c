// Line charts of sweep results: y against x for one or more series (say, run
// time against seq_len, one series per h), drawn into an Image for write_png.
//
//   mha::LineChart chart;
//   chart.title = "compute time";
//   chart.x_label = "seq_len", chart.y_label = "ms";
//   chart.log_x = true;
//   chart.series.push_back({"h = 4", {64, 128, 256}, {1.2, 2.5, 5.3}});
//   chart.series.push_back({"h = 8", {64, 128, 256}, {2.0, NAN, 9.1}});  // NaN: a gap
//   mha::RenderedChart r = mha::render_line_chart(chart);
//   out.stage("times.png", [&](std::ostream& os) { mha::write_png(os, r.image, path); });
//
// The picture: white, the title centered on top, the plot area framed with
// light grid lines at the ticks, tick numbers and the y label (rotated) on its
// left, tick numbers and the x label below, the legend (a line with a marker
// and the name of each series, in series order, in as many columns as it
// needs) on its right. Series i is a 2-pixel polyline through its points in
// the order given, with a marker on each point: colour i % 10 of Tableau 10,
// marker shape i / 10 % 4 (circle, square, triangle, diamond), so 40 series
// stay apart. A point whose y is NaN or infinite is a gap: the line breaks
// there and the point gets no marker.
//
// Axes: the linear ranges are the finite data's, widened to multiples of a
// "nice" step (1, 2 or 5 times a power of 10) chosen so that the ticks sit
// about 50 (y) or 90 (x) pixels apart and x's tick numbers do not touch; a
// single value v is widened by 10 % of |v| (or 1 for 0) first. A log x axis
// spans from the largest 1/2/5 x 10^k at or below the smallest x to the
// smallest such number at or above the largest, ticked at 1, 2 and 5 times
// each decade over up to 3 decades, at decades beyond. Value v sits at pixel
// column plot_area.x + round((v - x_lo) / (x_hi - x_lo) * (plot_area.w - 1))
// (log10 of each for a log axis), and y at row
// plot_area.y + plot_area.h - 1 - round((v - y_lo) / (y_hi - y_lo) * (plot_area.h - 1)).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mha/draw/image.hpp"

namespace mha {

// One line: points in x order (drawn in the order given); y may be NaN (a gap).
// lo and hi, if given (one each per point), are a range around each y drawn
// as an error bar: a vertical line from lo to hi with 9-pixel caps, in the
// series' colour (a point whose lo or hi is not finite gets none).
struct ChartSeries {
  std::string name;
  std::vector<double> x, y;
  std::vector<double> lo = {}, hi = {};
};

struct LineChart {
  std::string title, x_label, y_label;  // each may be empty: no room is kept for it
  std::vector<ChartSeries> series;
  bool log_x = false;  // log10 x axis (all x > 0 required)
  // A categorical x axis: when given, x values are positions 0 .. n-1, each
  // ticked with its name and half a step of room either side, and points are
  // markers only (no line joins unrelated things, such as two checkpoints).
  std::vector<std::string> x_categories = {};
  int width = 800, height = 500;  // pixels, 200 x 150 up to kMaxPlotSide (heatmap.hpp)
};

// Where things went, for tests.
struct ChartLayout {
  Box plot_area;                         // the axes' inner box (the frame lies just outside it)
  Box legend;                            // the legend's box (its frame lies just outside it)
  double x_lo, x_hi, y_lo, y_hi;         // data ranges mapped onto plot_area (after nice rounding)
  std::vector<double> x_ticks, y_ticks;  // tick values, ascending, within [lo, hi]
  // The pixel of each point of each series; (-1, -1) for a gap (non-finite y).
  std::vector<std::vector<std::pair<int, int>>> points;
  // Each point's error bar as pixel rows (top = hi, bottom = lo); (-1, -1) for
  // none. Empty for a series without lo and hi.
  std::vector<std::vector<std::pair<int, int>>> ranges;
  std::vector<Rgb> colors;  // the colour of each series: Tableau 10, repeating
  bool lines = true;        // false on a categorical x axis: markers only
};

struct RenderedChart {
  Image image;
  ChartLayout layout;
};

// The qualitative palette: Tableau 10, in its order.
extern const Rgb kTableau10[10];

// Throws mha::Error (invalid_input) for no series, mismatched x/y (or lo/hi) sizes, a
// non-finite x, log_x with x <= 0, no finite point, or a size outside
// 200 x 150 to kMaxPlotSide or too small for the plot area to keep 40 x 40
// pixels beside its texts.
RenderedChart render_line_chart(const LineChart& chart);

}  // namespace mha
