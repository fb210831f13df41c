// attention_axes (Keras): the axis plan, its validation errors, and the
// gather/scatter that move N-D inputs to (B', L, F) and outputs back, held
// against plain index arithmetic on random shapes. The numbers of whole runs
// are held against Keras' einsum equations in tests/interop/keras_axes_crosscheck.py.
#include <catch2/catch.hpp>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mha/config/attention_axes.hpp"
#include "mha/config/config.hpp"
#include "mha/config/dims.hpp"
#include "mha/io/npy.hpp"
#include "test_util.hpp"

using mha::AttentionAxes;
using mha::Config;
using mha::FileShapes;
using namespace mha::test;  // test_util.hpp
using Shape = std::vector<std::size_t>;

namespace {

Config axes_config(std::vector<std::int64_t> axes) {
  Config c;
  c.attention_axes = std::move(axes);
  return c;
}

FileShapes files(Shape q, std::optional<Shape> k = std::nullopt,
                 std::optional<Shape> v = std::nullopt) {
  FileShapes f;
  f.query = std::move(q), f.query_name = "q.npy";
  if (k) f.key = std::move(k), f.key_name = "k.npy";
  if (v) f.value = std::move(v), f.value_name = "v.npy";
  return f;
}

std::size_t product(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), std::size_t{1}, std::multiplies<>());
}

// The C-order offset of `index` in `shape`.
std::size_t offset(const Shape& index, const Shape& shape) {
  std::size_t o = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) o = o * shape[i] + index[i];
  return o;
}

// The next C-order index of `shape`; false after the last.
bool next(Shape& index, const Shape& shape) {
  for (std::size_t k = shape.size(); k-- > 0;) {
    if (++index[k] < shape[k]) return true;
    index[k] = 0;
  }
  return false;
}

// np.transpose(x, perm), element by element.
std::vector<double> transpose(const std::vector<double>& x, const Shape& shape, const Shape& perm) {
  Shape out_shape(shape.size());
  for (std::size_t i = 0; i < perm.size(); ++i) out_shape[i] = shape[perm[i]];
  std::vector<double> out(x.size());
  Shape index(shape.size(), 0), from(shape.size());
  do {
    for (std::size_t i = 0; i < perm.size(); ++i) from[perm[i]] = index[i];
    out[offset(index, out_shape)] = x[offset(from, shape)];
  } while (next(index, out_shape));
  return out;
}

std::vector<double> random_values(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> x(n);
  for (auto& v : x) v = u(rng);
  return x;
}

}  // namespace

TEST_CASE("permute_rows is np.transpose with the last axis kept", "[attention_axes]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t rank = 1 + rng() % 6;
    Shape shape(rank);
    for (auto& s : shape) s = 1 + rng() % 4;
    Shape perm(rank - 1);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    perm.push_back(rank - 1);
    const auto x = random_values(product(shape), rng);
    std::vector<double> got(x.size());
    mha::permute_rows(x.data(), shape, perm, sizeof(double), got.data());
    INFO("shape " << mha::shape_str(shape) << " perm " << mha::shape_str(perm));
    REQUIRE(got == transpose(x, shape, perm));
    // The inverse permutation brings it back.
    Shape permuted(rank), inverse(rank);
    for (std::size_t i = 0; i < rank; ++i) permuted[i] = shape[perm[i]], inverse[perm[i]] = i;
    std::vector<double> back(x.size());
    mha::permute_rows(got.data(), permuted, inverse, sizeof(double), back.data());
    REQUIRE(back == x);
  }
  std::vector<double> x(6), y(6);
  require_runtime(
      [&] {
        mha::permute_rows(x.data(), {2, 3}, {1, 0}, 8, y.data());
      },
      "keeps the last axis last");
  require_runtime(
      [&] {
        mha::permute_rows(x.data(), {1, 2, 3}, {0, 0, 2}, 8, y.data());
      },
      "a permutation");
}

TEST_CASE("the issue's example: (B, 5, 3, 4, 16) over axes (2, 3)", "[attention_axes]") {
  FileShapes f = files({2, 5, 3, 4, 16}, Shape{2, 5, 6, 7, 12}, Shape{2, 5, 6, 7, 10});
  const AttentionAxes a = mha::plan_attention_axes(axes_config({2, 3}), f);
  REQUIRE(a.active());
  CHECK(a.axes() == Shape{2, 3});
  CHECK(a.perm() == Shape{0, 1, 2, 3, 4});  // already in place: a reshape
  CHECK(*f.query == Shape{10, 12, 16});
  CHECK(*f.key == Shape{10, 42, 12});
  CHECK(*f.value == Shape{10, 42, 10});
  CHECK(f.query_name == "q.npy (as flattened by attention_axes)");
  mha::Dims d;
  d.B = 10, d.T = 12, d.S = 42, d.h = 3;
  CHECK(a.attention_shape(d, false) == Shape{2, 5, 3, 3, 4, 6, 7});  // Keras' scores
  CHECK(a.attention_shape(d, true) == Shape{2, 5, 3, 4, 6, 7});
  CHECK(a.query_shape(9) == Shape{2, 5, 3, 4, 9});
  CHECK(a.key_shape(10) == Shape{2, 5, 6, 7, 10});

  // resolve_dims sees an ordinary cross-attention run.
  Config c = axes_config({2, 3});
  c.h = 4;
  const mha::Dims r = mha::resolve_dims(c, f);
  CHECK(r.B == 10);
  CHECK(r.T == 12);
  CHECK(r.S == 42);
  CHECK(r.kdim == 12);
  CHECK(r.vdim == 10);
}

TEST_CASE("axes in the order given, batch axes ascending, negative axes", "[attention_axes]") {
  {
    FileShapes f = files({2, 4, 3, 2, 8});
    const AttentionAxes a = mha::plan_attention_axes(axes_config({3, 1}), f);
    CHECK(a.axes() == Shape{3, 1});
    CHECK(a.perm() == Shape{0, 2, 3, 1, 4});
    CHECK(*f.query == Shape{6, 8, 8});
    mha::Dims d;
    d.h = 5;
    CHECK(a.attention_shape(d, false) == Shape{2, 3, 5, 2, 4, 2, 4});
  }
  {
    FileShapes f = files({2, 3, 4, 8});
    const AttentionAxes a = mha::plan_attention_axes(axes_config({-2}), f);
    CHECK(a.axes() == Shape{2});
    CHECK(a.perm() == Shape{0, 1, 2, 3});
    CHECK(*f.query == Shape{6, 4, 8});
  }
  {
    FileShapes f = files({2, 3, 4, 8});
    const AttentionAxes a = mha::plan_attention_axes(axes_config({-3}), f);
    CHECK(a.perm() == Shape{0, 2, 1, 3});
    CHECK(*f.query == Shape{8, 3, 8});
  }
}

TEST_CASE("rank-3 inputs over axis 1 are the plain run", "[attention_axes]") {
  for (std::int64_t axis : {1, -2}) {
    FileShapes f = files({2, 5, 8}, Shape{2, 7, 6}, Shape{2, 7, 6});
    const FileShapes before = f;
    const AttentionAxes a = mha::plan_attention_axes(axes_config({axis}), f);
    CHECK_FALSE(a.active());
    CHECK(*f.query == *before.query);
    CHECK(*f.key == *before.key);
    CHECK(f.query_name == "q.npy");
    // Random inputs are rank 3 too.
    FileShapes none;
    CHECK_FALSE(mha::plan_attention_axes(axes_config({axis}), none).active());
  }
  FileShapes f = files({2, 5, 8});
  CHECK_FALSE(mha::plan_attention_axes(Config{}, f).active());
  mha::NpyArray x = mha::NpyArray::of(std::vector<float>(80).data(), {2, 5, 8});
  CHECK(AttentionAxes().gather(x).shape == Shape{2, 5, 8});
}

TEST_CASE("gather and scatter round trips on random N-D shapes", "[attention_axes]") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t rank = 4 + rng() % 3;  // 4 to 6
    Shape q(rank), k;
    for (auto& s : q) s = 1 + rng() % 3;
    // A random non-empty subset of axes 1..rank-2, in random order.
    Shape inner(rank - 2);
    std::iota(inner.begin(), inner.end(), 1);
    std::shuffle(inner.begin(), inner.end(), rng);
    const Shape axes(inner.begin(), inner.begin() + 1 + rng() % inner.size());
    k = q;
    for (auto a : axes) k[a] = 1 + rng() % 3;
    k.back() = 1 + rng() % 4;
    std::vector<std::int64_t> given;
    for (auto a : axes)  // some negative, as Keras allows
      given.push_back(rng() % 2 ? static_cast<std::int64_t>(a)
                                : static_cast<std::int64_t>(a) - static_cast<std::int64_t>(rank));
    FileShapes f = files(q, k, k);
    const AttentionAxes plan = mha::plan_attention_axes(axes_config(given), f);
    INFO("query " << mha::shape_str(q) << " key " << mha::shape_str(k) << " axes "
                  << mha::shape_str(axes));
    REQUIRE(plan.active());
    REQUIRE(plan.axes() == axes);

    for (const Shape& shape : {q, k}) {
      const auto x = random_values(product(shape), rng);
      const mha::NpyArray flat = plan.gather(mha::NpyArray::of(x.data(), shape));
      // flat[b', l, f]: b' row-major over axis 0 and the other non-attention
      // axes ascending, l row-major over the attention axes as given.
      std::vector<bool> is_axis(rank, false);
      for (auto a : axes) is_axis[a] = true;
      Shape batch_sizes, axis_sizes;
      for (std::size_t i = 0; i + 1 < rank; ++i)
        if (!is_axis[i]) batch_sizes.push_back(shape[i]);
      for (auto a : axes) axis_sizes.push_back(shape[a]);
      REQUIRE(flat.shape == Shape{product(batch_sizes), product(axis_sizes), shape.back()});
      const auto got = values_of<double>(flat);
      Shape index(rank, 0);
      do {
        Shape bi, li;
        for (std::size_t i = 0; i + 1 < rank; ++i)
          if (!is_axis[i]) bi.push_back(index[i]);
        for (auto a : axes) li.push_back(index[a]);
        const std::size_t at =
            (offset(bi, batch_sizes) * product(axis_sizes) + offset(li, axis_sizes)) *
                shape.back() +
            index.back();
        REQUIRE(got[at] == x[offset(index, shape)]);
      } while (next(index, shape));
      std::vector<double> back(x.size());
      plan.scatter(got.data(), shape, back.data());
      REQUIRE(back == x);
    }
  }
}

TEST_CASE("attention_axes errors name the key, the file and the expected shape",
          "[attention_axes]") {
  auto plan = [](std::vector<std::int64_t> axes, FileShapes f) {
    mha::plan_attention_axes(axes_config(std::move(axes)), f);
  };
  const Shape q5 = {2, 5, 3, 4, 16};
  require_invalid([&] { plan({0}, files(q5)); }, "attention_axes [0]: axis 0 is the batch axis");
  require_invalid([&] { plan({4}, files(q5)); },
                  "axis 4 is the feature axis; expected axes 1 to 3");
  require_invalid([&] { plan({-1}, files(q5)); }, "axis -1 is the feature axis");
  require_invalid([&] { plan({-5}, files(q5)); }, "axis -5 is the batch axis");
  require_invalid([&] { plan({5}, files(q5)); }, "axis 5 is out of range");
  require_invalid([&] { plan({-6}, files(q5)); }, "(or -4 to -2) of the query 'q.npy'");
  require_invalid(
      [&] {
        plan({2, -3}, files(q5));
      },
      "attention_axes [2, -3]: axis 2 is given twice");
  require_invalid(
      [&] {
        plan({2, 3}, FileShapes{});
      },
      "attention_axes [2, 3]: axis 2 is the feature axis; expected axes 1 to 1 (or -2 "
      "to -2) of the random query of shape (batch, seq_len, d_model)");
  require_invalid([&] { plan({2, 3}, FileShapes{}); }, "axis 2 is the feature axis");
  require_invalid([&] { plan({3}, FileShapes{}); }, "files of rank > 3 allow more axes");
  require_invalid([&] { plan({1}, files({5, 8})); }, "needs a query of rank 3 or more");
  require_invalid(
      [&] {
        plan({2, 3}, files(q5, Shape{2, 5, 6, 12}, Shape{2, 5, 6, 12}));
      },
      "k.npy: key of shape (2, 5, 6, 12) has rank 4, but the query 'q.npy' of shape "
      "(2, 5, 3, 4, 16) has rank 5; with attention_axes [2, 3] expected (2, 5, *, *, "
      "kdim)");
  require_invalid(
      [&] {
        plan({2, 3}, files(q5, Shape{2, 6, 6, 7, 12}, Shape{2, 6, 6, 7, 12}));
      },
      "k.npy: key of shape (2, 6, 6, 7, 12) disagrees with the query 'q.npy' of shape "
      "(2, 5, 3, 4, 16) on axis 1, a batch axis under attention_axes [2, 3]; expected "
      "(2, 5, *, *, kdim)");
  require_invalid(
      [&] {
        plan({2, 3}, files(q5, std::nullopt, Shape{3, 5, 6, 7, 12}));
      },
      "v.npy: value of shape (3, 5, 6, 7, 12) disagrees");
  require_invalid(
      [&] {
        plan({2, 3}, files(q5, Shape{2, 5, 6, 7, 12}, Shape{2, 5, 6, 8, 12}));
      },
      "v.npy: value of shape (2, 5, 6, 8, 12) disagrees with key 'k.npy' of shape (2, "
      "5, 6, 7, 12) on axis 3; the value has the key's shape but for the last axis: "
      "expected (2, 5, 6, 7, vdim)");
  require_invalid([&] { plan({2, 3}, files({2, 0, 3, 4, 16})); }, "query has an empty dimension");
  require_invalid(
      [] {
        FileShapes f = files({2, 5, 3, 4, 16});
        mha::plan_attention_axes(Config{}, f);
      },
      "q.npy: expected a query of shape (B, T, d_model) or (T, d_model), got (2, 5, 3, 4, 16); to "
      "attend over axes of an N-D query give attention_axes ([1, 2, 3] for all of them");

  // Masks and biases over (B, T, S) are refused on N-D inputs; positions
  // (causal, window, ALiBi) need a single attention axis.
  auto with = [&](auto set, std::vector<std::int64_t> axes) {
    Config c = axes_config(std::move(axes));
    set(c);
    FileShapes f = files(q5);
    return mha::plan_attention_axes(c, f);
  };
  require_invalid(
      [&] {
        with([](Config& c) { c.mask = "m.npy"; }, {2, 3});
      },
      "mask is not supported with attention_axes on inputs of rank 5");
  require_invalid([&] { with([](Config& c) { c.key_padding_mask = "p.npy"; }, {2}); },
                  "key_padding_mask is not supported");
  require_invalid(
      [&] {
        with([](Config& c) { c.key_lengths = {{3, 2}}; }, {2});
      },
      "key_lengths is not supported");
  require_invalid([&] { with([](Config& c) { c.bias = "b.npy"; }, {1}); }, "bias is not supported");
  require_invalid(
      [&] {
        with([](Config& c) { c.causal = mha::Causal::top_left; }, {2, 3});
      },
      "causal needs a single attention axis");
  require_invalid([&] { with([](Config& c) { c.window = 2; }, {2, 3}); }, "window needs a single");
  require_invalid([&] { with([](Config& c) { c.alibi = true; }, {1, 3}); }, "alibi needs a single");
  CHECK(with([](Config& c) { c.causal = mha::Causal::top_left, c.window = 2, c.alibi = true; }, {2})
            .active());
  // A rank-3 run keeps every mask.
  Config c = axes_config({1});
  c.mask = "m.npy";
  FileShapes f = files({2, 5, 8});
  CHECK_FALSE(mha::plan_attention_axes(c, f).active());
}
