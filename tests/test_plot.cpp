// Attention plots: the viridis table, the RGB image and its PNG encoding
// (decoded again with libpng's reader), text through FreeType, the
// downsampling accumulator (max and mean, blocks straddling cells, many
// threads, NaN) and the rendered plot (size, cell colors, color bar, titles,
// labels), and `mha::run` with plot against a plot of its own attention.npy.
#include <png.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mha/config/config.hpp"
#include "mha/draw/colormap.hpp"
#include "mha/draw/heatmap.hpp"
#include "mha/draw/image.hpp"
#include "mha/draw/png.hpp"
#include "mha/draw/text.hpp"
#include "mha/io/npy.hpp"
#include "mha/run/run.hpp"
#include "test_util.hpp"

namespace {

using mha::AttentionPanels;
using mha::Box;
using mha::Image;
using mha::PlotOptions;
using mha::Reduce;
using mha::Rgb;
using mha::test::require_invalid;
using mha::test::require_runtime;
using mha::test::TempDir;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const Rgb kWhite{255, 255, 255};

// A decoded PNG: width, height and RGB8 pixels, through libpng's simplified reader.
struct Decoded {
  int width = 0, height = 0;
  std::vector<unsigned char> rgb;
  Rgb at(int x, int y) const {
    const unsigned char* p = &rgb[3 * (static_cast<std::size_t>(y) * width + x)];
    return Rgb{p[0], p[1], p[2]};
  }
};

Decoded decode_png(const std::string& bytes) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) != 0);
  image.format = PNG_FORMAT_RGB;
  Decoded d;
  d.width = static_cast<int>(image.width);
  d.height = static_cast<int>(image.height);
  d.rgb.resize(PNG_IMAGE_SIZE(image));
  REQUIRE(png_image_finish_read(&image, nullptr, d.rgb.data(), 0, nullptr) != 0);
  return d;
}

std::string encode(const Image& img) {
  std::ostringstream os;
  mha::write_png(os, img, "test.png");
  return os.str();
}

// The pixel at the center of cell (i, j) of panel p.
Rgb cell_pixel(const mha::Plot& plot, std::size_t p, std::size_t i, std::size_t j) {
  const Box& b = plot.panels[p];
  return plot.image.at(b.x + static_cast<int>(j) * plot.cell_w + plot.cell_w / 2,
                       b.y + static_cast<int>(i) * plot.cell_h + plot.cell_h / 2);
}

// Feeds a (panels, T, S) C-order tensor, one whole map per call.
template <class V>
void feed(AttentionPanels& panels, const std::vector<V>& maps) {
  const std::size_t T = panels.T(), S = panels.S();
  for (std::size_t p = 0; p < panels.panels(); ++p)
    panels.add_rows(p, 0, T, maps.data() + p * T * S);
}

std::vector<double> one_hot_diagonal(std::size_t n) {
  std::vector<double> a(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) a[i * n + i] = 1.0;
  return a;
}

std::size_t count_not(const Image& img, const Box& b, Rgb background) {
  std::size_t n = 0;
  for (int y = b.y; y < b.y + b.h; ++y)
    for (int x = b.x; x < b.x + b.w; ++x) n += img.contains(x, y) && img.at(x, y) != background;
  return n;
}

}  // namespace

TEST_CASE("viridis: matplotlib's table, nearest entry", "[plot]") {
  const auto& t = mha::viridis_table();
  CHECK(t[0] == Rgb{68, 1, 84});       // matplotlib's viridis(0.0), 8-bit
  CHECK(t[128] == Rgb{33, 145, 140});  // teal in the middle
  CHECK(t[255] == Rgb{253, 231, 37});  // yellow at 1.0
  CHECK(mha::viridis(0.0) == t[0]);
  CHECK(mha::viridis(1.0) == t[255]);
  CHECK(mha::viridis(0.5) == t[128]);                  // round(127.5) = 128
  CHECK(mha::viridis(100.0 / 255 + 0.001) == t[100]);  // nearest, not floor
  CHECK(mha::viridis(100.0 / 255 - 0.001) == t[100]);
  CHECK(mha::viridis(-3) == t[0]);
  CHECK(mha::viridis(7) == t[255]);
  CHECK(mha::viridis(kNaN) == t[0]);
  // Perceptually uniform colormaps brighten monotonically.
  auto luma = [](Rgb c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; };
  for (std::size_t i = 1; i < t.size(); ++i) CHECK(luma(t[i]) > luma(t[i - 1]) - 0.5);
}

TEST_CASE("image: fill, clip, frame, blend", "[plot]") {
  Image img(6, 4);
  CHECK(img.at(5, 3) == kWhite);
  img.fill_rect(-2, -2, 4, 4, Rgb{1, 2, 3});  // clipped to (0..1, 0..1)
  CHECK(img.at(0, 0) == Rgb{1, 2, 3});
  CHECK(img.at(1, 1) == Rgb{1, 2, 3});
  CHECK(img.at(2, 1) == kWhite);
  CHECK(img.at(1, 2) == kWhite);
  img.frame(Box{3, 1, 2, 2}, Rgb{9, 9, 9});
  CHECK(img.at(2, 0) == Rgb{9, 9, 9});
  CHECK(img.at(5, 3) == Rgb{9, 9, 9});
  CHECK(img.at(3, 1) == kWhite);  // inside the box: untouched
  img.blend(4, 2, Rgb{0, 0, 0}, 255);
  CHECK(img.at(4, 2) == Rgb{0, 0, 0});
  img.blend(4, 1, Rgb{0, 0, 0}, 0);
  CHECK(img.at(4, 1) == kWhite);
  img.blend(3, 2, Rgb{0, 0, 0}, 128);
  CHECK(img.at(3, 2) == Rgb{127, 127, 127});
  img.set(100, 100, Rgb{});  // outside: ignored
  require_invalid([] { Image(-1, 2); }, "image size -1x2");
}

TEST_CASE("png: libpng decodes what write_png encodes", "[plot]") {
  Image img(7, 5, Rgb{10, 20, 30});
  img.set(0, 0, Rgb{255, 0, 0});
  img.set(6, 4, Rgb{0, 255, 0});
  img.fill_rect(2, 1, 3, 2, Rgb{1, 2, 250});
  const std::string bytes = encode(img);
  REQUIRE(bytes.size() > 8);
  CHECK(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  const Decoded d = decode_png(bytes);
  REQUIRE(d.width == 7);
  REQUIRE(d.height == 5);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x) CHECK(d.at(x, y) == img.at(x, y));
  require_runtime([] { encode(Image(0, 3)); }, "test.png: cannot encode an empty 0x3 image");
}

TEST_CASE("text: the embedded font draws ink inside its box", "[plot]") {
  REQUIRE(mha::embedded_font_size() > 100000);
  const unsigned char* f = mha::embedded_font_data();
  CHECK((f[0] == 0 && f[1] == 1 && f[2] == 0 && f[3] == 0));  // TrueType sfnt version 1.0

  const mha::TextBox box = mha::measure_text("head 3", 14);
  CHECK(box.width > 30);
  CHECK(box.width < 70);
  CHECK(box.height >= 14);
  CHECK(box.ascent < box.height);
  CHECK(mha::measure_text("head 33", 14).width > box.width);
  CHECK(mha::measure_text("", 14).width == 0);

  Image img(100, 60);
  mha::draw_text(img, 10, 5, "head 3", 14, Rgb{0, 0, 0});
  const Box inside{10, 5, box.width, box.height};
  CHECK(count_not(img, inside, kWhite) > 40);
  CHECK(count_not(img, Box{0, 0, 100, 60}, kWhite) == count_not(img, inside, kWhite));
  // Some pixels are fully inked: anti-aliasing, not a grey smear.
  int darkest = 255;
  for (int y = inside.y; y < inside.y + inside.h; ++y)
    for (int x = inside.x; x < inside.x + inside.w; ++x)
      darkest = std::min<int>(darkest, img.at(x, y).r);
  CHECK(darkest < 40);

  // Rotated: the box turns on its side, width becoming height.
  Image up(60, 100);
  mha::draw_text(up, 5, 10, "head 3", 14, Rgb{0, 0, 0}, mha::TextDirection::up);
  const Box turned{5, 10, box.height, box.width};
  CHECK(count_not(up, turned, kWhite) == count_not(up, Box{0, 0, 60, 100}, kWhite));
  CHECK(count_not(up, turned, kWhite) > 40);

  CHECK(mha::fit_text("short", 12, 500) == "short");
  const std::string cut = mha::fit_text("a rather long token label", 12, 50);
  CHECK(mha::measure_text(cut, 12).width <= 50);
  CHECK(cut.size() >= 3);
  CHECK(cut.substr(cut.size() - 3) == "\xe2\x80\xa6");
  // Not UTF-8: measured and drawn as U+FFFD, no crash.
  CHECK(mha::measure_text("\xff\xfe", 12).width > 0);
}

TEST_CASE("attention panels: sizes and the downsampling factor", "[plot]") {
  AttentionPanels small(2, 5, 5);
  CHECK(small.factor() == 1);
  CHECK(small.rows() == 5);
  CHECK(small.cols() == 5);
  AttentionPanels big(1, 4096, 4096);
  CHECK(big.factor() == 8);
  CHECK(big.rows() == 512);
  CHECK(big.cols() == 512);
  AttentionPanels cross(1, 6, 1000, 512);
  CHECK(cross.factor() == 2);
  CHECK(cross.rows() == 3);
  CHECK(cross.cols() == 500);
  CHECK(mha::default_max_cells(1) == 512);
  CHECK(mha::default_max_cells(64) == 512);
  CHECK(mha::default_max_cells(1024) < 512);
  require_invalid([] { AttentionPanels(0, 4, 4); }, "expected at least 1 panel");
  AttentionPanels p(2, 4, 4);
  std::vector<float> block(8, 0.f);
  require_runtime([&] { p.add_rows(2, 0, 1, block.data()); }, "lie outside 2 panels of 4×4");
  require_runtime([&] { p.add_rows(0, 3, 2, block.data()); }, "rows [3, 5)");
}

TEST_CASE("attention panels: block max and block mean of an 8x8 map", "[plot]") {
  // a[t][s] = 8t + s; max_cells 4 gives 2x2 blocks.
  std::vector<double> a(64);
  for (std::size_t k = 0; k < 64; ++k) a[k] = static_cast<double>(k);
  AttentionPanels mx(1, 8, 8, 4, Reduce::max), mean(1, 8, 8, 4, Reduce::mean);
  REQUIRE(mx.factor() == 2);
  // Blocks of 3 rows straddle the 2-row cells: [0,3), [3,6), [6,8).
  for (std::size_t t0 : {3, 0, 6}) {
    const std::size_t rows = std::min<std::size_t>(3, 8 - t0);
    mx.add_rows(0, t0, rows, a.data() + t0 * 8);
    mean.add_rows(0, t0, rows, a.data() + t0 * 8);
  }
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      INFO("cell " << i << ", " << j);
      CHECK(mx.cell(0, i, j) == (2 * i + 1) * 8 + 2 * j + 1);
      CHECK(mean.cell(0, i, j) == 16.0 * i + 2.0 * j + 4.5);
    }
}

TEST_CASE("attention panels: edge cells are clipped to the map", "[plot]") {
  // 5 x 7 with max_cells 3: f = 3, cells 2 x 3; the last row of cells has 2
  // map rows, the last column 1 map column.
  std::vector<float> a(35);
  for (std::size_t k = 0; k < 35; ++k) a[k] = static_cast<float>(k);
  AttentionPanels mx(1, 5, 7, 3, Reduce::max), mean(1, 5, 7, 3, Reduce::mean);
  REQUIRE(mx.rows() == 2);
  REQUIRE(mx.cols() == 3);
  feed(mx, a);
  feed(mean, a);
  CHECK(mx.cell(0, 0, 0) == 2 * 7 + 2);
  CHECK(mx.cell(0, 1, 2) == 4 * 7 + 6);
  CHECK(mean.cell(0, 1, 2) == (3 * 7 + 6 + 4 * 7 + 6) / 2.0);
  CHECK(mean.cell(0, 1, 0) == (21 + 22 + 23 + 28 + 29 + 30) / 6.0);
}

TEST_CASE("attention panels: NaN wins in its cell only", "[plot]") {
  std::vector<double> a(16, 0.25);
  a[5] = kNaN;  // row 1, column 1: cell (0, 0) with 2x2 cells
  for (Reduce r : {Reduce::max, Reduce::mean}) {
    AttentionPanels p(1, 4, 4, 2, r);
    feed(p, a);
    CHECK(std::isnan(p.cell(0, 0, 0)));
    CHECK(p.cell(0, 0, 1) == 0.25);
    CHECK(p.cell(0, 1, 1) == 0.25);
  }
  // NaN arriving before and after larger values, in separate blocks.
  AttentionPanels p(1, 4, 4, 2, Reduce::max);
  std::vector<double> row0(4, 0.9), row1(4, 0.1);
  row1[0] = kNaN;
  p.add_rows(0, 1, 1, row1.data());
  p.add_rows(0, 0, 1, row0.data());
  CHECK(std::isnan(p.cell(0, 0, 0)));
  CHECK(p.cell(0, 0, 1) == 0.9);
}

TEST_CASE("attention panels: blocks from many threads in any order", "[plot]") {
  const std::size_t heads = 3, T = 100, S = 90;
  // Multiples of 1/1024 below 1: every sum of them is exact, so means do not
  // depend on the order of additions and can be compared exactly too.
  std::mt19937 rng(7);
  std::vector<float> maps(heads * T * S);
  for (auto& x : maps) x = static_cast<float>(rng() % 1024) / 1024.f;
  for (Reduce r : {Reduce::max, Reduce::mean}) {
    AttentionPanels serial(heads, T, S, 16, r), threaded(heads, T, S, 16, r);
    REQUIRE(serial.factor() == 7);
    feed(serial, maps);
    // Blocks of 1..13 rows, shuffled, from 4 threads.
    std::vector<std::pair<std::size_t, std::size_t>> blocks;  // (head, t0), rows follow
    std::vector<std::size_t> sizes;
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t t = 0; t < T;) {
        const std::size_t n = std::min<std::size_t>(1 + rng() % 13, T - t);
        blocks.push_back({h, t});
        sizes.push_back(n);
        t += n;
      }
    std::vector<std::size_t> order(blocks.size());
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::thread> threads;
    for (std::size_t w = 0; w < 4; ++w)
      threads.emplace_back([&, w] {
        for (std::size_t k = w; k < order.size(); k += 4) {
          const auto [h, t0] = blocks[order[k]];
          threaded.add_rows(h, t0, sizes[order[k]], maps.data() + (h * T + t0) * S);
        }
      });
    for (auto& t : threads) t.join();
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < serial.rows(); ++i)
        for (std::size_t j = 0; j < serial.cols(); ++j)
          REQUIRE(threaded.cell(h, i, j) == serial.cell(h, i, j));
  }
}

TEST_CASE("plot: a one-hot diagonal map, its cells, color bar and PNG", "[plot]") {
  AttentionPanels panels(2, 4, 4);
  std::vector<double> maps = one_hot_diagonal(4);
  const std::vector<double> second(16, 0.25);  // uniform
  maps.insert(maps.end(), second.begin(), second.end());
  feed(panels, maps);
  const mha::Plot plot =
      mha::render_attention(panels, {"head 0", "head 1"}, PlotOptions{}, "batch 0");
  // The expected colours are matplotlib's viridis (0.0, 0.25 and 1.0 in 8 bits), not the
  // library's table: draw.viridis_matplotlib holds the table to matplotlib entry for entry.
  const std::vector<Rgb> table = [] {
    std::vector<Rgb> t(256);
    t[0] = Rgb{68, 1, 84};
    t[64] = Rgb{59, 82, 139};  // viridis(64 / 255), the nearest entry to 0.25
    t[255] = Rgb{253, 231, 37};
    return t;
  }();
  REQUIRE(plot.panels.size() == 2);
  CHECK(plot.lo == 0);
  CHECK(plot.hi == 1);
  const int cell = plot.cell_w;
  CHECK(plot.cell_h == cell);  // square
  CHECK(cell >= 24);           // a small map gets large, readable cells
  CHECK(cell <= 40);
  CHECK(plot.panels[0].w == 4 * cell);
  CHECK(plot.panels[0].h == 4 * cell);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      INFO("cell " << i << ", " << j);
      CHECK(cell_pixel(plot, 0, i, j) == (i == j ? table[255] : table[0]));
      CHECK(cell_pixel(plot, 1, i, j) == table[64]);
    }
  // A cell's color fills it to its edges.
  const Box& b = plot.panels[0];
  CHECK(plot.image.at(b.x, b.y) == table[255]);
  CHECK(plot.image.at(b.x + cell - 1, b.y + cell - 1) == table[255]);
  CHECK(plot.image.at(b.x + cell, b.y + cell - 1) == table[0]);
  // Color bar: the top row is the color of hi, the bottom row that of lo.
  const Box& bar = plot.color_bar;
  CHECK(bar.h >= 100);
  CHECK(plot.image.at(bar.center_x(), bar.y) == table[255]);
  CHECK(plot.image.at(bar.center_x(), bar.y + bar.h - 1) == table[0]);
  const double middle = 1.0 - static_cast<double>(bar.h / 2) / (bar.h - 1);
  CHECK(plot.image.at(bar.center_x(), bar.center_y()) == mha::viridis(middle));
  // Panels side by side (a 2x1 grid), the bar to their right.
  CHECK(plot.panels[1].y == plot.panels[0].y);
  CHECK(plot.panels[1].x > plot.panels[0].x + plot.panels[0].w);
  CHECK(bar.x > plot.panels[1].x + plot.panels[1].w);
  CHECK_FALSE(plot.has_nan);
  CHECK(plot.caption == "batch 0 \xc2\xb7 color: linear, 0 to 1");

  // Titles: ink in each title's band above its panel.
  for (std::size_t p = 0; p < 2; ++p) {
    const Box& t = plot.titles[p];
    CHECK(t.y + t.h <= plot.panels[p].y);
    CHECK(count_not(plot.image, t, kWhite) > 40);
  }
  // Through PNG and back, pixel for pixel.
  const Decoded d = decode_png(encode(plot.image));
  REQUIRE(d.width == plot.image.width());
  REQUIRE(d.height == plot.image.height());
  CHECK(d.at(plot.panels[0].x + cell / 2, plot.panels[0].y + cell / 2) == table[255]);
  CHECK(d.at(plot.panels[0].x + 3 * cell / 2, plot.panels[0].y + cell / 2) == table[0]);
  CHECK(d.at(bar.center_x(), bar.y) == table[255]);
}

TEST_CASE("plot: grid shape and cell sizes", "[plot]") {
  // 5 heads: a 3x2 grid, row-major.
  AttentionPanels five(5, 3, 3);
  feed(five, std::vector<float>(45, 1.f / 3));
  std::vector<std::string> titles;
  for (int i = 0; i < 5; ++i) titles.push_back("head " + std::to_string(i));
  const mha::Plot plot = mha::render_attention(five, titles, PlotOptions{}, "x");
  CHECK(plot.panels[2].y == plot.panels[0].y);
  CHECK(plot.panels[3].y > plot.panels[0].y);
  CHECK(plot.panels[3].x == plot.panels[0].x);
  // --cell overrides; the image grows with it.
  PlotOptions options;
  options.cell = 5;
  const mha::Plot small = mha::render_attention(five, titles, options, "x");
  CHECK(small.cell_w == 5);
  CHECK(small.image.width() < plot.image.width());
  // A large map: 1 pixel per cell, downsampled, said in the caption.
  AttentionPanels big(1, 1030, 1030);
  std::vector<float> map(1030 * 1030, 0.f);
  for (std::size_t t = 0; t < 1030; ++t) map[t * 1030 + t] = 1.f;
  feed(big, map);
  REQUIRE(big.factor() == 3);
  const mha::Plot large = mha::render_attention(big, {"head 0"}, PlotOptions{}, "batch 0");
  CHECK(large.cell_w == 1);
  CHECK(large.panels[0].w == 344);
  CHECK(large.caption.find("downsampled 3\xc3\x97"
                           "3 by block max (1030\xc3\x97"
                           "1030 to 344\xc3\x97"
                           "344)") != std::string::npos);
  CHECK(cell_pixel(large, 0, 10, 10) == mha::viridis_table()[255]);  // block max keeps the 1
  CHECK(cell_pixel(large, 0, 10, 11) == mha::viridis_table()[0]);
  // A single query row (decoding): automatic cells stretch into a visible strip.
  AttentionPanels strip(1, 1, 1000);
  feed(strip, std::vector<float>(1000, 0.001f));
  const mha::Plot decode = mha::render_attention(strip, {"head 0"}, PlotOptions{}, "b");
  CHECK(decode.cell_w == 1);
  CHECK(decode.cell_h == 36);
  CHECK(decode.panels[0].w == 500);
  CHECK(decode.panels[0].h == 36);
  // Too large for kMaxPlotSide at an explicit cell size: refused before drawing.
  AttentionPanels many(30, 128, 128);
  std::vector<std::string> many_titles(30, "head");
  PlotOptions huge;
  huge.cell = 64;
  require_invalid([&] { mha::render_attention(many, many_titles, huge, "x"); },
                  "over the limit of 8192 px a side");
  // Automatic cells shrink to fit instead.
  const mha::Plot fitted = mha::render_attention(many, many_titles, PlotOptions{}, "x");
  CHECK(fitted.image.width() <= mha::kMaxPlotSide);
}

TEST_CASE("plot: NaN cells are grey and said so", "[plot]") {
  AttentionPanels panels(1, 3, 3);
  std::vector<double> a(9, 0.5);
  a[4] = kNaN;
  feed(panels, a);
  const mha::Plot plot = mha::render_attention(panels, {"head 0"}, PlotOptions{}, "batch 0");
  CHECK(plot.has_nan);
  CHECK(cell_pixel(plot, 0, 1, 1) == mha::kNanColor);
  CHECK(cell_pixel(plot, 0, 0, 0) == mha::viridis_table()[255]);  // 0.5 is the max
  CHECK(plot.caption.find("grey: NaN") != std::string::npos);
  CHECK(plot.hi == 0.5);
}

TEST_CASE("plot: log color scale over the positive range", "[plot]") {
  AttentionPanels panels(1, 1, 4);
  const std::vector<double> a = {1e-4, 1e-2, 1.0, 0.0};
  feed(panels, a);
  PlotOptions options;
  options.scale = mha::ColorScale::log;
  const mha::Plot plot = mha::render_attention(panels, {"head 0"}, options, "b");
  CHECK(plot.lo == 1e-4);
  CHECK(plot.hi == 1.0);
  const auto& table = mha::viridis_table();
  CHECK(cell_pixel(plot, 0, 0, 0) == table[0]);
  CHECK(cell_pixel(plot, 0, 0, 1) == table[128]);  // halfway in log10
  CHECK(cell_pixel(plot, 0, 0, 2) == table[255]);
  CHECK(cell_pixel(plot, 0, 0, 3) == table[0]);  // zero: below the range
  CHECK(plot.caption.find("color: log10, 0.0001 to 1") != std::string::npos);
}

// The color of value v on the linear range [lo, hi], as the tests expect it:
// viridis of the position, clamped to the ends.
Rgb linear_color(double v, double lo, double hi) {
  return mha::viridis(std::clamp((v - lo) / (hi - lo), 0.0, 1.0));
}

Rgb log_color(double v, double lo, double hi) {
  if (v <= lo) return mha::viridis_table()[0];
  return mha::viridis(std::clamp(std::log10(v / lo) / std::log10(hi / lo), 0.0, 1.0));
}

TEST_CASE("plot: fixed vmin and vmax, values beyond clamped", "[plot]") {
  AttentionPanels panels(1, 1, 7);
  const std::vector<double> a = {0.0, 0.1, 0.15, 0.2, 0.3, 0.4, 0.9};
  feed(panels, a);
  const auto& table = mha::viridis_table();
  PlotOptions options;
  SECTION("both ends") {
    options.vmin = 0.1, options.vmax = 0.3;
    const mha::Plot plot = mha::render_attention(panels, {"head 0"}, options, "b");
    CHECK(plot.lo == 0.1);
    CHECK(plot.hi == 0.3);
    CHECK(cell_pixel(plot, 0, 0, 0) == table[0]);  // below vmin: clamped
    CHECK(cell_pixel(plot, 0, 0, 1) == table[0]);
    CHECK(cell_pixel(plot, 0, 0, 2) == linear_color(0.15, 0.1, 0.3));
    CHECK(cell_pixel(plot, 0, 0, 2) == table[64]);  // round(255 * 0.25)
    CHECK(cell_pixel(plot, 0, 0, 3) == table[128]);
    CHECK(cell_pixel(plot, 0, 0, 4) == table[255]);
    CHECK(cell_pixel(plot, 0, 0, 5) == table[255]);  // above vmax: clamped
    CHECK(cell_pixel(plot, 0, 0, 6) == table[255]);
    CHECK(plot.caption == "b \xc2\xb7 color: linear, 0.1 (vmin) to 0.3 (vmax)");
    CHECK(plot.bar_labels ==
          std::vector<std::string>{"\xe2\x89\xa5 0.3", "0.2", "\xe2\x89\xa4 0.1"});
    // The bar itself still runs from the lowest color to the highest.
    CHECK(plot.image.at(plot.color_bar.center_x(), plot.color_bar.y) == table[255]);
    CHECK(plot.image.at(plot.color_bar.center_x(), plot.color_bar.y + plot.color_bar.h - 1) ==
          table[0]);
  }
  SECTION("vmax only: the bottom from the data") {
    options.vmax = 0.45;
    const mha::Plot plot = mha::render_attention(panels, {"head 0"}, options, "b");
    CHECK(plot.lo == 0);
    CHECK(plot.hi == 0.45);
    for (std::size_t j = 0; j < a.size(); ++j) {
      INFO("cell " << j);
      CHECK(cell_pixel(plot, 0, 0, j) == linear_color(a[j], 0, 0.45));
    }
    CHECK(cell_pixel(plot, 0, 0, 6) == table[255]);
    CHECK(plot.bar_labels == std::vector<std::string>{"\xe2\x89\xa5 0.45", "0.225", "0"});
    CHECK(plot.caption == "b \xc2\xb7 color: linear, 0 to 0.45 (vmax)");
  }
  SECTION("vmin only: the top from the data; given values are written as given") {
    options.vmin = 0.123456;
    const mha::Plot plot = mha::render_attention(panels, {"head 0"}, options, "b");
    CHECK(plot.lo == 0.123456);
    CHECK(plot.hi == 0.9);
    for (std::size_t j = 0; j < a.size(); ++j) {
      INFO("cell " << j);
      CHECK(cell_pixel(plot, 0, 0, j) == linear_color(a[j], 0.123456, 0.9));
    }
    CHECK(plot.bar_labels.front() == "0.9");
    CHECK(plot.bar_labels.back() == "\xe2\x89\xa4 0.123456");
    CHECK(plot.caption == "b \xc2\xb7 color: linear, 0.123456 (vmin) to 0.9");
  }
  SECTION("a fixed end beyond all the data: the other end moves past it") {
    options.vmin = 2;
    const mha::Plot plot = mha::render_attention(panels, {"head 0"}, options, "b");
    CHECK(plot.lo == 2);
    CHECK(plot.hi == 3);
    for (std::size_t j = 0; j < a.size(); ++j) CHECK(cell_pixel(plot, 0, 0, j) == table[0]);
  }
  SECTION("log scale") {
    AttentionPanels logs(1, 1, 5);
    feed(logs, std::vector<double>{1e-4, 1e-3, 1e-2, 1e-1, 0.0});
    options.scale = mha::ColorScale::log;
    options.vmin = 1e-3, options.vmax = 1e-1;
    const mha::Plot plot = mha::render_attention(logs, {"head 0"}, options, "b");
    CHECK(cell_pixel(plot, 0, 0, 0) == table[0]);  // below vmin
    CHECK(cell_pixel(plot, 0, 0, 1) == table[0]);
    CHECK(cell_pixel(plot, 0, 0, 2) == table[128]);  // halfway in log10
    CHECK(cell_pixel(plot, 0, 0, 3) == table[255]);
    CHECK(cell_pixel(plot, 0, 0, 4) == table[0]);  // zero
    CHECK(plot.caption == "b \xc2\xb7 color: log10, 0.001 (vmin) to 0.1 (vmax)");
    options.vmin.reset();
    options.vmax = 1e-2;  // the bottom from the data: 1e-4
    const mha::Plot top = mha::render_attention(logs, {"head 0"}, options, "b");
    CHECK(top.lo == 1e-4);
    CHECK(top.hi == 1e-2);
    CHECK(cell_pixel(top, 0, 0, 1) == table[128]);
    CHECK(cell_pixel(top, 0, 0, 3) == table[255]);
  }
}

TEST_CASE("plot: vmin and vmax that cannot be a range are refused", "[plot]") {
  AttentionPanels panels(1, 2, 2);
  feed(panels, one_hot_diagonal(2));
  PlotOptions options;
  options.vmin = 0.5, options.vmax = 0.5;
  require_invalid([&] { mha::render_attention(panels, {"head 0"}, options, "b"); },
                  "attention plot: vmin 0.5 is not below vmax 0.5: expected vmin < vmax");
  options.vmin = 0.6;
  require_invalid([&] { mha::check_color_limits(options, "--"); },
                  "--vmin 0.6 is not below --vmax 0.5: expected vmin < vmax");
  options.vmin = kNaN;
  require_invalid([&] { mha::check_color_limits(options, "--"); },
                  "--vmin nan: expected a finite number");
  options.vmin.reset();
  options.vmax = std::numeric_limits<double>::infinity();
  require_invalid([&] { mha::check_color_limits(options, "--"); },
                  "--vmax inf: expected a finite number");
  options.vmax = 1;
  options.vmin = -0.5;
  mha::check_color_limits(options, "--");  // negative ends are fine on a linear scale
  options.scale = mha::ColorScale::log;
  require_invalid([&] { mha::check_color_limits(options, "--"); },
                  "--vmin -0.5 with --color_scale log: expected a positive value");
  options.vmin = 0;
  require_invalid([&] { mha::render_attention(panels, {"head 0"}, options, "b"); },
                  "vmin 0 with color_scale log: expected a positive value");
  options.vmin.reset();
  options.vmax = -1;
  require_invalid([&] { mha::check_color_limits(options, "--"); },
                  "--vmax -1 with --color_scale log: expected a positive value");
}

TEST_CASE("plot: per-head color ranges", "[plot]") {
  // Three 2x3 panels of different ranges: [0, 1], [0, 0.1] and [-0.2, 0.3].
  AttentionPanels panels(3, 2, 3);
  const std::vector<double> a = {0.0,  0.5,  1.0,  0.25, 0.75, 0.1,    // panel 0
                                 0.01, 0.02, 0.05, 0.1,  0.0,  0.03,   // panel 1
                                 -0.2, 0.0,  0.3,  0.05, 0.1,  -0.1};  // panel 2
  feed(panels, a);
  const std::vector<std::string> titles = {"head 0", "head 1", "head 2"};
  const std::vector<double> lo = {0, 0, -0.2}, hi = {1, 0.1, 0.3};
  PlotOptions options;
  options.range = mha::ColorRangeMode::per_head;
  auto check_cells = [&](const mha::Plot& plot, const std::vector<double>& los,
                         const std::vector<double>& his) {
    for (std::size_t p = 0; p < 3; ++p)
      for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 3; ++j) {
          INFO("panel " << p << ", cell " << i << ", " << j);
          CHECK(cell_pixel(plot, p, i, j) == linear_color(a[(p * 2 + i) * 3 + j], los[p], his[p]));
        }
  };
  const auto& table = mha::viridis_table();

  SECTION("each panel's own range") {
    const mha::Plot plot = mha::render_attention(panels, titles, options, "b");
    CHECK(plot.panel_lo == lo);
    CHECK(plot.panel_hi == hi);
    CHECK(plot.lo == -0.2);
    CHECK(plot.hi == 1);
    check_cells(plot, lo, hi);
    CHECK(cell_pixel(plot, 1, 1, 0) == table[255]);  // 0.1 tops panel 1 ...
    CHECK(cell_pixel(plot, 0, 1, 2) == table[26]);   // ... but not panel 0: round(25.5)
    CHECK(cell_pixel(plot, 2, 0, 2) == table[255]);
    CHECK(cell_pixel(plot, 2, 0, 0) == table[0]);
    // Each range is written under its title, above its panel.
    REQUIRE(plot.ranges.size() == 3);
    for (std::size_t p = 0; p < 3; ++p) {
      INFO("panel " << p);
      CHECK(plot.ranges[p].y >= plot.titles[p].y + plot.titles[p].h);
      CHECK(plot.ranges[p].y + plot.ranges[p].h <= plot.panels[p].y);
      CHECK(count_not(plot.image, plot.ranges[p], kWhite) > 20);
    }
    CHECK(plot.bar_labels == std::vector<std::string>{"head max", "", "head min"});
    CHECK(plot.caption == "b \xc2\xb7 color: linear, per head (ranges under the titles)");
    // The shared range of the same panels: one scale, no range lines.
    const mha::Plot shared = mha::render_attention(panels, titles, PlotOptions{}, "b");
    CHECK(shared.panel_lo == std::vector<double>(3, -0.2));
    CHECK(shared.panel_hi == std::vector<double>(3, 1.0));
    CHECK(shared.ranges.empty());
    check_cells(shared, shared.panel_lo, shared.panel_hi);
    CHECK(cell_pixel(shared, 1, 1, 0) != table[255]);
  }
  SECTION("vmax overrides every panel's top, vmin every bottom") {
    options.vmax = 0.5;
    const mha::Plot top = mha::render_attention(panels, titles, options, "b");
    CHECK(top.panel_lo == lo);
    CHECK(top.panel_hi == std::vector<double>(3, 0.5));
    check_cells(top, lo, {0.5, 0.5, 0.5});
    CHECK(cell_pixel(top, 0, 0, 2) == table[255]);  // 1 > vmax: clamped
    CHECK(top.bar_labels == std::vector<std::string>{"\xe2\x89\xa5 0.5", "", "head min"});
    CHECK(top.caption == "b \xc2\xb7 color: linear, per head (ranges under the titles), vmax 0.5");
    options.vmax.reset();
    options.vmin = 0.02;
    const mha::Plot bottom = mha::render_attention(panels, titles, options, "b");
    CHECK(bottom.panel_lo == std::vector<double>(3, 0.02));
    CHECK(bottom.panel_hi == hi);
    check_cells(bottom, {0.02, 0.02, 0.02}, hi);
    CHECK(cell_pixel(bottom, 2, 0, 0) == table[0]);  // -0.2 < vmin: clamped
    CHECK(bottom.bar_labels == std::vector<std::string>{"head max", "", "\xe2\x89\xa4 0.02"});
  }
  SECTION("log: each panel from its smallest positive value to its largest") {
    AttentionPanels logs(2, 1, 4);
    feed(logs, std::vector<double>{1e-4, 1e-2, 1.0, 0.0,     // panel 0: 1e-4 to 1
                                   1e-3, 1e-2, 1e-1, 0.0});  // panel 1: 1e-3 to 1e-1
    options.scale = mha::ColorScale::log;
    const mha::Plot plot = mha::render_attention(logs, {"head 0", "head 1"}, options, "b");
    CHECK(plot.panel_lo == std::vector<double>{1e-4, 1e-3});
    CHECK(plot.panel_hi == std::vector<double>{1.0, 1e-1});
    CHECK(cell_pixel(plot, 0, 0, 1) == table[128]);
    CHECK(cell_pixel(plot, 1, 0, 0) == table[0]);
    CHECK(cell_pixel(plot, 1, 0, 1) == table[128]);
    CHECK(cell_pixel(plot, 1, 0, 2) == table[255]);
    CHECK(cell_pixel(plot, 1, 0, 3) == table[0]);  // zero
    CHECK(cell_pixel(plot, 0, 0, 2) == log_color(1.0, 1e-4, 1.0));
  }
}

TEST_CASE("plot: token labels", "[plot]") {
  AttentionPanels panels(1, 4, 4);
  feed(panels, one_hot_diagonal(4));
  PlotOptions options;
  options.query_labels = {"The", "cat", "sat", "."};
  options.key_labels = options.query_labels;
  const mha::Plot with = mha::render_attention(panels, {"head 0"}, options, "b");
  CHECK(with.labels);
  CHECK(with.notes.empty());
  const mha::Plot without = mha::render_attention(panels, {"head 0"}, PlotOptions{}, "b");
  // Labels are wider than tick numbers: the panel moves right, the image grows down.
  CHECK(with.panels[0].x > without.panels[0].x);
  CHECK(with.image.height() > without.image.height());
  // Ink left of the panel, level with row 1.
  const Box& b = with.panels[0];
  const Box left{b.x - 40, b.y + with.cell_h, 32, with.cell_h};
  CHECK(count_not(with.image, left, kWhite) > 20);

  SECTION("counts must match T and S") {
    PlotOptions bad;
    bad.query_labels = {"a", "b", "c"};
    require_invalid([&] { mha::render_attention(panels, {"head 0"}, bad, "b"); },
                    "3 query labels for T = 4 query positions");
    bad.query_labels.clear();
    bad.key_labels = {"a", "b", "c", "d", "e"};
    require_invalid([&] { mha::render_attention(panels, {"head 0"}, bad, "b"); },
                    "5 key labels for S = 4 key positions");
    require_invalid(
        [&] {
          mha::render_attention(panels, {"a", "b"}, PlotOptions{}, "b");
        },
        "2 titles for 1 panels");
  }
  SECTION("left out when cells are too small or downsampled, with a note") {
    PlotOptions tiny = options;
    tiny.cell = 4;
    const mha::Plot small = mha::render_attention(panels, {"head 0"}, tiny, "b");
    CHECK_FALSE(small.labels);
    REQUIRE(small.notes.size() == 1);
    CHECK(small.notes[0].find("too small for text") != std::string::npos);
    AttentionPanels down(1, 4, 4, 2);
    feed(down, one_hot_diagonal(4));
    const mha::Plot ds = mha::render_attention(down, {"head 0"}, options, "b");
    CHECK_FALSE(ds.labels);
    REQUIRE(ds.notes.size() == 1);
    CHECK(ds.notes[0].find("downsampled 2\xc3\x97"
                           "2") != std::string::npos);
  }
}

TEST_CASE("read_labels: one per line, counted against the axis", "[plot]") {
  TempDir dir("plot_labels");
  const std::string unix_file = dir.write("u.txt", "The\ncat\n\nsat\n");
  const auto labels = mha::read_labels(unix_file, 4, "T = 4 query positions");
  CHECK(labels == std::vector<std::string>{"The", "cat", "", "sat"});
  const std::string dos = dir.write("d.txt", "a b\r\nc\r\n");
  CHECK(mha::read_labels(dos, 2, "S = 2 key positions") == std::vector<std::string>{"a b", "c"});
  const std::string no_newline = dir.write("n.txt", "x\ny");
  CHECK(mha::read_labels(no_newline, 2, "T = 2 query positions").size() == 2);
  require_invalid([&] { mha::read_labels(unix_file, 5, "T = 5 query positions"); },
                  "u.txt: 4 labels (one per line) but the map has T = 5 query positions");
  require_invalid([&] { mha::read_labels(dir / "missing.txt", 1, "T = 1 query positions"); },
                  "missing.txt: cannot open the labels file");
}

TEST_CASE("run with plot: attention.png is the plot of batch 0 of attention.npy",
          "[plot][golden]") {
  TempDir dir("plot_run");
  for (bool average : {false, true}) {
    INFO("average_heads " << average);
    mha::Config c;
    c.h = 3;
    c.d_model = 12;
    c.seq_len = 6;
    c.batch = 2;
    c.causal = mha::Causal::top_left;
    c.save_attention = true;
    c.average_heads = average;
    c.plot = true;
    c.out_dir = dir / (average ? "mean" : "heads");
    const mha::RunResult r = mha::run(c);
    REQUIRE(r.report.outputs.at("attention.png").plot);
    const mha::PlotFile& png = *r.report.outputs.at("attention.png").plot;
    CHECK(png.panels == (average ? 1u : 3u));
    CHECK(png.downsample == 1);

    // The same plot, made from the file.
    const mha::NpyArray a =
        mha::read_npy(dir / (std::string(average ? "mean" : "heads") + "/attention.npy"));
    std::vector<float> values = mha::test::values_of<float>(a);
    const std::size_t heads = average ? 1 : 3;
    values.resize(heads * 6 * 6);  // batch 0
    AttentionPanels panels(heads, 6, 6);
    feed(panels, values);
    std::vector<std::string> titles;
    if (average) titles.push_back("mean over 3 heads");
    for (std::size_t i = 0; titles.size() < heads; ++i)
      titles.push_back("head " + std::to_string(i));
    const mha::Plot expected = mha::render_attention(panels, titles, PlotOptions{}, "batch 0 of 2");

    const Decoded d = decode_png(mha::test::read_file(c.out_dir + "/attention.png"));
    REQUIRE(d.width == expected.image.width());
    REQUIRE(d.height == expected.image.height());
    CHECK(png.width == d.width);
    std::size_t differ = 0;
    for (int y = 0; y < d.height; ++y)
      for (int x = 0; x < d.width; ++x) differ += d.at(x, y) != expected.image.at(x, y);
    CHECK(differ == 0);
    // And every cell of the PNG against its own rendering here, not the library's: viridis
    // (the table draw.viridis_matplotlib holds to matplotlib) of (w - lo) / (hi - lo), lo =
    // min(0, smallest weight), hi = the largest, the nearest of 256 entries.
    double lo = 0, hi = 0;
    for (const float v : values) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
    const auto& viridis = mha::viridis_table();
    for (std::size_t p = 0; p < heads; ++p)
      for (std::size_t i = 0; i < 6; ++i)
        for (std::size_t j = 0; j < 6; ++j) {
          const double w = values[(p * 6 + i) * 6 + j];
          const Box& b = expected.panels[p];
          const Rgb want =
              viridis[static_cast<std::size_t>(std::lround(255 * (w - lo) / (hi - lo)))];
          INFO("head " << p << " cell " << i << ", " << j << ": " << w);
          CHECK(d.at(b.x + static_cast<int>(j) * expected.cell_w + expected.cell_w / 2,
                     b.y + static_cast<int>(i) * expected.cell_h + expected.cell_h / 2) == want);
        }
    // Causal: above the diagonal is weight 0, the lowest color.
    CHECK(d.at(expected.panels[0].x + 5 * expected.cell_w + 2, expected.panels[0].y + 2) ==
          mha::viridis_table()[0]);
  }
}

TEST_CASE("run with plot alone writes no attention.npy", "[plot][golden]") {
  TempDir dir("plot_alone");
  {
    mha::Config c;
    c.h = 2;
    c.d_model = 8;
    c.seq_len = 5;
    c.plot = true;
    c.out_dir = dir / "alone";
    const mha::RunResult r = mha::run(c);
    CHECK(std::filesystem::exists(c.out_dir + "/attention.png"));
    CHECK_FALSE(std::filesystem::exists(c.out_dir + "/attention.npy"));
    CHECK_FALSE(r.report.outputs.count("attention.npy"));
    CHECK(r.report.config.plot);
  }
}
