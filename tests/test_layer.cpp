// mha::Layer (layer.hpp) against the plain double-precision reference: one
// layer built once, called on arrays of several batches and lengths, for
// self- and cross-attention, grouped-query heads and masks given per call.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/config/rng.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/run/layer.hpp"
#include "reference.hpp"

namespace {

std::vector<double> uniform(const std::string& name, std::size_t n, double lo, double hi) {
  std::vector<double> v(n);
  mha::RandomStream(11, name).fill_uniform<double>(v.data(), n, lo, hi);
  return v;
}

template <class T>
mha::NpyArray array_of(const std::vector<double>& v, std::vector<std::size_t> shape) {
  mha::NpyArray a;
  a.dtype = sizeof(T) == 4 ? mha::DType::f4 : mha::DType::f8;
  a.shape = std::move(shape);
  a.data.resize(v.size() * sizeof(T));
  T* p = reinterpret_cast<T*>(a.data.data());
  for (std::size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(v[i]);
  return a;
}

template <class T>
std::vector<T> rounded(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

std::vector<double> widened(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}
std::vector<double> widened(const std::vector<double>& v) {
  return v;
}

// Weights in native names (weights.hpp), values exactly representable in T.
template <class T>
struct Fixture {
  ref::Sizes z;
  ref::Params p;
  std::string path;  // the provided weights' name
  Fixture(std::size_t h, std::size_t kv_heads, std::size_t d_model, std::size_t kdim,
          std::size_t vdim, std::size_t d_k, std::size_t d_v, std::size_t d_out) {
    z.h = h, z.kv_heads = kv_heads, z.d_model = d_model, z.kdim = kdim, z.vdim = vdim;
    z.d_k = d_k, z.d_v = d_v, z.d_out = d_out;
    const std::size_t kvh = z.kvh();
    auto make = [&](const char* name, std::size_t n) {
      std::vector<double> v = uniform(name, n, -0.5, 0.5);
      for (double& x : v) x = static_cast<double>(static_cast<T>(x));
      return v;
    };
    p.W_q = make("W_q", d_model * h * d_k), p.b_q = make("b_q", h * d_k);
    p.W_k = make("W_k", kdim * kvh * d_k), p.b_k = make("b_k", kvh * d_k);
    p.W_v = make("W_v", vdim * kvh * d_v), p.b_v = make("b_v", kvh * d_v);
    p.W_o = make("W_o", h * d_v * d_out), p.b_o = make("b_o", d_out);
    std::map<std::string, mha::NpyArray> w;
    w["W_q"] = array_of<T>(p.W_q, {d_model, h * d_k});
    w["W_k"] = array_of<T>(p.W_k, {kdim, kvh * d_k});
    w["W_v"] = array_of<T>(p.W_v, {vdim, kvh * d_v});
    w["W_o"] = array_of<T>(p.W_o, {h * d_v, d_out});
    w["b_q"] = array_of<T>(p.b_q, {h * d_k});
    w["b_k"] = array_of<T>(p.b_k, {kvh * d_k});
    w["b_v"] = array_of<T>(p.b_v, {kvh * d_v});
    w["b_o"] = array_of<T>(p.b_o, {d_out});
    path = mha::provide_weights(std::move(w));
  }
  ~Fixture() { mha::release_provided(path); }

  mha::Config config(nlohmann::json extra) const {
    extra["weights"] = path;
    extra["h"] = z.h;
    if (z.kv_heads) extra["kv_heads"] = z.kv_heads;
    if (sizeof(T) == 8) extra["dtype"] = "float64";
    mha::Config c;
    c.apply(extra, "test");
    return c;
  }
};

template <class T>
void check_call(const Fixture<T>& f, const mha::Layer& layer, std::size_t B, std::size_t T_,
                std::size_t S, bool cross, const ref::MaskSpec& spec,
                const mha::Config* call_config, double tol) {
  ref::Sizes z = f.z;
  z.B = B, z.T = T_, z.S = S;
  const std::vector<T> X_q = rounded<T>(uniform("X_q", B * T_ * z.d_model, -1, 1));
  const std::vector<T> X_k = rounded<T>(uniform("X_k", B * S * z.kdim, -1, 1));
  const std::vector<T> X_v = rounded<T>(uniform("X_v", B * S * z.vdim, -1, 1));
  const mha::DType dt = sizeof(T) == 4 ? mha::DType::f4 : mha::DType::f8;
  mha::Layer::Call call;
  call.query = {X_q.data(), dt, {B, T_, z.d_model}};
  const mha::NpyView key{X_k.data(), dt, {B, S, z.kdim}}, value{X_v.data(), dt, {B, S, z.vdim}};
  if (cross) call.key = &key, call.value = &value;
  call.config = call_config;
  const mha::Layer::Shapes shapes = layer.shapes(call);
  REQUIRE(shapes.output == std::vector<std::size_t>{B, T_, z.d_out});
  REQUIRE(shapes.attention == std::vector<std::size_t>{B, z.h, T_, S});
  std::vector<T> output(mha::Layer::size(shapes.output)),
      attention(mha::Layer::size(shapes.attention));
  layer(call, output.data(), attention.data());
  const std::vector<double> xq = widened(X_q);
  const std::vector<double> xk = cross ? widened(X_k) : xq, xv = cross ? widened(X_v) : xq;
  const ref::Result want = ref::multi_head_attention(
      z, xq, xk, xv, f.p, spec, 1.0 / std::sqrt(double(z.d_k)), mha::MaskedRows::zero);
  for (std::size_t i = 0; i < output.size(); ++i)
    REQUIRE(std::abs(double(output[i]) - want.output[i]) <= tol);
  for (std::size_t i = 0; i < attention.size(); ++i)
    REQUIRE(std::abs(double(attention[i]) - want.attention[i]) <= tol);
}

}  // namespace

TEMPLATE_TEST_CASE("a layer built once matches the reference on calls of any size", "[layer]",
                   float, double) {
  const double tol = sizeof(TestType) == 4 ? 2e-5 : 1e-12;
  SECTION("self-attention, causal, several batches and lengths") {
    const Fixture<TestType> f(4, 0, 32, 32, 32, 8, 8, 32);
    const mha::Layer layer(f.config({{"causal", true}, {"save_attention", true}}), {}, false);
    ref::MaskSpec spec;
    spec.causal = mha::Causal::top_left;
    for (auto [B, T] : {std::pair<std::size_t, std::size_t>{1, 1}, {2, 9}, {3, 40}, {1, 130}})
      check_call(f, layer, B, T, T, false, spec, nullptr, tol);
  }
  SECTION("cross-attention with grouped-query heads and a per-call mask") {
    const Fixture<TestType> f(6, 2, 24, 20, 12, 5, 7, 18);
    const mha::Layer layer(f.config({{"save_attention", true}}), {}, false);
    ref::MaskSpec none;
    check_call(f, layer, 2, 5, 11, true, none, nullptr, tol);
    mha::Config c = layer.config();
    c.apply({{"key_lengths", {11, 4}}, {"causal", "bottom-right"}}, "call");
    ref::MaskSpec spec;
    spec.causal = mha::Causal::bottom_right;
    spec.key_lengths = {11, 4};
    check_call(f, layer, 2, 5, 11, true, spec, &c, tol);
  }
}

TEST_CASE("a layer refuses a call that does not fit it, naming the argument", "[layer]") {
  const Fixture<float> f(2, 0, 8, 8, 8, 4, 4, 8);
  const mha::Layer layer(f.config(nlohmann::json::object()), {}, false);
  std::vector<float> x(2 * 3 * 6, 0.5f), k(1 * 4 * 8, 0.5f);
  mha::Layer::Call call;
  call.query = {x.data(), mha::DType::f4, {2, 3, 6}};
  REQUIRE_THROWS_WITH(layer.shapes(call),
                      Catch::Contains("query: expected shape (B, L, 8) or (L, 8), got (2, 3, 6)"));
  call.query.shape = {6, 6};
  REQUIRE_THROWS_WITH(layer.shapes(call), Catch::Contains("query: expected shape"));
  std::vector<float> q(2 * 3 * 8, 0.25f);
  call.query = {q.data(), mha::DType::f4, {2, 3, 8}};
  const mha::NpyView key{k.data(), mha::DType::f4, {1, 4, 8}};
  call.key = &key;
  REQUIRE_THROWS_WITH(layer.shapes(call), Catch::Contains("key: batch 1 is not the query's 2"));
  call.key = nullptr;
  q[5] = std::nanf("");
  std::vector<float> out(2 * 3 * 8);
  REQUIRE_THROWS_WITH(layer(call, out.data()), Catch::Contains("query: non-finite value"));
}
