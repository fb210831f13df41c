#include "mha/draw/heatmap.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <utility>

#include "mha/base/error.hpp"
#include "mha/draw/colormap.hpp"
#include "mha/draw/text.hpp"

namespace mha {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Colors and type sizes (FreeType pixel sizes of DejaVu Sans).
constexpr Rgb kBackground{255, 255, 255}, kInk{34, 34, 34}, kFrame{90, 90, 90};
constexpr int kTitlePx = 14, kAxisPx = 12, kTickPx = 11, kCaptionPx = 12;
// Layout, in pixels.
constexpr int kMargin = 12;             // around everything
constexpr int kGapX = 28, kGapY = 14;   // between tiles
constexpr int kTick = 4, kTickGap = 3;  // tick mark length, tick to its text
constexpr int kBarGap = 22, kBarWidth = 16;
constexpr int kMaxLabelWidth = 120;  // longer token labels get an ellipsis
// Automatic cell size: about kTargetPanel pixels per panel side, and at
// least kMinPanel across a side of only a few cells.
constexpr int kTargetPanel = 400, kMinPanel = 48, kMaxAutoCell = 36;
constexpr int kLabelCell = 12, kMinLabelCell = 11;
// Tile overhead assumed by default_max_cells: axes, ticks, title, gaps.
constexpr int kTileOverhead = 150;

std::string format_value(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string format_fixed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string times(std::size_t a, std::size_t b) {
  return std::to_string(a) + "\xc3\x97" + std::to_string(b);  // U+00D7
}

// Tick positions 0, step, 2 step, ... below n, step in {1, 2, 5} x 10^k,
// with at most `most` ticks.
std::vector<std::size_t> ticks(std::size_t n, int most) {
  most = std::max(most, 2);
  std::size_t step = 1;
  for (std::size_t base = 1;; base *= 10) {
    bool found = false;
    for (std::size_t m : {1, 2, 5}) {
      step = m * base;
      if ((n + step - 1) / step <= static_cast<std::size_t>(most)) {
        found = true;
        break;
      }
    }
    if (found) break;
  }
  std::vector<std::size_t> out;
  for (std::size_t t = 0; t < n; t += step) out.push_back(t);
  return out;
}

// Tick numbers at least 30 px apart down the query axis, and a number's
// width plus 24 px apart across the key axis.
std::vector<std::size_t> query_ticks(const AttentionPanels& panels, int panel_h) {
  return ticks(panels.T(), panel_h / 30);
}
std::vector<std::size_t> key_ticks(const AttentionPanels& panels, int panel_w) {
  return ticks(panels.S(),
               panel_w / (measure_text(std::to_string(panels.S() - 1), kTickPx).width + 24));
}

// Maps a value to [0, 1] for the colormap, NaN kept.
struct ColorRange {
  ColorScale scale;
  double lo, hi;
  double position(double v) const {
    if (std::isnan(v)) return kNaN;
    if (scale == ColorScale::linear) return (v - lo) / (hi - lo);
    if (v <= lo) return 0;
    return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  }
  Rgb color(double v) const {
    const double p = position(v);
    return std::isnan(p) ? kNanColor : viridis(p);
  }
};

// The extremes of the finite values of panels [p0, p1).
struct Extent {
  double lo = kInf, hi = -kInf, lo_positive = kInf;
};

Extent extent(const AttentionPanels& panels, std::size_t p0, std::size_t p1, bool& has_nan) {
  Extent e;
  for (std::size_t p = p0; p < p1; ++p)
    for (std::size_t i = 0; i < panels.rows(); ++i)
      for (std::size_t j = 0; j < panels.cols(); ++j) {
        const double v = panels.cell(p, i, j);
        if (std::isnan(v)) has_nan = true;
        if (!std::isfinite(v)) continue;
        e.lo = std::min(e.lo, v), e.hi = std::max(e.hi, v);
        if (v > 0) e.lo_positive = std::min(e.lo_positive, v);
      }
  return e;
}

// The color range of values spanning `e`, with the fixed ends of `options`
// in place of the data's; a data end on the wrong side of a fixed end moves
// 1 (log: a decade) beyond it.
ColorRange color_range(const Extent& e, const PlotOptions& options) {
  const ColorScale scale = options.scale;
  double lo = e.lo, hi = e.hi;
  if (scale == ColorScale::linear) {
    if (hi < lo) lo = 0, hi = 1;  // nothing finite
    lo = std::min(lo, 0.0);
    if (hi <= lo) hi = lo + 1;  // all zero
  } else if (!(hi > 0)) {
    lo = 0.1, hi = 1;  // nothing positive: all below the range
  } else {
    lo = e.lo_positive;
    if (hi <= lo) lo = hi / 10;  // one value only: it takes the top color
  }
  if (options.vmin) lo = *options.vmin;
  if (options.vmax) hi = *options.vmax;
  if (hi <= lo) {
    const bool log = scale == ColorScale::log;
    if (options.vmax && !options.vmin)
      lo = log ? hi / 10 : hi - 1;
    else
      hi = log ? lo * 10 : lo + 1;
  }
  return {scale, lo, hi};
}

struct CellSize {
  int w = 1, h = 1;
};

// Where each part of a tile goes, relative to the tile's top-left corner.
struct TileLayout {
  int label_px = 0;
  int title_h = 0, left = 0, bottom = 0, panel_w = 0, panel_h = 0, w = 0, h = 0;
  int query_text_w = 0;  // widest query tick number or label
  int key_text_h = 0;    // tallest key text: a tick number's line or a rotated label's width
};

struct Layout {
  TileLayout tile;
  int grid_cols = 1, grid_rows = 1;
  int bar_x = 0, bar_y = 0, bar_h = 0, bar_text_w = 0;
  int width = 0, height = 0, caption_y = 0;
  std::vector<std::string> caption_lines;
  std::vector<std::string> query_labels, key_labels;  // fitted to kMaxLabelWidth
};

int max_width(const std::vector<std::string>& texts, int px) {
  int w = 0;
  for (const auto& t : texts) w = std::max(w, measure_text(t, px).width);
  return w;
}

// Greedy wrap of caption parts into lines no wider than `width`.
std::vector<std::string> wrap(const std::vector<std::string>& parts, int width) {
  std::vector<std::string> lines;
  for (const auto& part : parts) {
    if (!lines.empty() &&
        measure_text(lines.back() + " \xc2\xb7 " + part, kCaptionPx).width <= width) {
      lines.back() += " \xc2\xb7 " + part;  // U+00B7
    } else {
      lines.push_back(part);
    }
  }
  return lines;
}

Layout plan(const AttentionPanels& panels, const std::vector<std::string>& titles,
            const std::vector<std::string>& range_texts,
            const std::vector<std::string>& caption_parts,
            const std::vector<std::string>& bar_texts, const std::vector<std::string>& query_labels,
            const std::vector<std::string>& key_labels, CellSize cell, bool labels) {
  Layout L;
  TileLayout& t = L.tile;
  const std::size_t n = panels.panels();
  L.grid_cols = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n)) - 1e-9));
  L.grid_rows = static_cast<int>((n + L.grid_cols - 1) / L.grid_cols);
  t.label_px = std::min(13, std::min(cell.w, cell.h) - 2);
  t.panel_w = static_cast<int>(panels.cols()) * cell.w;
  t.panel_h = static_cast<int>(panels.rows()) * cell.h;
  const int axis_h = measure_text("query t", kAxisPx).height;
  const int tick_h = measure_text("0", kTickPx).height;
  t.title_h = measure_text("head", kTitlePx).height + 4;
  if (!range_texts.empty()) t.title_h += tick_h + 2;  // per-head ranges: a line under the title
  if (labels) {
    for (const auto& s : query_labels)
      L.query_labels.push_back(fit_text(s, t.label_px, kMaxLabelWidth));
    for (const auto& s : key_labels)
      L.key_labels.push_back(fit_text(s, t.label_px, kMaxLabelWidth));
  }
  // Query axis: labels or tick numbers, right-aligned against the ticks.
  std::vector<std::string> numbers;
  for (std::size_t q : query_ticks(panels, t.panel_h)) numbers.push_back(std::to_string(q));
  t.query_text_w =
      L.query_labels.empty() ? max_width(numbers, kTickPx) : max_width(L.query_labels, t.label_px);
  t.left = axis_h + 6 + t.query_text_w + kTickGap + kTick + 1;
  // Key axis: labels rotated, or a line of numbers.
  t.key_text_h = L.key_labels.empty() ? tick_h : max_width(L.key_labels, t.label_px);
  t.bottom = 1 + kTick + kTickGap + t.key_text_h + 4 + axis_h;
  // Anything centered on the panel may stick out to its right.
  int right = 1;
  for (const auto& title : titles)
    right = std::max(right, (measure_text(title, kTitlePx).width - t.panel_w) / 2 + 1);
  for (const auto& text : range_texts)
    right = std::max(right, (measure_text(text, kTickPx).width - t.panel_w) / 2 + 1);
  right = std::max(right, (measure_text("key s", kAxisPx).width - t.panel_w) / 2 + 1);
  right = std::max(right, max_width({std::to_string(panels.S() - 1)}, kTickPx) / 2 + 1);
  int left_extra = 0;  // a wide title over a narrow panel may stick out to the left too
  for (const auto& title : titles)
    left_extra =
        std::max(left_extra, (measure_text(title, kTitlePx).width - t.panel_w) / 2 - t.left);
  for (const auto& text : range_texts)
    left_extra = std::max(left_extra, (measure_text(text, kTickPx).width - t.panel_w) / 2 - t.left);
  t.left += std::max(0, left_extra);
  t.w = t.left + t.panel_w + right;
  t.h = t.title_h + 1 + t.panel_h + t.bottom;

  const int grid_w = L.grid_cols * t.w + (L.grid_cols - 1) * kGapX;
  const int grid_h = L.grid_rows * t.h + (L.grid_rows - 1) * kGapY;
  L.bar_x = kMargin + grid_w + kBarGap;
  L.bar_y = kMargin + t.title_h + 1;
  L.bar_h = std::clamp(t.panel_h, 120, 512);
  L.bar_text_w = max_width(bar_texts, kTickPx);
  L.width = L.bar_x + kBarWidth + 1 + kTick + kTickGap + L.bar_text_w + kMargin;
  const int caption_w = L.width - 2 * kMargin;
  L.caption_lines = wrap(caption_parts, caption_w);
  // Parts wider than the image widen it.
  for (const auto& line : L.caption_lines)
    L.width = std::max(L.width, measure_text(line, kCaptionPx).width + 2 * kMargin);
  const int caption_line_h = measure_text("0", kCaptionPx).height + 2;
  const int bar_bottom = L.bar_y + L.bar_h + tick_h + 30;  // room for the NaN swatch
  L.caption_y = std::max(kMargin + grid_h, bar_bottom) + 8;
  L.height = L.caption_y + static_cast<int>(L.caption_lines.size()) * caption_line_h + kMargin;
  return L;
}

int auto_cell(const AttentionPanels& panels) {
  const std::size_t side = std::max(panels.rows(), panels.cols());
  return static_cast<int>(std::clamp<std::size_t>(kTargetPanel / side, 1, kMaxAutoCell));
}

// Square cells, except that automatic ones stretch along a side of only a
// few cells (a single query row when decoding) to keep the panel visible.
CellSize cell_size(const AttentionPanels& panels, int cell, bool automatic) {
  CellSize c{cell, cell};
  auto stretch = [&](std::size_t n, int& side) {
    if (automatic && static_cast<int>(n) * cell < kMinPanel)
      side = std::min(kMaxAutoCell, (kMinPanel + static_cast<int>(n) - 1) / static_cast<int>(n));
  };
  stretch(panels.rows(), c.h);
  stretch(panels.cols(), c.w);
  return c;
}

void draw_centered(Image& img, int cx, int y, const std::string& s, int px, Rgb c) {
  draw_text(img, cx - measure_text(s, px).width / 2, y, s, px, c);
}

}  // namespace

const char* to_string(Reduce r) {
  return r == Reduce::max ? "max" : "mean";
}

const char* to_string(ColorScale s) {
  return s == ColorScale::linear ? "linear" : "log";
}

const char* to_string(ColorRangeMode m) {
  return m == ColorRangeMode::shared ? "shared" : "per_head";
}

void check_color_limits(const PlotOptions& options, const std::string& prefix,
                        const std::string& lead) {
  auto text = [](double v) {  // the shortest that reads back as v
    char buf[32];
    for (int digits = 6; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (!std::isfinite(v) || std::strtod(buf, nullptr) == v) break;
    }
    return std::string(buf);
  };
  const std::pair<const char*, const std::optional<double>*> ends[] = {{"vmin", &options.vmin},
                                                                       {"vmax", &options.vmax}};
  for (const auto& [name, value] : ends)
    if (*value && !std::isfinite(**value))
      fail_input(lead + prefix + name + " " + text(**value) +
                 ": expected a finite number for an end of the color range");
  if (options.vmin && options.vmax && !(*options.vmin < *options.vmax))
    fail_input(lead + prefix + "vmin " + text(*options.vmin) + " is not below " + prefix + "vmax " +
               text(*options.vmax) + ": expected vmin < vmax");
  if (options.scale == ColorScale::log)
    for (const auto& [name, value] : ends)
      if (*value && !(**value > 0))
        fail_input(lead + prefix + name + " " + text(**value) + " with " + prefix +
                   "color_scale log: expected a positive value (its log10 ends the range)");
}

std::size_t default_max_cells(std::size_t panels) {
  const auto cols = static_cast<std::size_t>(
      std::ceil(std::sqrt(static_cast<double>(std::max<std::size_t>(panels, 1))) - 1e-9));
  const long fit = (kMaxPlotSide - 200) / static_cast<long>(cols) - kTileOverhead;
  return static_cast<std::size_t>(std::clamp<long>(fit, 16, 512));
}

AttentionPanels::AttentionPanels(std::size_t panels, std::size_t T, std::size_t S,
                                 std::size_t max_cells, Reduce reduce)
    : panels_(panels), T_(T), S_(S), reduce_(reduce) {
  if (panels == 0 || T == 0 || S == 0 || max_cells == 0)
    fail_input("attention plot: expected at least 1 panel, query, key and cell, got " +
               std::to_string(panels) + " panels of " + times(T, S) + " with max_cells " +
               std::to_string(max_cells));
  factor_ = (std::max(T, S) + max_cells - 1) / max_cells;
  rows_ = (T + factor_ - 1) / factor_;
  cols_ = (S + factor_ - 1) / factor_;
  cells_.assign(panels * rows_ * cols_, reduce == Reduce::max ? -kInf : 0.0);
  locks_ = std::make_unique<std::mutex[]>(panels);
}

template <class V>
void AttentionPanels::add_rows(std::size_t panel, std::size_t t0, std::size_t rows,
                               const V* block) {
  if (panel >= panels_ || t0 > T_ || rows > T_ - t0)
    fail_runtime("attention plot: rows [" + std::to_string(t0) + ", " + std::to_string(t0 + rows) +
                 ") of panel " + std::to_string(panel) + " lie outside " + std::to_string(panels_) +
                 " panels of " + times(T_, S_));
  const bool max = reduce_ == Reduce::max;
  std::vector<double> acc(cols_);
  // Row by row within one cell row, locally; then one merge per cell row.
  for (std::size_t t = t0; t < t0 + rows;) {
    const std::size_t i = t / factor_, end = std::min(t0 + rows, (i + 1) * factor_);
    std::fill(acc.begin(), acc.end(), max ? -kInf : 0.0);
    for (; t < end; ++t) {
      const V* row = block + (t - t0) * S_;
      for (std::size_t j = 0; j < cols_; ++j) {
        const std::size_t s1 = std::min(S_, (j + 1) * factor_);
        double a = acc[j];
        if (max) {
          // NaN wins: once a is NaN, no comparison replaces it.
          for (std::size_t s = j * factor_; s < s1; ++s)
            if (row[s] > a || std::isnan(row[s])) a = row[s];
        } else {
          for (std::size_t s = j * factor_; s < s1; ++s) a += row[s];
        }
        acc[j] = a;
      }
    }
    std::lock_guard<std::mutex> lock(locks_[panel]);
    double* dst = &cells_[(panel * rows_ + i) * cols_];
    for (std::size_t j = 0; j < cols_; ++j) {
      if (!max)
        dst[j] += acc[j];
      else if (acc[j] > dst[j] || std::isnan(acc[j]))
        dst[j] = acc[j];
    }
  }
}

template void AttentionPanels::add_rows<float>(std::size_t, std::size_t, std::size_t, const float*);
template void AttentionPanels::add_rows<double>(std::size_t, std::size_t, std::size_t,
                                                const double*);

double AttentionPanels::cell(std::size_t p, std::size_t i, std::size_t j) const {
  const double v = cells_[(p * rows_ + i) * cols_ + j];
  if (reduce_ == Reduce::max) return v;
  const std::size_t r = std::min(T_, (i + 1) * factor_) - i * factor_;
  const std::size_t c = std::min(S_, (j + 1) * factor_) - j * factor_;
  return v / static_cast<double>(r * c);
}

namespace {

// Panel p: its title, its cells, the query axis on its left and the key
// axis below it, at its place in the grid of L.
void draw_panel(Image& img, const AttentionPanels& panels, std::size_t p,
                const std::string& title_text, const std::string& range_text, const Layout& L,
                const CellSize& size, bool labels, const ColorRange& range, Plot& plot) {
  const TileLayout& t = L.tile;
  const std::size_t f = panels.factor();
  const int axis_h = measure_text("query t", kAxisPx).height;
  const int gr = static_cast<int>(p) / L.grid_cols, gc = static_cast<int>(p) % L.grid_cols;
  const int tx = kMargin + gc * (t.w + kGapX), ty = kMargin + gr * (t.h + kGapY);
  const Box panel{tx + t.left, ty + t.title_h + 1, t.panel_w, t.panel_h};
  plot.panels.push_back(panel);

  // Title, centered over the panel.
  const TextBox title = measure_text(title_text, kTitlePx);
  const Box title_box{panel.center_x() - title.width / 2, ty, title.width, title.height};
  draw_text(img, title_box.x, title_box.y, title_text, kTitlePx, kInk);
  plot.titles.push_back(title_box);
  // Its own color range under it (per_head).
  if (!range_text.empty()) {
    const TextBox r = measure_text(range_text, kTickPx);
    const Box range_box{panel.center_x() - r.width / 2, ty + title.height + 2, r.width, r.height};
    draw_text(img, range_box.x, range_box.y, range_text, kTickPx, kInk);
    plot.ranges.push_back(range_box);
  }

  // Cells.
  for (std::size_t i = 0; i < panels.rows(); ++i)
    for (std::size_t j = 0; j < panels.cols(); ++j)
      img.fill_rect(panel.x + static_cast<int>(j) * size.w, panel.y + static_cast<int>(i) * size.h,
                    size.w, size.h, range.color(panels.cell(p, i, j)));
  img.frame(panel, kFrame);

  // Query axis (left): position q sits at the middle of its row.
  const int tick_right = panel.x - 1;
  auto row_y = [&](std::size_t q) {
    return panel.y + static_cast<int>((static_cast<double>(q) + 0.5) * size.h / f);
  };
  auto col_x = [&](std::size_t s) {
    return panel.x + static_cast<int>((static_cast<double>(s) + 0.5) * size.w / f);
  };
  if (labels && !L.query_labels.empty()) {
    for (std::size_t q = 0; q < panels.T(); ++q) {
      const TextBox b = measure_text(L.query_labels[q], t.label_px);
      draw_text(img, tick_right - kTick - kTickGap - b.width, row_y(q) - b.height / 2,
                L.query_labels[q], t.label_px, kInk);
      img.fill_rect(tick_right - kTick, row_y(q), kTick, 1, kFrame);
    }
  } else {
    for (std::size_t q : query_ticks(panels, t.panel_h)) {
      const std::string s = std::to_string(q);
      const TextBox b = measure_text(s, kTickPx);
      draw_text(img, tick_right - kTick - kTickGap - b.width, row_y(q) - b.height / 2, s, kTickPx,
                kInk);
      img.fill_rect(tick_right - kTick, row_y(q), kTick, 1, kFrame);
    }
  }
  draw_text(img, tick_right - kTick - kTickGap - t.query_text_w - 5 - axis_h,
            panel.center_y() - measure_text("query t", kAxisPx).width / 2, "query t", kAxisPx, kInk,
            TextDirection::up);

  // Key axis (below): numbers, or labels rotated to read upwards, ending at the ticks.
  const int tick_top = panel.y + panel.h + 1;
  const int text_top = tick_top + kTick + kTickGap;
  if (labels && !L.key_labels.empty()) {
    for (std::size_t s = 0; s < panels.S(); ++s) {
      const TextBox b = measure_text(L.key_labels[s], t.label_px);
      draw_text(img, col_x(s) - b.height / 2, text_top, L.key_labels[s], t.label_px, kInk,
                TextDirection::up);
      img.fill_rect(col_x(s), tick_top, 1, kTick, kFrame);
    }
  } else {
    for (std::size_t s : key_ticks(panels, t.panel_w)) {
      draw_centered(img, col_x(s), text_top, std::to_string(s), kTickPx, kInk);
      img.fill_rect(col_x(s), tick_top, 1, kTick, kFrame);
    }
  }
  draw_centered(img, panel.center_x(), text_top + t.key_text_h + 4, "key s", kAxisPx, kInk);
}

// The color bar (hi at the top row, lo at the bottom row, values beside it)
// and, when some weight is NaN, its swatch.
void draw_color_bar(Image& img, const Layout& L, const std::vector<std::string>& bar_texts,
                    Plot& plot) {
  const int tick_h = measure_text("0", kTickPx).height;
  plot.color_bar = Box{L.bar_x, L.bar_y, kBarWidth, L.bar_h};
  for (int k = 0; k < L.bar_h; ++k) {
    const double v = L.bar_h > 1 ? 1.0 - static_cast<double>(k) / (L.bar_h - 1) : 1.0;
    img.fill_rect(L.bar_x, L.bar_y + k, kBarWidth, 1, viridis(v));
  }
  img.frame(plot.color_bar, kFrame);
  const int bar_text_x = L.bar_x + kBarWidth + 1 + kTick + kTickGap;
  const int bar_ys[] = {L.bar_y, L.bar_y + L.bar_h / 2, L.bar_y + L.bar_h - 1};
  for (int k = 0; k < 3; ++k) {
    img.fill_rect(L.bar_x + kBarWidth + 1, bar_ys[k], kTick, 1, kFrame);
    draw_text(img, bar_text_x, bar_ys[k] - tick_h / 2, bar_texts[k], kTickPx, kInk);
  }
  if (plot.has_nan) {
    const Box swatch{L.bar_x, L.bar_y + L.bar_h + tick_h, kBarWidth, 12};
    img.fill_rect(swatch, kNanColor);
    img.frame(swatch, kFrame);
    draw_text(img, bar_text_x, swatch.center_y() - tick_h / 2, "NaN", kTickPx, kInk);
  }
}

// The request's errors, before anything is measured or drawn.
void check_request(const AttentionPanels& panels, const std::vector<std::string>& titles,
                   const PlotOptions& options) {
  const std::size_t n = panels.panels();
  if (titles.size() != n)
    fail_input("attention plot: " + std::to_string(titles.size()) + " titles for " +
               std::to_string(n) + " panels");
  if (!options.query_labels.empty() && options.query_labels.size() != panels.T())
    fail_input("attention plot: " + std::to_string(options.query_labels.size()) +
               " query labels for T = " + std::to_string(panels.T()) + " query positions");
  if (!options.key_labels.empty() && options.key_labels.size() != panels.S())
    fail_input("attention plot: " + std::to_string(options.key_labels.size()) +
               " key labels for S = " + std::to_string(panels.S()) + " key positions");
  if (options.cell < 0 || options.cell > 64)
    fail_input("attention plot: cell size " + std::to_string(options.cell) +
               " px; expected 1 to 64, or 0 for automatic");

  check_color_limits(options, "", "attention plot: ");
}

// One color range for all panels, or one each (per_head); their ends, and
// whether any weight is NaN, go into plot.
std::vector<ColorRange> color_ranges(const AttentionPanels& panels, const PlotOptions& options,
                                     Plot& plot) {
  const std::size_t n = panels.panels();
  std::vector<ColorRange> ranges;
  if (options.range == ColorRangeMode::per_head) {
    for (std::size_t p = 0; p < n; ++p)
      ranges.push_back(color_range(extent(panels, p, p + 1, plot.has_nan), options));
  } else {
    ranges.assign(n, color_range(extent(panels, 0, n, plot.has_nan), options));
  }
  plot.lo = kInf, plot.hi = -kInf;
  for (const ColorRange& r : ranges) {
    plot.panel_lo.push_back(r.lo), plot.panel_hi.push_back(r.hi);
    plot.lo = std::min(plot.lo, r.lo), plot.hi = std::max(plot.hi, r.hi);
  }
  return ranges;
}

// The texts of a range's ends: fixed ends are written as given (up to 6
// digits), the data's to 3.
struct EndTexts {
  explicit EndTexts(const PlotOptions& options)
      : fixed_lo(options.vmin.has_value()),
        fixed_hi(options.vmax.has_value()),
        vmin(fixed_lo ? format_fixed(*options.vmin) : ""),
        vmax(fixed_hi ? format_fixed(*options.vmax) : "") {}
  std::string lo(const ColorRange& r) const { return fixed_lo ? vmin : format_value(r.lo); }
  std::string hi(const ColorRange& r) const { return fixed_hi ? vmax : format_value(r.hi); }

  bool fixed_lo, fixed_hi;
  std::string vmin, vmax;
};

// Everything written on the plot but the axes.
struct PlotTexts {
  const std::vector<std::string>& titles;
  std::vector<std::string> ranges;   // under each title (per_head), else empty
  std::vector<std::string> caption;  // its parts, joined by U+00B7
  std::vector<std::string> bar;      // the color bar's top, middle, bottom; the NaN swatch's
};

std::vector<std::string> caption_parts(const AttentionPanels& panels, const PlotOptions& options,
                                       const std::string& subject,
                                       const std::vector<ColorRange>& ranges, const EndTexts& ends,
                                       bool has_nan) {
  std::vector<std::string> caption = {subject};
  const std::string scale_name = options.scale == ColorScale::linear ? "linear" : "log10";
  if (options.range != ColorRangeMode::per_head) {
    caption.push_back("color: " + scale_name + ", " + ends.lo(ranges[0]) +
                      (ends.fixed_lo ? " (vmin)" : "") + " to " + ends.hi(ranges[0]) +
                      (ends.fixed_hi ? " (vmax)" : ""));
  } else {
    std::string part = "color: " + scale_name + ", per head (ranges under the titles)";
    if (ends.fixed_lo) part += ", vmin " + ends.vmin;
    if (ends.fixed_hi) part += ", vmax " + ends.vmax;
    caption.push_back(part);
  }
  const std::size_t f = panels.factor();
  if (f > 1)
    caption.push_back("downsampled " + times(f, f) + " by block " + to_string(panels.reduce()) +
                      " (" + times(panels.T(), panels.S()) + " to " +
                      times(panels.rows(), panels.cols()) + ")");
  if (has_nan) caption.push_back("grey: NaN");
  return caption;
}

// The color bar's texts: fixed ends with U+2265 or U+2264 (values beyond take
// their color), per-head ends as such, the middle when both ends are common.
std::vector<std::string> bar_texts(const PlotOptions& options, const ColorRange& first,
                                   const EndTexts& ends) {
  const bool per_head = options.range == ColorRangeMode::per_head;
  const bool common_lo = !per_head || ends.fixed_lo, common_hi = !per_head || ends.fixed_hi;
  const double mid = options.scale == ColorScale::linear ? (first.lo + first.hi) / 2
                                                         : std::sqrt(first.lo * first.hi);
  return {ends.fixed_hi ? "\xe2\x89\xa5 " + ends.vmax
          : common_hi   ? ends.hi(first)
                        : "head max",
          common_lo && common_hi ? format_value(mid) : "",
          ends.fixed_lo ? "\xe2\x89\xa4 " + ends.vmin
          : common_lo   ? ends.lo(first)
                        : "head min",
          "NaN"};
}

// The cell size to start from and whether token labels are drawn; a note in
// plot says why labels asked for are left out.
struct CellChoice {
  int cell = 1;
  bool labels = false;
};

CellChoice choose_cell(const AttentionPanels& panels, const PlotOptions& options, Plot& plot) {
  const std::size_t f = panels.factor();
  const bool want_labels = !options.query_labels.empty() || !options.key_labels.empty();
  CellChoice c{options.cell ? options.cell : auto_cell(panels), want_labels};
  if (want_labels && f > 1) {
    c.labels = false;
    plot.notes.push_back("token labels left out: the map is downsampled " + times(f, f) +
                         ", so a cell is not one token");
  } else if (want_labels && !options.cell && c.cell < kLabelCell &&
             std::max(panels.rows(), panels.cols()) * kLabelCell <= 2048) {
    c.cell = kLabelCell;  // big enough for labels, still a sane image
  }
  if (c.labels && c.cell < kMinLabelCell) {
    c.labels = false;
    plot.notes.push_back("token labels left out: cells of " + std::to_string(c.cell) +
                         " px are too small for text (labels need " +
                         std::to_string(kMinLabelCell) + " px or more)");
  }
  return c;
}

// The layout at the chosen cell size, shrinking an automatic cell until the
// image fits kMaxPlotSide a side (labels go last, with a note in plot).
// Throws when a fixed cell size, or 1 px, is still too large.
std::pair<Layout, CellSize> fit_layout(const AttentionPanels& panels, const PlotTexts& texts,
                                       const PlotOptions& options, CellChoice& c, Plot& plot) {
  for (;;) {
    const CellSize size = cell_size(panels, c.cell, !options.cell);
    Layout L = plan(panels, texts.titles, texts.ranges, texts.caption, texts.bar,
                    c.labels ? options.query_labels : std::vector<std::string>{},
                    c.labels ? options.key_labels : std::vector<std::string>{}, size, c.labels);
    if (L.width <= kMaxPlotSide && L.height <= kMaxPlotSide) return {std::move(L), size};
    if (!options.cell && c.cell > 1) {
      c.cell = std::max(1, c.cell * 3 / 4);
      if (c.labels && c.cell < kMinLabelCell) {
        c.labels = false;
        plot.notes.push_back("token labels left out: the plot would be larger than " +
                             std::to_string(kMaxPlotSide) + " px a side");
      }
      continue;
    }
    const std::size_t n = panels.panels();
    fail_input("attention plot: " + std::to_string(n) + " panels of " +
               times(panels.rows(), panels.cols()) + " cells at " + std::to_string(c.cell) +
               " px would be " + std::to_string(L.width) + "x" + std::to_string(L.height) +
               " px, over the limit of " + std::to_string(kMaxPlotSide) +
               " px a side; use a smaller cell size" +
               (n > 1 ? std::string(", fewer heads or their mean") : std::string()));
  }
}

void draw_caption(Image& img, const Layout& L) {
  const int line_h = measure_text("0", kCaptionPx).height + 2;
  for (std::size_t k = 0; k < L.caption_lines.size(); ++k)
    draw_text(img, kMargin, L.caption_y + static_cast<int>(k) * line_h, L.caption_lines[k],
              kCaptionPx, kInk);
}

}  // namespace

Plot render_attention(const AttentionPanels& panels, const std::vector<std::string>& titles,
                      const PlotOptions& options, const std::string& subject) {
  check_request(panels, titles, options);
  Plot plot;
  const std::vector<ColorRange> ranges = color_ranges(panels, options, plot);
  const EndTexts ends(options);
  PlotTexts texts{titles,
                  {},
                  caption_parts(panels, options, subject, ranges, ends, plot.has_nan),
                  bar_texts(options, ranges[0], ends)};
  const bool per_head = options.range == ColorRangeMode::per_head;
  if (per_head)
    for (const ColorRange& r : ranges) texts.ranges.push_back(ends.lo(r) + " to " + ends.hi(r));
  plot.bar_labels.assign(texts.bar.begin(), texts.bar.begin() + 3);

  CellChoice cell = choose_cell(panels, options, plot);
  const auto [L, size] = fit_layout(panels, texts, options, cell, plot);
  plot.cell_w = size.w, plot.cell_h = size.h;
  plot.labels = cell.labels;
  plot.image = Image(L.width, L.height, kBackground);

  for (std::size_t p = 0; p < panels.panels(); ++p)
    draw_panel(plot.image, panels, p, titles[p], per_head ? texts.ranges[p] : std::string(), L,
               size, cell.labels, ranges[p], plot);
  draw_color_bar(plot.image, L, texts.bar, plot);
  draw_caption(plot.image, L);
  for (std::size_t k = 0; k < texts.caption.size(); ++k)
    plot.caption += (k ? " \xc2\xb7 " : "") + texts.caption[k];
  return plot;
}

std::vector<std::string> read_labels(const std::string& path, std::size_t count,
                                     const std::string& axis) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input(path + ": cannot open the labels file (one token per line)");
  std::vector<std::string> labels;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    labels.push_back(line);
    if (labels.size() > (std::size_t{1} << 30))
      fail_input(path + ": more than 2^30 lines; expected one token per line");
  }
  if (in.bad()) fail_input(path + ": cannot read the labels file");
  if (labels.size() != count)
    fail_input(path + ": " + std::to_string(labels.size()) +
               " labels (one per line) but the map has " + axis +
               "; expected one label per position");
  return labels;
}

}  // namespace mha
