#include "mha/draw/line_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "mha/base/error.hpp"
#include "mha/draw/heatmap.hpp"
#include "mha/draw/text.hpp"

namespace mha {

const Rgb kTableau10[10] = {
    {78, 121, 167}, {242, 142, 43},  {225, 87, 89},   {118, 183, 178}, {89, 161, 79},
    {237, 201, 72}, {176, 122, 161}, {255, 157, 167}, {156, 117, 95},  {186, 176, 172},
};

namespace {

// Colors and type sizes (FreeType pixel sizes of DejaVu Sans), as heatmap.cpp.
constexpr Rgb kInk{34, 34, 34}, kFrame{90, 90, 90}, kGrid{232, 232, 232},
    kLegendFrame{200, 200, 200};
constexpr int kTitlePx = 15, kAxisPx = 12, kTickPx = 11, kLegendPx = 12;
// Layout, in pixels.
constexpr int kMargin = 12;             // around everything
constexpr int kTick = 4, kTickGap = 3;  // tick mark length, tick to its text
constexpr int kLabelGap = 6;            // tick numbers to the axis label
constexpr int kTitleGap = 8;            // title to the plot
constexpr int kLegendGap = 16;          // plot to legend
constexpr int kLegendPad = 6;           // inside the legend's frame
constexpr int kSwatch = 24, kSwatchGap = 6, kLegendColGap = 12;
constexpr int kMaxLegendText = 160;  // longer names get an ellipsis
constexpr int kMinPlot = 40;
constexpr int kMinWidth = 200, kMinHeight = 150;
constexpr double kLineHalfWidth = 1.0;  // 2-pixel lines

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string series_name(const LineChart& chart, std::size_t i) {
  const std::string& n = chart.series[i].name;
  return "series " + std::to_string(i) + (n.empty() ? "" : " ('" + n + "')");
}

// Drops a minus sign from a zero ("-0", "-0.00").
std::string clean_zero(std::string s) {
  if (!s.empty() && s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

// One axis: its range, its ticks and their texts, and where a value falls.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
  std::vector<std::string> labels;
  // Position of v in [0, 1] along the axis.
  double frac(double v) const {
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
};

// The step, 1, 2 or 5 times a power of 10, of about `target` intervals over span.
double nice_step(double span, int target) {
  const double raw = span / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm <= 1 + 1e-9 ? 1 : norm <= 2 + 1e-9 ? 2 : norm <= 5 + 1e-9 ? 5 : 10) * mag;
}

Axis linear_axis(double lo, double hi, int target) {
  const double scale = std::max(std::abs(lo), std::abs(hi));
  if (hi - lo <= scale * 1e-12) {  // one value: widen it
    const double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= d, hi += d;
  }
  if (!std::isfinite(hi - lo))
    fail_input("line chart: the values span " + num(lo) + " to " + num(hi) +
               ", too wide a range to draw");
  const double step = nice_step(hi - lo, target);
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  Axis a;
  a.lo = first * step, a.hi = last * step;
  for (double k = first; k <= last + 0.5; ++k) a.ticks.push_back(k * step);
  // Texts: as many decimals as the step has, or exponents for large and small numbers.
  const double top = std::max(std::abs(a.lo), std::abs(a.hi));
  const int step_exp = static_cast<int>(std::floor(std::log10(step) + 1e-9));
  const bool scientific = top >= 1e6 || step_exp < -4;
  for (double t : a.ticks) {
    char buf[48];
    if (std::abs(t) < step * 1e-6) t = 0;
    if (scientific) {
      const int digits =
          std::max(0, static_cast<int>(std::floor(std::log10(top) + 1e-9)) - step_exp);
      std::snprintf(buf, sizeof buf, "%.*e", digits, t);
    } else {
      std::snprintf(buf, sizeof buf, "%.*f", std::max(0, -step_exp), t);
    }
    a.labels.push_back(clean_zero(buf));
  }
  return a;
}

// "2", "0.05", "1e6", "5e-7": m * 10^k for m in {1, 2, 5}.
std::string log_label(double v) {
  const int k = static_cast<int>(std::floor(std::log10(v) + 1e-9));
  const int m = static_cast<int>(std::lround(v / std::pow(10.0, k)));
  char buf[32];
  if (k >= -4 && k <= 5)
    std::snprintf(buf, sizeof buf, "%.*f", std::max(0, -k), v);
  else
    std::snprintf(buf, sizeof buf, "%de%d", m, k);
  return buf;
}

// m * 10^k for m in {1, 2, 5}: the largest at or below v (down) or smallest at or above.
double nice_125(double v, bool down) {
  const int k = static_cast<int>(std::floor(std::log10(v)));
  const double p = std::pow(10.0, k);
  if (down) {
    for (double m : {10.0, 5.0, 2.0, 1.0})
      if (m * p <= v * (1 + 1e-12)) return m * p;
    return p / 2;
  }
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v * (1 - 1e-12)) return m * p;
  return 20 * p;
}

int max_text_width(const std::vector<std::string>& texts, int px) {
  int w = 0;
  for (const auto& t : texts) w = std::max(w, measure_text(t, px).width);
  return w;
}

// Whether the texts of `a` fit `pixels` along the axis with 10 pixels between them.
bool labels_fit(const Axis& a, int pixels) {
  const int need = max_text_width(a.labels, kTickPx) + 10;
  for (std::size_t i = 1; i < a.ticks.size(); ++i)
    if ((a.frac(a.ticks[i]) - a.frac(a.ticks[i - 1])) * (pixels - 1) < need) return false;
  return true;
}

// The x axis across `pixels`: ticks about 90 pixels apart, fewer if their texts would touch.
// Positions 0 .. n-1 named by `names`, each shortened to its share of the width.
Axis category_axis(const std::vector<std::string>& names, int pixels) {
  Axis a;
  const double n = static_cast<double>(names.size());
  a.lo = -0.5, a.hi = n - 0.5;
  const int room = std::max(8, static_cast<int>(pixels / n) - 6);
  for (std::size_t i = 0; i < names.size(); ++i) {
    a.ticks.push_back(static_cast<double>(i));
    a.labels.push_back(fit_text(names[i], kTickPx, room));
  }
  return a;
}

Axis x_axis(double lo, double hi, bool log, int pixels) {
  if (!log) {
    Axis a;
    for (int target = std::max(2, pixels / 90); target >= 1; --target) {
      a = linear_axis(lo, hi, target);
      if (labels_fit(a, pixels)) break;
    }
    return a;
  }
  Axis a;
  a.log = true;
  a.lo = nice_125(lo, true), a.hi = nice_125(hi, false);
  if (a.hi <= a.lo) a.lo = nice_125(a.lo * 0.999, true), a.hi = nice_125(a.hi * 1.001, false);
  const double decades = std::log10(a.hi / a.lo);
  if (decades > 3)
    a.lo = std::pow(10.0, std::floor(std::log10(lo) + 1e-9)),
    a.hi = std::pow(10.0, std::ceil(std::log10(hi) - 1e-9));
  const int k0 = static_cast<int>(std::floor(std::log10(a.lo) + 1e-9));
  const int k1 = static_cast<int>(std::ceil(std::log10(a.hi) - 1e-9));
  auto in_range = [&](double v) { return v >= a.lo * (1 - 1e-9) && v <= a.hi * (1 + 1e-9); };
  auto make = [&](const std::vector<double>& ticks) {
    a.ticks.clear(), a.labels.clear();
    for (double t : ticks) {
      if (!in_range(t)) continue;
      a.ticks.push_back(t);
      a.labels.push_back(log_label(t));
    }
  };
  // First choice: 1, 2, 5 in each decade (up to 3 decades).
  if (decades <= 3) {
    std::vector<double> t;
    for (int k = k0; k <= k1; ++k)
      for (double m : {1.0, 2.0, 5.0}) t.push_back(m * std::pow(10.0, k));
    make(t);
    if (labels_fit(a, pixels)) return a;
  }
  // Then every decade, or every `stride` decades; the ends when fewer than 2 fall inside.
  for (int stride = 1;; ++stride) {
    std::vector<double> t;
    for (int k = k0; k <= k1; ++k)
      if ((k - k0) % stride == 0) t.push_back(std::pow(10.0, k));
    make(t);
    if (a.ticks.size() < 2) make({a.lo, a.hi});
    if (labels_fit(a, pixels) || a.ticks.size() <= 2) return a;
  }
}

// A series' pixels: coverage accumulated as the max over its segments, so
// that joints are not darker than the lines, then blended once.
class Coverage {
 public:
  Coverage(int w, int h) : w_(w), h_(h), cov_(static_cast<std::size_t>(w) * h, 0.0f) {}

  // A segment with round ends, kLineHalfWidth either side of its axis.
  void segment(double x0, double y0, double x1, double y1) {
    const double r = kLineHalfWidth + 0.5;
    const int bx0 = std::max(0, static_cast<int>(std::floor(std::min(x0, x1) - r)));
    const int by0 = std::max(0, static_cast<int>(std::floor(std::min(y0, y1) - r)));
    const int bx1 = std::min(w_ - 1, static_cast<int>(std::ceil(std::max(x0, x1) + r)));
    const int by1 = std::min(h_ - 1, static_cast<int>(std::ceil(std::max(y0, y1) + r)));
    const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    for (int y = by0; y <= by1; ++y)
      for (int x = bx0; x <= bx1; ++x) {
        double t = len2 > 0 ? ((x - x0) * dx + (y - y0) * dy) / len2 : 0;
        t = std::clamp(t, 0.0, 1.0);
        const double d = std::hypot(x - (x0 + t * dx), y - (y0 + t * dy));
        const double c = std::clamp(r - d, 0.0, 1.0);
        float& cell = cov_[static_cast<std::size_t>(y) * w_ + x];
        if (c > cell) cell = static_cast<float>(c);
      }
    touched_ = true;
    tx0_ = std::min(tx0_, bx0), ty0_ = std::min(ty0_, by0);
    tx1_ = std::max(tx1_, bx1), ty1_ = std::max(ty1_, by1);
  }

  // Blends c over the image by the coverage, and clears it.
  void flush(Image& img, Rgb c) {
    if (!touched_) return;
    for (int y = ty0_; y <= ty1_; ++y)
      for (int x = tx0_; x <= tx1_; ++x) {
        float& cell = cov_[static_cast<std::size_t>(y) * w_ + x];
        if (cell > 0) img.blend(x, y, c, static_cast<int>(std::lround(cell * 255)));
        cell = 0;
      }
    touched_ = false;
    tx0_ = ty0_ = std::numeric_limits<int>::max();
    tx1_ = ty1_ = -1;
  }

 private:
  int w_, h_;
  std::vector<float> cov_;
  bool touched_ = false;
  int tx0_ = std::numeric_limits<int>::max(), ty0_ = std::numeric_limits<int>::max();
  int tx1_ = -1, ty1_ = -1;
};

// The marker of series i: a circle, square, triangle or diamond about 7
// pixels across, centered on (cx, cy); the center pixel always takes c.
void draw_marker(Image& img, int cx, int cy, std::size_t series, Rgb c) {
  const int shape = static_cast<int>(series / 10 % 4);
  for (int dy = -4; dy <= 4; ++dy)
    for (int dx = -4; dx <= 4; ++dx) {
      double cov = 0;
      switch (shape) {
        case 0:  // circle, anti-aliased edge
          cov = std::clamp(3.5 - std::hypot(dx, dy), 0.0, 1.0);
          break;
        case 1:  // square
          cov = std::max(std::abs(dx), std::abs(dy)) <= 2 ? 1 : 0;
          break;
        case 2: {  // triangle, point up
          const int half = dy < -3 || dy > 2 ? -1 : (dy + 3) * 3 / 5;
          cov = std::abs(dx) <= half ? 1 : 0;
          break;
        }
        default:  // diamond
          cov = std::abs(dx) + std::abs(dy) <= 3 ? 1 : 0;
      }
      img.blend(cx + dx, cy + dy, c, static_cast<int>(std::lround(cov * 255)));
    }
}

void draw_centered(Image& img, int cx, int y, const std::string& s, int px, Rgb c) {
  draw_text(img, cx - measure_text(s, px).width / 2, y, s, px, c);
}

void validate(const LineChart& chart) {
  if (chart.width < kMinWidth || chart.height < kMinHeight || chart.width > kMaxPlotSide ||
      chart.height > kMaxPlotSide)
    fail_input("line chart: size " + std::to_string(chart.width) + "x" +
               std::to_string(chart.height) + " is outside " + std::to_string(kMinWidth) + "x" +
               std::to_string(kMinHeight) + " to " + std::to_string(kMaxPlotSide) + "x" +
               std::to_string(kMaxPlotSide));
  if (chart.series.empty()) fail_input("line chart: no series to draw");
  bool any = false;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    if (s.x.size() != s.y.size())
      fail_input("line chart: " + series_name(chart, i) + " has " + std::to_string(s.x.size()) +
                 " x values and " + std::to_string(s.y.size()) + " y values; expected as many");
    if ((!s.lo.empty() || !s.hi.empty()) &&
        (s.lo.size() != s.x.size() || s.hi.size() != s.x.size()))
      fail_input("line chart: " + series_name(chart, i) + " has " + std::to_string(s.x.size()) +
                 " points but " + std::to_string(s.lo.size()) + " lo and " +
                 std::to_string(s.hi.size()) + " hi values; expected one each per point");
    for (std::size_t j = 0; j < s.x.size(); ++j) {
      if (!std::isfinite(s.x[j]))
        fail_input("line chart: " + series_name(chart, i) + " has x = " + num(s.x[j]) +
                   " at point " + std::to_string(j) + "; expected a finite x");
      if (!chart.x_categories.empty() &&
          !(s.x[j] >= 0 && s.x[j] < static_cast<double>(chart.x_categories.size())))
        fail_input("line chart: " + series_name(chart, i) + " has x = " + num(s.x[j]) +
                   " at point " + std::to_string(j) + "; expected a category's position, 0 to " +
                   std::to_string(chart.x_categories.size() - 1));
      if (chart.log_x && !(s.x[j] > 0))
        fail_input("line chart: " + series_name(chart, i) + " has x = " + num(s.x[j]) +
                   " at point " + std::to_string(j) + "; a log x axis needs x > 0");
      any = any || std::isfinite(s.y[j]);
    }
  }
  if (!any) fail_input("line chart: no point to draw (every y is NaN or infinite, or no points)");
}

// The data's extremes: x over every point, y over the finite ones.
struct DataBounds {
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_min = x_min, y_max = -x_min;
};

DataBounds data_bounds(const LineChart& chart) {
  DataBounds d;
  for (const ChartSeries& s : chart.series)
    for (std::size_t j = 0; j < s.x.size(); ++j) {
      d.x_min = std::min(d.x_min, s.x[j]), d.x_max = std::max(d.x_max, s.x[j]);
      if (std::isfinite(s.y[j]))
        d.y_min = std::min(d.y_min, s.y[j]), d.y_max = std::max(d.y_max, s.y[j]);
      for (const auto* range : {&s.lo, &s.hi})  // error bars stay inside the plot
        if (!range->empty() && std::isfinite(s.y[j]) && std::isfinite((*range)[j]))
          d.y_min = std::min(d.y_min, (*range)[j]), d.y_max = std::max(d.y_max, (*range)[j]);
    }
  return d;
}

// The plot area's rows: below the title, above the tick numbers and the x label.
Box plot_rows(const LineChart& chart) {
  const int axis_h = measure_text("Xg", kAxisPx).height;
  const int tick_h = measure_text("0", kTickPx).height;
  const int title_h = chart.title.empty() ? 0 : measure_text(chart.title, kTitlePx).height;
  Box plot;
  plot.y = kMargin + (chart.title.empty() ? 0 : title_h + kTitleGap) + 1;
  const int below = 1 + kTick + kTickGap + tick_h + (chart.x_label.empty() ? 0 : 4 + axis_h);
  plot.h = chart.height - kMargin - below - plot.y;
  if (plot.h < kMinPlot)
    fail_input("line chart: height " + std::to_string(chart.height) + " leaves the plot " +
               std::to_string(plot.h) + " pixels tall; expected at least " +
               std::to_string(kMinPlot));
  return plot;
}

// The legend at the top right, level with the plot: rows down as far as the
// plot goes, then more columns.
struct Legend {
  Box box;
  std::vector<std::string> names;  // shortened to kMaxLegendText
  int rows = 1, col_w = 0, row_h = 0, text_h = 0;
};

Legend legend_layout(const LineChart& chart, const Box& plot) {
  Legend g;
  const std::size_t n = chart.series.size();
  g.text_h = measure_text("Xg", kLegendPx).height;
  g.row_h = std::max(g.text_h, 9) + 4;
  for (const ChartSeries& s : chart.series)
    g.names.push_back(fit_text(s.name, kLegendPx, kMaxLegendText));
  const int rows_fit = std::max(1, (plot.h - 2 * kLegendPad) / g.row_h);
  const int cols = static_cast<int>((n + rows_fit - 1) / rows_fit);
  g.rows = static_cast<int>((n + cols - 1) / cols);
  g.col_w = kSwatch + kSwatchGap + max_text_width(g.names, kLegendPx);
  g.box.w = 2 * kLegendPad + cols * g.col_w + (cols - 1) * kLegendColGap;
  g.box.h = 2 * kLegendPad + g.rows * g.row_h;
  g.box.x = chart.width - kMargin - 1 - g.box.w;
  g.box.y = plot.y;
  return g;
}

// The plot area's columns: right of the y label and ya's tick numbers, left
// of the legend.
void plot_columns(const LineChart& chart, const Axis& ya, const Legend& legend, Box& plot) {
  const int axis_h = measure_text("Xg", kAxisPx).height;
  plot.x = kMargin + (chart.y_label.empty() ? 0 : axis_h + kLabelGap) +
           max_text_width(ya.labels, kTickPx) + kTickGap + kTick + 1;
  plot.w = legend.box.x - 1 - kLegendGap - 1 - plot.x;
  if (plot.w < kMinPlot)
    fail_input("line chart: width " + std::to_string(chart.width) + " leaves the plot " +
               std::to_string(plot.w) + " pixels wide beside the legend; expected at least " +
               std::to_string(kMinPlot));
}

// The axes on the plot area: where a value falls, in pixels.
struct Axes {
  Box plot;
  Axis x, y;
  int px(double v) const {
    return plot.x + static_cast<int>(std::lround(x.frac(v) * (plot.w - 1)));
  }
  int py(double v) const {
    return plot.y + plot.h - 1 - static_cast<int>(std::lround(y.frac(v) * (plot.h - 1)));
  }
  // The top of the x tick numbers.
  int x_text_y() const { return plot.y + plot.h + 1 + kTick + kTickGap; }
};

// Grid, frame, ticks and their numbers.
void draw_axes(Image& img, const Axes& a) {
  const Box& plot = a.plot;
  for (double t : a.x.ticks) img.fill_rect(a.px(t), plot.y, 1, plot.h, kGrid);
  for (double t : a.y.ticks) img.fill_rect(plot.x, a.py(t), plot.w, 1, kGrid);
  img.frame(plot, kFrame);
  for (std::size_t i = 0; i < a.x.ticks.size(); ++i) {
    img.fill_rect(a.px(a.x.ticks[i]), plot.y + plot.h + 1, 1, kTick, kFrame);
    draw_centered(img, a.px(a.x.ticks[i]), a.x_text_y(), a.x.labels[i], kTickPx, kInk);
  }
  const int y_text_right = plot.x - 1 - kTick - kTickGap;
  for (std::size_t i = 0; i < a.y.ticks.size(); ++i) {
    img.fill_rect(plot.x - 1 - kTick, a.py(a.y.ticks[i]), kTick, 1, kFrame);
    const TextBox b = measure_text(a.y.labels[i], kTickPx);
    draw_text(img, y_text_right - b.width, a.py(a.y.ticks[i]) - b.height / 2, a.y.labels[i],
              kTickPx, kInk);
  }
}

// Title and axis labels, shortened to fit.
void draw_titles(Image& img, const LineChart& chart, const Axes& a) {
  const int W = chart.width;
  if (!chart.title.empty())
    draw_centered(img, W / 2, kMargin, fit_text(chart.title, kTitlePx, W - 2 * kMargin), kTitlePx,
                  kInk);
  if (!chart.x_label.empty())
    draw_centered(img, a.plot.center_x(), a.x_text_y() + measure_text("0", kTickPx).height + 4,
                  fit_text(chart.x_label, kAxisPx, a.plot.w), kAxisPx, kInk);
  if (!chart.y_label.empty()) {
    const std::string s = fit_text(chart.y_label, kAxisPx, a.plot.h);
    draw_text(img, kMargin, a.plot.center_y() - measure_text(s, kAxisPx).width / 2, s, kAxisPx,
              kInk, TextDirection::up);
  }
}

// Each series' colour and the pixels of its points, (-1, -1) for a gap.
void place_points(const LineChart& chart, const Axes& a, ChartLayout& L) {
  L.points.resize(chart.series.size());
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    L.colors.push_back(kTableau10[i % 10]);
    for (std::size_t j = 0; j < s.x.size(); ++j)
      L.points[i].push_back(std::isfinite(s.y[j]) ? std::make_pair(a.px(s.x[j]), a.py(s.y[j]))
                                                  : std::make_pair(-1, -1));
  }
  L.ranges.resize(chart.series.size());
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    if (s.lo.empty()) continue;
    for (std::size_t j = 0; j < s.x.size(); ++j) {
      const bool bar = std::isfinite(s.y[j]) && std::isfinite(s.lo[j]) && std::isfinite(s.hi[j]);
      L.ranges[i].push_back(bar ? std::make_pair(a.py(s.hi[j]), a.py(s.lo[j]))
                                : std::make_pair(-1, -1));
    }
  }
}

// Every line first, then every marker, so no line hides a point.
void draw_series(Image& img, const ChartLayout& L, Coverage& cov) {
  constexpr int kCap = 4;  // an error bar's cap reaches this far either side
  for (std::size_t i = 0; i < L.points.size(); ++i) {
    const auto& p = L.points[i];
    for (std::size_t j = 1; j < p.size() && L.lines; ++j)
      if (p[j - 1].first >= 0 && p[j].first >= 0)
        cov.segment(p[j - 1].first, p[j - 1].second, p[j].first, p[j].second);
    for (std::size_t j = 0; j < L.ranges[i].size(); ++j) {
      const auto [top, bottom] = L.ranges[i][j];
      if (top < 0) continue;
      const int x = p[j].first;
      cov.segment(x, top, x, bottom);
      cov.segment(x - kCap, top, x + kCap, top);
      cov.segment(x - kCap, bottom, x + kCap, bottom);
    }
    cov.flush(img, L.colors[i]);
  }
  for (std::size_t i = 0; i < L.points.size(); ++i)
    for (const auto& p : L.points[i])
      if (p.first >= 0) draw_marker(img, p.first, p.second, i, L.colors[i]);
}

// The legend, down each column in series order.
void draw_legend(Image& img, const Legend& g, const std::vector<Rgb>& colors, Coverage& cov) {
  img.frame(g.box, kLegendFrame);
  for (std::size_t i = 0; i < g.names.size(); ++i) {
    const int col = static_cast<int>(i) / g.rows, row = static_cast<int>(i) % g.rows;
    const int x = g.box.x + kLegendPad + col * (g.col_w + kLegendColGap);
    const int y = g.box.y + kLegendPad + row * g.row_h;
    const int cy = y + g.row_h / 2;
    cov.segment(x + 1, cy, x + kSwatch - 2, cy);
    cov.flush(img, colors[i]);
    draw_marker(img, x + kSwatch / 2, cy, i, colors[i]);
    draw_text(img, x + kSwatch + kSwatchGap, cy - g.text_h / 2, g.names[i], kLegendPx, kInk);
  }
}

}  // namespace

RenderedChart render_line_chart(const LineChart& chart) {
  validate(chart);
  const DataBounds data = data_bounds(chart);
  // The y axis first: its tick numbers' width places the plot's left edge.
  Box plot = plot_rows(chart);
  const Axis ya = linear_axis(data.y_min, data.y_max, std::max(2, plot.h / 50));
  const Legend legend = legend_layout(chart, plot);
  plot_columns(chart, ya, legend, plot);
  const Axes axes{plot,
                  chart.x_categories.empty() ? x_axis(data.x_min, data.x_max, chart.log_x, plot.w)
                                             : category_axis(chart.x_categories, plot.w),
                  ya};

  RenderedChart out;
  out.image = Image(chart.width, chart.height);
  ChartLayout& L = out.layout;
  L.plot_area = plot;
  L.legend = legend.box;
  L.x_lo = axes.x.lo, L.x_hi = axes.x.hi, L.y_lo = ya.lo, L.y_hi = ya.hi;
  L.x_ticks = axes.x.ticks, L.y_ticks = ya.ticks;
  L.lines = chart.x_categories.empty();
  draw_axes(out.image, axes);
  draw_titles(out.image, chart, axes);
  place_points(chart, axes, L);
  Coverage cov(chart.width, chart.height);
  draw_series(out.image, L, cov);
  draw_legend(out.image, legend, L.colors, cov);
  return out;
}

}  // namespace mha
