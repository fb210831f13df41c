// Line charts of sweep results (draw/line_chart): each point's pixel takes
// its series' colour, points map monotonically, the nice tick ranges cover
// the data, log x axes, gaps at NaN, the legend holds every series' colour,
// many series, and the errors for bad input.
#include "mha/draw/line_chart.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "mha/draw/image.hpp"
#include "mha/draw/png.hpp"
#include "test_util.hpp"

namespace {

using mha::ChartLayout;
using mha::ChartSeries;
using mha::LineChart;
using mha::Rgb;
using mha::test::require_invalid;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Three series over the same sweep grid, apart everywhere.
LineChart three_series() {
  LineChart c;
  c.title = "compute time against seq_len";
  c.x_label = "seq_len";
  c.y_label = "ms";
  c.series.push_back({"h = 2", {1, 3, 6, 10, 17}, {0.5, 1.1, 2.3, 3.9, 6.2}});
  c.series.push_back({"h = 4", {1, 3, 6, 10, 17}, {2.0, 3.4, 5.1, 7.7, 11.8}});
  c.series.push_back({"h = 8", {1, 3, 6, 10, 17}, {4.1, 6.9, 9.6, 13.0, 19.3}});
  return c;
}

bool inside(const mha::Box& b, int x, int y) {
  return x >= b.x && y >= b.y && x < b.x + b.w && y < b.y + b.h;
}

// Pixels of exactly colour c inside box b.
int count_color(const mha::Image& img, const mha::Box& b, Rgb c) {
  int n = 0;
  for (int y = b.y; y < b.y + b.h; ++y)
    for (int x = b.x; x < b.x + b.w; ++x)
      if (img.contains(x, y) && img.at(x, y) == c) ++n;
  return n;
}

// True if step is 1, 2 or 5 times a power of 10.
bool nice(double step) {
  const double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  return std::abs(m - 1) < 1e-6 || std::abs(m - 2) < 1e-6 || std::abs(m - 5) < 1e-6;
}

void require_ticks_nice(const std::vector<double>& ticks, double lo, double hi) {
  REQUIRE(ticks.size() >= 2);
  CHECK(ticks.front() == Approx(lo));
  CHECK(ticks.back() == Approx(hi));
  const double step = ticks[1] - ticks[0];
  CHECK(nice(step));
  for (std::size_t i = 1; i < ticks.size(); ++i)
    CHECK(ticks[i] - ticks[i - 1] == Approx(step).epsilon(1e-9));
}

}  // namespace

TEST_CASE("line chart: each point's pixel has its series' colour", "[line_chart]") {
  const LineChart c = three_series();
  const mha::RenderedChart r = mha::render_line_chart(c);
  const ChartLayout& L = r.layout;
  REQUIRE(r.image.width() == 800);
  REQUIRE(r.image.height() == 500);
  REQUIRE(L.points.size() == 3);
  REQUIRE(L.colors.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(L.colors[i] == mha::kTableau10[i]);
    REQUIRE(L.points[i].size() == c.series[i].x.size());
    for (const auto& p : L.points[i]) {
      INFO("series " << i << " point (" << p.first << ", " << p.second << ")");
      REQUIRE(inside(L.plot_area, p.first, p.second));
      CHECK(r.image.at(p.first, p.second) == L.colors[i]);
    }
  }
  // The colours differ from each other and from the background.
  CHECK(L.colors[0] != L.colors[1]);
  CHECK(L.colors[1] != L.colors[2]);
  CHECK(L.colors[0] != Rgb{255, 255, 255});
  // The line runs between points: the pixel halfway along a segment has the colour.
  const auto& p0 = L.points[0][3];
  const auto& p1 = L.points[0][4];
  CHECK(r.image.at((p0.first + p1.first) / 2, (p0.second + p1.second) / 2) == L.colors[0]);
  // Encodes as PNG.
  std::ostringstream png;
  mha::write_png(png, r.image, "chart.png");
  CHECK(png.str().size() > 1000);
}

TEST_CASE("line chart: points map monotonically onto pixels", "[line_chart]") {
  LineChart c;
  c.series.push_back({"rising", {-3, -1, 0, 2.5, 4}, {-10, -2, 0, 3, 40}});
  c.series.push_back({"falling", {-2, 1, 3}, {30, 5, -7}});
  const ChartLayout L = mha::render_line_chart(c).layout;
  for (std::size_t i = 0; i < c.series.size(); ++i) {
    const ChartSeries& s = c.series[i];
    for (std::size_t j = 0; j < s.x.size(); ++j)
      for (std::size_t k = 0; k < s.x.size(); ++k) {
        if (s.x[j] < s.x[k]) CHECK(L.points[i][j].first < L.points[i][k].first);
        if (s.y[j] < s.y[k]) CHECK(L.points[i][j].second > L.points[i][k].second);
      }
  }
  // Across series too: the same x lands on the same column.
  LineChart d;
  d.series.push_back({"a", {0, 10}, {1, 2}});
  d.series.push_back({"b", {0, 10}, {5, 6}});
  const ChartLayout M = mha::render_line_chart(d).layout;
  CHECK(M.points[0][0].first == M.points[1][0].first);
  CHECK(M.points[0][1].first == M.points[1][1].first);
  CHECK(M.points[0][0].second > M.points[1][0].second);
}

TEST_CASE("line chart: the nice tick ranges cover the data", "[line_chart]") {
  const LineChart c = three_series();
  const ChartLayout L = mha::render_line_chart(c).layout;
  CHECK(L.x_lo <= 1);
  CHECK(L.x_hi >= 17);
  CHECK(L.y_lo <= 0.5);
  CHECK(L.y_hi >= 19.3);
  // Not needlessly wide: less than two steps beyond the data.
  const double x_step = L.x_ticks[1] - L.x_ticks[0], y_step = L.y_ticks[1] - L.y_ticks[0];
  CHECK(L.x_lo > 1 - x_step);
  CHECK(L.x_hi < 17 + x_step);
  CHECK(L.y_lo > 0.5 - y_step);
  CHECK(L.y_hi < 19.3 + y_step);
  require_ticks_nice(L.x_ticks, L.x_lo, L.x_hi);
  require_ticks_nice(L.y_ticks, L.y_lo, L.y_hi);
  CHECK(L.y_ticks.size() >= 4);

  SECTION("small, negative and single values") {
    LineChart d;
    d.series.push_back({"s", {0.001, 0.002, 0.0037}, {-0.013, 0.0004, -0.0021}});
    const ChartLayout M = mha::render_line_chart(d).layout;
    CHECK(M.x_lo <= 0.001);
    CHECK(M.x_hi >= 0.0037);
    CHECK(M.y_lo <= -0.013);
    CHECK(M.y_hi >= 0.0004);
    require_ticks_nice(M.x_ticks, M.x_lo, M.x_hi);
    require_ticks_nice(M.y_ticks, M.y_lo, M.y_hi);

    LineChart e;
    e.series.push_back({"flat", {5, 5}, {3, 3}});
    const ChartLayout N = mha::render_line_chart(e).layout;
    CHECK(N.x_lo < 5);
    CHECK(N.x_hi > 5);
    CHECK(N.y_lo < 3);
    CHECK(N.y_hi > 3);
  }
}

TEST_CASE("line chart: a log x axis", "[line_chart]") {
  LineChart c;
  c.log_x = true;
  c.series.push_back({"t", {1, 10, 100, 1000}, {1, 2, 3, 4}});
  const mha::RenderedChart r = mha::render_line_chart(c);
  const ChartLayout& L = r.layout;
  CHECK(L.x_lo == Approx(1));
  CHECK(L.x_hi == Approx(1000));
  const auto& p = L.points[0];
  // Decades equally apart (within rounding).
  CHECK(std::abs((p[1].first - p[0].first) - (p[2].first - p[1].first)) <= 1);
  CHECK(std::abs((p[2].first - p[1].first) - (p[3].first - p[2].first)) <= 1);
  CHECK(p[0].first == L.plot_area.x);
  CHECK(p[3].first == L.plot_area.x + L.plot_area.w - 1);
  for (double t : L.x_ticks) {
    CHECK(nice(t));
    CHECK(t >= L.x_lo * (1 - 1e-9));
    CHECK(t <= L.x_hi * (1 + 1e-9));
  }
  for (const auto& q : p) CHECK(r.image.at(q.first, q.second) == L.colors[0]);

  // A range that is no decade: to 1/2/5 steps around the data.
  LineChart d;
  d.log_x = true;
  d.series.push_back({"h", {3, 4, 8, 16}, {1, 2, 3, 4}});
  const ChartLayout M = mha::render_line_chart(d).layout;
  CHECK(M.x_lo == Approx(2));
  CHECK(M.x_hi == Approx(20));
  for (std::size_t j = 1; j < 4; ++j) CHECK(M.points[0][j - 1].first < M.points[0][j].first);
}

TEST_CASE("line chart: a NaN y is a gap in the line", "[line_chart]") {
  LineChart c;
  c.series.push_back({"s", {0, 1, 2}, {1, kNaN, 1}});
  c.series.push_back({"other", {0, 2}, {0, 2}});  // keeps y from being a single value
  const mha::RenderedChart gap = mha::render_line_chart(c);
  const auto& p = gap.layout.points[0];
  CHECK(p[1] == std::make_pair(-1, -1));
  const Rgb color = gap.layout.colors[0];
  CHECK(gap.image.at(p[0].first, p[0].second) == color);
  CHECK(gap.image.at(p[2].first, p[2].second) == color);
  const int mid_x = (p[0].first + p[2].first) / 2 + 7, mid_y = p[0].second;
  CHECK(gap.image.at(mid_x, mid_y) != color);

  // Without the NaN the same pixel is on the line.
  c.series[0].y[1] = 1;
  const mha::RenderedChart joined = mha::render_line_chart(c);
  CHECK(joined.layout.points[0][0] == p[0]);
  CHECK(joined.image.at(mid_x, mid_y) == color);
}

TEST_CASE("line chart: a categorical x axis names its values and joins no points", "[line_chart]") {
  // Two checkpoints of a model sweep: positions 0 and 1, not a quantity between them.
  LineChart c;
  c.x_categories = {"models/gpt2", "models/qwen2"};
  c.series.push_back({"text=a", {0, 1}, {1.24e6, 3.0e5}});
  c.series.push_back({"text=b", {0, 1}, {1.72e5, 9.0e5}});
  const mha::RenderedChart r = mha::render_line_chart(c);
  CHECK(r.layout.x_ticks == std::vector<double>{0, 1});
  CHECK(r.layout.x_lo == Approx(-0.5));
  CHECK(r.layout.x_hi == Approx(1.5));
  CHECK_FALSE(r.layout.lines);
  // The points sit a quarter and three quarters across, and nothing of the series' colour
  // lies between them (a line would cross the middle column).
  const auto& p = r.layout.points[0];
  const mha::Box& a = r.layout.plot_area;
  CHECK(std::abs(p[0].first - (a.x + (a.w - 1) / 4)) <= 1);
  CHECK(std::abs(p[1].first - (a.x + 3 * (a.w - 1) / 4)) <= 1);
  const mha::Box middle{a.x + a.w / 2 - 2, a.y, 5, a.h};
  CHECK(count_color(r.image, middle, r.layout.colors[0]) == 0);
  CHECK(count_color(r.image, middle, r.layout.colors[1]) == 0);
  // The same points on a numeric axis are joined.
  c.x_categories.clear();
  const mha::RenderedChart joined = mha::render_line_chart(c);
  CHECK(joined.layout.lines);
  CHECK(count_color(joined.image, joined.layout.plot_area, joined.layout.colors[0]) >
        count_color(r.image, r.layout.plot_area, r.layout.colors[0]) + 100);
  // A position outside the categories is refused.
  c.x_categories = {"only"};
  require_invalid([&] { mha::render_line_chart(c); }, "expected a category's position");
}

TEST_CASE("line chart: the legend shows each series' colour", "[line_chart]") {
  const LineChart c = three_series();
  const mha::RenderedChart r = mha::render_line_chart(c);
  const ChartLayout& L = r.layout;
  const mha::Box& legend = L.legend;
  REQUIRE(legend.w > 0);
  REQUIRE(legend.h > 0);
  REQUIRE(inside({0, 0, r.image.width(), r.image.height()}, legend.x, legend.y));
  REQUIRE(inside({0, 0, r.image.width(), r.image.height()}, legend.x + legend.w - 1,
                 legend.y + legend.h - 1));
  // Beside the plot, not on it.
  CHECK(legend.x > L.plot_area.x + L.plot_area.w);
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("series " << i);
    CHECK(count_color(r.image, legend, L.colors[i]) >= 30);
  }
  // Each series' swatch sits in its own row, in series order.
  auto first_row = [&](Rgb col) {
    for (int y = legend.y; y < legend.y + legend.h; ++y)
      for (int x = legend.x; x < legend.x + legend.w; ++x)
        if (r.image.at(x, y) == col) return y;
    return -1;
  };
  CHECK(first_row(L.colors[0]) < first_row(L.colors[1]));
  CHECK(first_row(L.colors[1]) < first_row(L.colors[2]));
  // Some text beside the swatches: dark pixels.
  int dark = 0;
  for (int y = legend.y; y < legend.y + legend.h; ++y)
    for (int x = legend.x; x < legend.x + legend.w; ++x)
      if (r.image.at(x, y).r < 100 && r.image.at(x, y).g < 100) ++dark;
  CHECK(dark > 20);
}

TEST_CASE("line chart: many series stay readable", "[line_chart]") {
  LineChart c;
  c.y_label = "value";
  for (int i = 0; i < 14; ++i)
    c.series.push_back({"series number " + std::to_string(i),
                        {1, 2, 3, 4},
                        {10.0 * i, 10.0 * i + 1, 10.0 * i + 3, 10.0 * i + 2}});
  const mha::RenderedChart r = mha::render_line_chart(c);
  const ChartLayout& L = r.layout;
  REQUIRE(L.colors.size() == 14);
  CHECK(L.colors[10] == L.colors[0]);  // the palette repeats; the marker differs
  for (std::size_t i = 0; i < 14; ++i)
    for (const auto& p : L.points[i]) {
      INFO("series " << i);
      CHECK(r.image.at(p.first, p.second) == L.colors[i]);
    }
  for (std::size_t i = 0; i < 10; ++i) CHECK(count_color(r.image, L.legend, L.colors[i]) >= 20);
  CHECK(L.legend.y + L.legend.h <= L.plot_area.y + L.plot_area.h);
  CHECK(L.plot_area.w >= 300);
}

TEST_CASE("line chart: error bars from lo to hi in the series' colour", "[line_chart]") {
  LineChart c = three_series();
  // Series 1 gets ranges (point 2 none); the axis grows to hold the highest hi.
  c.series[1].lo = {1.5, 3.0, kNaN, 7.0, 9.0};
  c.series[1].hi = {2.5, 4.0, kNaN, 8.5, 25.0};
  const mha::RenderedChart r = mha::render_line_chart(c);
  const ChartLayout& L = r.layout;
  CHECK(L.y_hi >= 25.0);
  REQUIRE(L.ranges.size() == 3);
  CHECK(L.ranges[0].empty());
  CHECK(L.ranges[2].empty());
  REQUIRE(L.ranges[1].size() == 5);
  CHECK(L.ranges[1][2] == std::make_pair(-1, -1));
  for (std::size_t j : {0, 1, 3, 4}) {
    const auto [top, bottom] = L.ranges[1][j];
    const auto [x, y] = L.points[1][j];
    INFO("point " << j);
    CHECK(top < y);
    CHECK(bottom > y);
    // The bar's ends and its caps are the series' colour.
    CHECK(r.image.at(x, top) == L.colors[1]);
    CHECK(r.image.at(x, bottom) == L.colors[1]);
    CHECK(r.image.at(x - 3, top) == L.colors[1]);
    CHECK(r.image.at(x + 3, bottom) == L.colors[1]);
  }
  // The long bar of point 4 runs straight up from the marker: a quarter of the
  // way down from its top cap (clear of series 2's marker at the same x) is
  // its colour, where no line of the chart passes.
  const auto [x4, y4] = L.points[1][4];
  const int quarter = L.ranges[1][4].first + (y4 - L.ranges[1][4].first) / 4;
  CHECK(r.image.at(x4, quarter) == L.colors[1]);
  c.series[1].lo.clear();
  c.series[1].hi.clear();
  c.series.push_back({"h = 9", {1}, {25.0}});  // keeps the axis (and the legend's width)
  const mha::RenderedChart no_bars = mha::render_line_chart(c);
  REQUIRE(no_bars.layout.y_hi == L.y_hi);
  REQUIRE(no_bars.layout.points[1][4] == L.points[1][4]);
  CHECK(no_bars.image.at(x4, quarter) == Rgb{255, 255, 255});
  c.series.pop_back();
  c.series[1].lo = {1.5, 3.0, kNaN, 7.0, 9.0};
  c.series[1].hi = {2.5, 4.0, kNaN, 8.5, 25.0};

  c.series[1].hi.pop_back();
  require_invalid([&] { mha::render_line_chart(c); }, "5 points but 5 lo and 4 hi values");
}

TEST_CASE("line chart: bad input", "[line_chart]") {
  LineChart c;
  require_invalid([&] { mha::render_line_chart(c); }, "no series");

  c.series.push_back({"a", {1, 2, 3}, {1, 2}});
  require_invalid([&] { mha::render_line_chart(c); }, "3 x values and 2 y values");

  c.series[0] = {"a", {1, 0, 3}, {1, 2, 3}};
  CHECK_NOTHROW(mha::render_line_chart(c));
  c.log_x = true;
  require_invalid([&] { mha::render_line_chart(c); }, "log x axis needs x > 0");
  c.series[0].x[1] = -2;
  require_invalid([&] { mha::render_line_chart(c); }, "x = -2 at point 1");
  c.log_x = false;

  c.series[0] = {"a", {1, 2}, {kNaN, kNaN}};
  require_invalid([&] { mha::render_line_chart(c); }, "no point to draw");
  c.series[0] = {"a", {}, {}};
  require_invalid([&] { mha::render_line_chart(c); }, "no point to draw");

  c.series[0] = {"a", {1, kNaN}, {1, 2}};
  require_invalid([&] { mha::render_line_chart(c); }, "expected a finite x");

  c.series[0] = {"a", {1, 2}, {1, 2}};
  c.width = 100;
  require_invalid([&] { mha::render_line_chart(c); }, "size 100x500");
  c.width = 800;
  c.series[0].name = std::string(40, 'w');
  for (int i = 0; i < 60; ++i) c.series.push_back({std::string(40, 'w'), {1}, {1}});
  c.height = 150;
  require_invalid([&] { mha::render_line_chart(c); }, "pixels wide beside the legend");
}
