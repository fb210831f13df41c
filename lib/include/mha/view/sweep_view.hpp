// A sweep's results as a chart: any numeric results column (y) against a
// swept key (x), one series per value of another swept key (group), in the
// HTML report (Chart.js, every choice switchable in the page) and as a PNG.
//
//   mha::SweepView v = mha::read_sweep_view("out/sweeps/heads_vs_length");
//   mha::ChartChoice c = mha::choose_chart(v, {});  // compute_ms vs seq_len per h
//   std::string html = mha::sweep_page(v, c);
//   mha::RenderedChart png = mha::render_line_chart(mha::sweep_chart(v, c));
//
// Only ok rows are charted. Runs that share x and group but differ in a third
// swept key are their own series (say, one per text of a model sweep), not
// averaged, unless that key is the choice's `mean`. An x whose values are not
// numbers (checkpoints, texts) is categorical: its values are named along the
// axis and the points are not joined by lines. A
// list column (attention_entropy_per_head) gives one series per head. With
// repeated timings (repeat > 1), compute_ms is charted as the median of the
// timed calls with a min-to-max bar at each point.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/draw/line_chart.hpp"

namespace mha {

struct SweepView {
  std::string dir;
  std::string description;
  std::vector<nlohmann::ordered_json> rows;  // results.jsonl, ok and failed
  std::vector<std::string> swept_keys;       // sweep.json's, else the config columns that vary
  std::vector<std::string> numeric_columns;  // y candidates: numbers (or lists of them) in ok rows
};

struct ChartChoice {
  std::string y, x, group;  // group empty: one series (per value of the other swept keys)
  std::string mean = {};    // a swept key whose runs are averaged into one point; empty: none
};

// Reads dir/results.jsonl and dir/sweep.json (written by `mha sweep` since
// results schema 1; without it the swept keys are the config columns whose
// values differ between rows). Throws mha::Error (invalid_input) naming the
// file when it is missing or malformed, or has no ok row to chart.
SweepView read_sweep_view(const std::string& dir);

// Fills what `wanted` leaves empty: y compute_ms, x the last swept key with
// numbers that vary (a grid's innermost axis), group the swept key before it
// that takes several values. Throws
// mha::Error (invalid_input) for a y that is not a numeric column, or an x,
// group or mean that is not a swept key (the message lists the choices).
ChartChoice choose_chart(const SweepView& view, const ChartChoice& wanted);

// The columns a chart of `y` takes its values and ranges from: with repeated
// timings (rows with compute_ms_median, run config repeat > 1), y compute_ms
// or compute_ms_median is charted as the median with a bar from
// compute_ms_min to compute_ms_max; any other y (or rows without them) has
// no range (all empty). Points that average several runs get the lowest min
// and the highest max.
struct YRange {
  std::string value, lo, hi;
};
YRange y_range(const SweepView& view, const std::string& y);

// The chart's title: "y against x for each group", and the median's note.
std::string chart_title(const ChartChoice& choice, const YRange& range);

// The chart's series as the PNG draws them (and the page, from the same rows).
LineChart sweep_chart(const SweepView& view, const ChartChoice& choice);

std::string sweep_page(const SweepView& view, const ChartChoice& choice);

}  // namespace mha
