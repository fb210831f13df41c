// The attention kernel held against the plain double-precision reference in
// reference.hpp, for float and double, over odd shapes, every mask form and
// every masked_rows policy; softmax_rows on its own; resolve_dims and
// load_mask, including their error messages.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/config/config.hpp"
#include "mha/config/dims.hpp"
#include "mha/config/mask_file.hpp"
#include "mha/config/rng.hpp"
#include "mha/config/weights.hpp"
#include "mha/io/npy.hpp"
#include "mha/kernel/attention.hpp"
#include "mha/kernel/mask.hpp"
#include "reference.hpp"
#include "test_util.hpp"

using Catch::Contains;
using mha::Causal;
using mha::MaskedRows;
using namespace mha::test;  // test_util.hpp

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const MaskedRows kPolicies[] = {MaskedRows::zero, MaskedRows::uniform, MaskedRows::nan};

// ---------------------------------------------------------------- helpers

mha::Dims make_dims(std::size_t B, std::size_t T, std::size_t S, std::size_t h, std::size_t d_model,
                    std::size_t d_k, std::size_t d_v, std::size_t kdim, std::size_t vdim,
                    std::size_t d_out) {
  mha::Dims d;
  d.B = B;
  d.T = T;
  d.S = S;
  d.h = h;
  d.d_model = d_model;
  d.d_k = d_k;
  d.d_v = d_v;
  d.kdim = kdim;
  d.vdim = vdim;
  d.d_out = d_out;
  d.key_is_query = S == T && kdim == d_model && vdim == d_model;
  d.value_is_key = d.key_is_query;
  return d;
}

ref::Sizes sizes_of(const mha::Dims& d) {
  ref::Sizes z;
  z.B = d.B;
  z.T = d.T;
  z.S = d.S;
  z.h = d.h;
  z.d_model = d.d_model;
  z.d_k = d.d_k;
  z.d_v = d.d_v;
  z.kdim = d.kdim;
  z.vdim = d.vdim;
  z.d_out = d.d_out;
  return z;
}

// How the key and value inputs are passed to the kernel.
enum class Sharing {
  separate,      // three buffers
  value_is_key,  // X_v aliases X_k
  self,          // X_k and X_v alias X_q
};

std::vector<double> uniform(std::uint64_t seed, const std::string& name, std::size_t n, double low,
                            double high) {
  std::vector<double> v(n);
  mha::RandomStream(seed, name).fill_uniform<double>(v.data(), n, low, high);
  return v;
}

template <class T, std::size_t N>
std::vector<double> to_vector(const mha::Tensor<T, N>& t) {
  return std::vector<double>(t.data(), t.data() + t.size());
}

// One random problem, held in double. Every value is rounded to T by
// `rounded<T>()` before use so that the kernel and the reference see the
// same numbers and differ only by arithmetic.
struct Problem {
  mha::Dims dims;
  Sharing sharing = Sharing::separate;
  std::vector<double> X_q, X_k, X_v;
  ref::Params p;

  template <class T>
  Problem rounded() const {
    Problem r = *this;
    for (auto* v : {&r.X_q, &r.X_k, &r.X_v, &r.p.W_q, &r.p.b_q, &r.p.W_k, &r.p.b_k, &r.p.W_v,
                    &r.p.b_v, &r.p.W_o, &r.p.b_o})
      for (double& x : *v) x = static_cast<double>(static_cast<T>(x));
    return r;
  }
  const std::vector<double>& key() const { return sharing == Sharing::self ? X_q : X_k; }
  const std::vector<double>& value() const {
    return sharing == Sharing::self ? X_q : sharing == Sharing::value_is_key ? X_k : X_v;
  }
};

// Glorot kernels from mha::random_weights and, with use_bias, biases drawn
// here (random_weights' biases are zero, which would hide bias bugs).
Problem make_problem(const mha::Dims& d, bool use_bias, Sharing sharing, std::uint64_t seed) {
  if (sharing == Sharing::self) REQUIRE((d.S == d.T && d.kdim == d.d_model && d.vdim == d.d_model));
  if (sharing == Sharing::value_is_key) REQUIRE(d.kdim == d.vdim);
  Problem pr;
  pr.dims = d;
  pr.sharing = sharing;
  pr.X_q = uniform(seed, "test X_q", d.B * d.T * d.d_model, -1, 1);
  if (sharing != Sharing::self) pr.X_k = uniform(seed, "test X_k", d.B * d.S * d.kdim, -1, 1);
  if (sharing == Sharing::separate) pr.X_v = uniform(seed, "test X_v", d.B * d.S * d.vdim, -1, 1);
  auto w = mha::random_weights<double>(d, use_bias, seed);
  pr.p.W_q = to_vector(w.W_q);
  pr.p.W_k = to_vector(w.W_k);
  pr.p.W_v = to_vector(w.W_v);
  pr.p.W_o = to_vector(w.W_o);
  REQUIRE(w.has_bias() == use_bias);
  if (use_bias) {
    pr.p.b_q = uniform(seed, "test b_q", d.h * d.d_k, -0.5, 0.5);
    pr.p.b_k = uniform(seed, "test b_k", d.h * d.d_k, -0.5, 0.5);
    pr.p.b_v = uniform(seed, "test b_v", d.h * d.d_v, -0.5, 0.5);
    pr.p.b_o = uniform(seed, "test b_o", d.d_out, -0.5, 0.5);
  }
  return pr;
}

template <class T, std::size_t N>
mha::Tensor<T, N> tensor(const std::vector<double>& v, const mha::TensorShape<N>& shape) {
  mha::Tensor<T, N> t(shape);
  REQUIRE(t.size() == v.size());
  for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = static_cast<T>(v[i]);
  return t;
}

template <class T>
mha::Weights<T> weights_of(const Problem& pr) {
  const auto& d = pr.dims;
  const std::size_t hdk = d.h * d.d_k, hdv = d.h * d.d_v;
  mha::Weights<T> w;
  w.W_q = tensor<T, 2>(pr.p.W_q, {d.d_model, hdk});
  w.W_k = tensor<T, 2>(pr.p.W_k, {d.kdim, hdk});
  w.W_v = tensor<T, 2>(pr.p.W_v, {d.vdim, hdv});
  w.W_o = tensor<T, 2>(pr.p.W_o, {hdv, d.d_out});
  if (!pr.p.b_q.empty()) {
    w.b_q = tensor<T, 1>(pr.p.b_q, {hdk});
    w.b_k = tensor<T, 1>(pr.p.b_k, {hdk});
    w.b_v = tensor<T, 1>(pr.p.b_v, {hdv});
    w.b_o = tensor<T, 1>(pr.p.b_o, {d.d_out});
  }
  return w;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
struct KernelRun {
  std::vector<T> output, attention, mean;
};

// Runs mha::multi_head_attention<T>; the attention and mean buffers are
// passed only when asked for (null otherwise).
template <class T>
KernelRun<T> run_kernel(const Problem& pr, const mha::Mask<T>& mask, double scale,
                        MaskedRows policy, bool want_attention, bool want_mean) {
  const auto& d = pr.dims;
  std::vector<T> X_q = cast<T>(pr.X_q), X_k = cast<T>(pr.X_k), X_v = cast<T>(pr.X_v);
  const T* k = pr.sharing == Sharing::self ? X_q.data() : X_k.data();
  const T* v = pr.sharing == Sharing::separate ? X_v.data() : k;
  KernelRun<T> r;
  // Pre-fill outputs with garbage: the kernel must overwrite every element.
  r.output.assign(d.B * d.T * d.d_out, T(-777));
  if (want_attention) r.attention.assign(d.B * d.h * d.T * d.S, T(-777));
  if (want_mean) r.mean.assign(d.B * d.T * d.S, T(-777));
  mha::multi_head_attention<T>(
      d, X_q.data(), k, v, weights_of<T>(pr), mask, static_cast<T>(scale), policy, r.output.data(),
      want_attention ? r.attention.data() : nullptr, want_mean ? r.mean.data() : nullptr);
  return r;
}

// Tolerance |got - want| <= abs + rel * |want|.
// float64: the kernel and the reference do the same sums in a different
//   order (BLAS blocking); with O(1) values and sums of at most ~100 terms
//   the difference is a few hundred ulps of 1, far below 1e-12.
// float32: both sides see the same float-rounded inputs, so the difference
//   is float rounding inside the kernel: projections and Q K^T are sums of up
//   to ~64 products of O(1) values (error ~ sqrt(n) * 6e-8 * |terms|, well
//   under 1e-5), which perturb logits and hence attention weights by a
//   similar relative amount. 1e-5 absolute covers values near zero
//   (cancellation), 1e-4 relative covers the larger outputs; the largest
//   difference observed over all these tests is about 4e-7.
template <class T>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr double abs = 1e-5, rel = 1e-4;
};
template <>
struct Tolerance<double> {
  static constexpr double abs = 1e-12, rel = 1e-12;
};

// Compares element-wise; a NaN is expected exactly where the reference has
// one. Reports the number of mismatches and the first one.
template <class T>
void expect_close(const std::string& what, const std::vector<T>& got,
                  const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  double max_err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = want[i];
    bool ok;
    if (std::isnan(w)) {
      ok = std::isnan(g);
    } else {
      ok = std::isfinite(g) &&
           std::abs(g - w) <= Tolerance<T>::abs + Tolerance<T>::rel * std::abs(w);
      if (std::isfinite(g)) max_err = std::max(max_err, std::abs(g - w));
    }
    if (!ok && bad++ == 0) first = i;
  }
  INFO(what << ": " << bad << " of " << want.size() << " elements differ; max |error| " << max_err);
  if (bad)
    INFO("first at flat index " << first << ": got " << got[first] << ", want " << want[first]);
  CHECK(bad == 0);
}

template <class T>
void expect_equal(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool same = (std::isnan(got[i]) && std::isnan(want[i])) || got[i] == want[i];
    if (!same) ++bad;
  }
  INFO(what << ": " << bad << " elements differ");
  CHECK(bad == 0);
}

// The kernel against the reference: output, attention and attention_mean,
// and the exact path's output is the same whether attention, its mean or both
// are requested.
template <class T>
ref::Result check_against_reference(const Problem& problem, const ref::MaskSpec& spec,
                                    const mha::Mask<T>& mask, double scale, MaskedRows policy) {
  const Problem pr = problem.rounded<T>();
  const mha::Dims& d = pr.dims;
  const ref::Sizes z = sizes_of(d);
  INFO("B=" << d.B << " T=" << d.T << " S=" << d.S << " h=" << d.h << " d_model=" << d.d_model
            << " d_k=" << d.d_k << " d_v=" << d.d_v << " kdim=" << d.kdim << " vdim=" << d.vdim
            << " d_out=" << d.d_out << " bias=" << !pr.p.b_q.empty() << " sharing="
            << int(pr.sharing) << " policy=" << mha::to_string(policy) << " scale=" << scale);
  const double ref_scale = static_cast<double>(static_cast<T>(scale));
  ref::Result want =
      ref::multi_head_attention(z, pr.X_q, pr.key(), pr.value(), pr.p, spec, ref_scale, policy);

  KernelRun<T> full = run_kernel<T>(pr, mask, scale, policy, true, true);
  expect_close("output", full.output, want.output);
  expect_close("attention", full.attention, want.attention);
  expect_close("attention_mean", full.mean, ref::mean_over_heads(z, want.attention));

  // attention null: the fused online-softmax kernel, which sums in another
  // order, so it is held to the reference rather than to the exact path's bits.
  KernelRun<T> bare = run_kernel<T>(pr, mask, scale, policy, false, false);
  expect_close("output without attention buffers", bare.output, want.output);
  KernelRun<T> mean_only = run_kernel<T>(pr, mask, scale, policy, false, true);
  expect_equal("output with only attention_mean", mean_only.output, full.output);
  expect_equal("attention_mean without attention", mean_only.mean, full.mean);
  KernelRun<T> att_only = run_kernel<T>(pr, mask, scale, policy, true, false);
  expect_equal("attention without attention_mean", att_only.attention, full.attention);
  return want;
}

double default_scale(const mha::Dims& d) {
  return 1.0 / std::sqrt(static_cast<double>(d.d_k));
}

// --------------------------------------------------------- mask builders

enum class FileType { boolean, int32, uint8, int64, float32, float64 };

// A random explicit mask of `shape` for the reference. Bool masks allow with
// probability ~0.6; float masks take multiples of 1/8 in [-2, 2) (exact in
// float) with ~1/4 -inf. The first row of the first slice is fully masked so
// that masked_rows matters even without causal or key_lengths.
ref::MaskSpec random_mask(const std::vector<std::size_t>& shape, bool is_float,
                          std::uint64_t seed) {
  ref::MaskSpec m;
  m.shape = shape;
  m.is_float = is_float;
  std::size_t n = 1;
  for (auto s : shape) n *= s;
  const std::size_t S = shape.back();
  mha::RandomStream rs(seed, "test mask");
  m.values.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double u = rs.uniform_double(i);
    if (is_float)
      m.values[i] = u < 0.25 ? -kInf : std::floor(u * 32) / 8 - 2;
    else
      m.values[i] = u < 0.6 ? 1 : 0;
  }
  for (std::size_t s = 0; s < S; ++s) m.values[s] = is_float ? -kInf : 0;
  return m;
}

// The spec's explicit mask as a .npy file of `type`; nonzero bool entries are
// written as varied nonzero integers (2, -1, 256) to check "nonzero = attend".
std::string write_mask(TempDir& dir, const ref::MaskSpec& m, FileType type) {
  const std::size_t n = m.values.size();
  switch (type) {
    case FileType::boolean: {
      std::unique_ptr<bool[]> v(new bool[n]);
      for (std::size_t i = 0; i < n; ++i) v[i] = m.values[i] != 0;
      return dir.write_npy(mha::NpyArray::of(v.get(), m.shape), "mask");
    }
    case FileType::int32: {
      std::vector<std::int32_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = m.values[i] != 0 ? (i % 2 ? 2 : -1) : 0;
      return dir.write_npy(mha::NpyArray::of(v.data(), m.shape), "mask");
    }
    case FileType::uint8: {
      std::vector<std::uint8_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = m.values[i] != 0 ? 255 : 0;
      return dir.write_npy(mha::NpyArray::of(v.data(), m.shape), "mask");
    }
    case FileType::int64: {
      // 256 and 1 << 40 have a zero low byte: every byte must be looked at.
      std::vector<std::int64_t> v(n);
      for (std::size_t i = 0; i < n; ++i)
        v[i] = m.values[i] != 0 ? (i % 2 ? 256 : std::int64_t{1} << 40) : 0;
      return dir.write_npy(mha::NpyArray::of(v.data(), m.shape), "mask");
    }
    case FileType::float32: {
      std::vector<float> v(m.values.begin(), m.values.end());
      return dir.write_npy(mha::NpyArray::of(v.data(), m.shape), "mask");
    }
    case FileType::float64:
      return dir.write_npy(mha::NpyArray::of(m.values.data(), m.shape), "mask");
  }
  return "";
}

// The kernel's mask, built the way a run builds it: load_mask from a config
// naming the causal mode, the mask file and inline key lengths.
template <class T>
mha::Mask<T> load_spec(TempDir& dir, const ref::MaskSpec& m, const mha::Dims& d,
                       FileType type = FileType::boolean) {
  mha::Config c;
  c.causal = m.causal;
  if (!m.shape.empty()) {
    if (m.is_float) REQUIRE((type == FileType::float32 || type == FileType::float64));
    c.mask = write_mask(dir, m, type);
  }
  if (!m.key_lengths.empty()) c.key_lengths = m.key_lengths;
  return mha::load_mask<T>(c, d);
}

struct Shape {
  std::size_t B, T, S, h, d_model, d_k, d_v, kdim, vdim, d_out;
  bool bias;
  Sharing sharing;
  mha::Dims dims() const { return make_dims(B, T, S, h, d_model, d_k, d_v, kdim, vdim, d_out); }
};

// Shapes for the mask tests: T < S cross-attention, T > S cross-attention,
// square self-attention.
const Shape kMaskShapes[] = {
    {2, 5, 7, 3, 9, 4, 3, 6, 5, 8, true, Sharing::separate},
    {2, 7, 4, 2, 6, 3, 5, 6, 6, 4, true, Sharing::value_is_key},
    {2, 6, 6, 2, 8, 4, 4, 8, 8, 8, false, Sharing::self},
};

}  // namespace

// ---------------------------------------------------------------- tests

TEMPLATE_TEST_CASE("multi_head_attention matches the reference without a mask", "[attention]",
                   float, double) {
  // B, T, S, h, d_model, d_k, d_v, kdim, vdim, d_out, bias, sharing
  const Shape shapes[] = {
      {1, 4, 4, 1, 8, 8, 8, 8, 8, 8, true, Sharing::self},            // h = 1, self-attention
      {1, 4, 4, 1, 8, 8, 8, 8, 8, 8, false, Sharing::separate},       // h = 1, no bias
      {2, 5, 9, 3, 12, 7, 5, 6, 10, 11, true, Sharing::separate},     // odd sizes, T < S
      {2, 9, 4, 2, 6, 3, 6, 6, 6, 6, false, Sharing::separate},       // T > S, d_k < d_v
      {3, 6, 6, 4, 16, 4, 4, 16, 16, 16, true, Sharing::self},        // self-attention, h = 4
      {1, 7, 3, 5, 10, 2, 3, 4, 4, 13, true, Sharing::value_is_key},  // value = key
      {2, 1, 1, 2, 4, 2, 2, 4, 4, 4, true, Sharing::self},            // T = S = 1
      {2, 3, 5, 3, 9, 5, 2, 9, 9, 3, true, Sharing::separate},        // d_k > d_v, d_out < d_model
      {1, 5, 5, 2, 4, 6, 7, 4, 4, 4, true, Sharing::self},            // h*d_k > d_model
      {2, 40, 70, 4, 64, 16, 24, 48, 40, 32, true, Sharing::separate},  // BLAS-blocked sizes
  };
  for (const Shape& s : shapes) {
    const Problem pr = make_problem(s.dims(), s.bias, s.sharing, 7);
    check_against_reference<TestType>(pr, ref::MaskSpec{}, mha::Mask<TestType>{},
                                      default_scale(pr.dims), MaskedRows::zero);
  }
}

TEMPLATE_TEST_CASE("self-attention in batch pieces matches the reference and the whole batch",
                   "[attention][pieces]", float, double) {
  // Self-attention with B >= 8 and T within one query block runs in batch
  // pieces (attention.cpp, pieced_layer); B not a multiple of 8 gives pieces
  // of different sizes. Masks and every masked_rows policy go through them.
  const Shape shapes[] = {
      {8, 5, 5, 2, 16, 8, 8, 16, 16, 16, true, Sharing::self},
      {9, 7, 7, 3, 12, 5, 4, 12, 12, 10, true, Sharing::self},
      {17, 3, 3, 4, 8, 2, 3, 8, 8, 8, false, Sharing::self},
  };
  TempDir dir("pieces");
  for (const Shape& s : shapes) {
    const mha::Dims d = s.dims();
    const Problem pr = make_problem(d, s.bias, s.sharing, 5);
    check_against_reference<TestType>(pr, ref::MaskSpec{}, mha::Mask<TestType>{}, default_scale(d),
                                      MaskedRows::zero);
    std::vector<std::int64_t> lengths(d.B);
    for (std::size_t b = 0; b < d.B; ++b) lengths[b] = static_cast<std::int64_t>(b % (d.S + 1));
    ref::MaskSpec spec;
    spec.causal = Causal::top_left;
    spec.key_lengths = lengths;
    const auto mask = load_spec<TestType>(dir, spec, d);
    for (MaskedRows policy : kPolicies)
      check_against_reference<TestType>(pr, spec, mask, default_scale(d), policy);
    // The same numbers as three buffers take the whole-batch path: the
    // pieces change where the work is cut, not the result beyond rounding.
    Problem whole = pr.rounded<TestType>();
    whole.sharing = Sharing::separate;
    whole.X_k = whole.X_v = whole.X_q;
    const auto a = run_kernel<TestType>(pr.rounded<TestType>(), mask, default_scale(d),
                                        MaskedRows::zero, true, false);
    const auto b =
        run_kernel<TestType>(whole, mask, default_scale(d), MaskedRows::zero, true, false);
    expect_close("pieced output against the whole batch", a.output,
                 std::vector<double>(b.output.begin(), b.output.end()));
    expect_close("pieced attention against the whole batch", a.attention,
                 std::vector<double>(b.attention.begin(), b.attention.end()));
  }
}

TEMPLATE_TEST_CASE("query blocks of 256 rows and more match the reference", "[attention][direct]",
                   float, double) {
  // From 256 query rows per block the fused kernel computes scale Q_i K_i^T
  // from a transposed copy of K_i's block by the direct GEMM (float32 with
  // AVX-512, or MHA_DIRECT_GEMM=avx2; MHA_DIRECT_GEMM=blas for OpenBLAS): odd d_k, a
  // scale that is not a power of two, key blocks cut short by S, causal masks
  // and key_lengths.
  const Shape shapes[] = {
      {1, 300, 300, 2, 24, 20, 9, 24, 24, 16, true, Sharing::self},
      {2, 260, 530, 3, 18, 7, 17, 10, 12, 5, true, Sharing::separate},
  };
  TempDir dir("direct");
  for (const Shape& s : shapes) {
    const mha::Dims d = s.dims();
    const Problem pr = make_problem(d, s.bias, s.sharing, 13);
    check_against_reference<TestType>(pr, ref::MaskSpec{}, mha::Mask<TestType>{}, 0.37,
                                      MaskedRows::zero);
    ref::MaskSpec spec;
    spec.causal = Causal::bottom_right;
    spec.key_lengths = {static_cast<std::int64_t>(d.S), static_cast<std::int64_t>(d.S / 3)};
    spec.key_lengths.resize(d.B);
    const auto mask = load_spec<TestType>(dir, spec, d);
    check_against_reference<TestType>(pr, spec, mask, default_scale(d), MaskedRows::zero);
  }
}

TEMPLATE_TEST_CASE("multi_head_attention uses the given scale", "[attention]", float, double) {
  const mha::Dims d = make_dims(2, 4, 6, 3, 9, 7, 5, 9, 9, 9);
  const Problem pr = make_problem(d, true, Sharing::separate, 11);
  for (double scale : {1.0, 0.37, -1.5, 2.5}) {
    check_against_reference<TestType>(pr, ref::MaskSpec{}, mha::Mask<TestType>{}, scale,
                                      MaskedRows::zero);
  }
  // The scale really is used: 1/sqrt(d_k) and 1 give different attention.
  auto a = run_kernel<TestType>(pr, {}, default_scale(d), MaskedRows::zero, true, false);
  auto b = run_kernel<TestType>(pr, {}, 1.0, MaskedRows::zero, true, false);
  CHECK(a.attention != b.attention);
}

TEMPLATE_TEST_CASE("multi_head_attention with causal masks", "[attention][mask]", float, double) {
  TempDir dir("attention");
  for (const Shape& s : kMaskShapes) {
    const Problem pr = make_problem(s.dims(), s.bias, s.sharing, 3);
    for (Causal causal : {Causal::top_left, Causal::bottom_right}) {
      ref::MaskSpec spec;
      spec.causal = causal;
      const auto mask = load_spec<TestType>(dir, spec, pr.dims);
      for (MaskedRows policy : kPolicies)
        check_against_reference<TestType>(pr, spec, mask, default_scale(pr.dims), policy);
    }
  }
}

TEMPLATE_TEST_CASE("causal alignments are top-left and bottom-right", "[attention][mask]", float,
                   double) {
  // Independent of the reference: check which attention weights are zero.
  TempDir dir("attention");
  for (auto [T, S] : {std::pair<std::size_t, std::size_t>{3, 5}, {5, 3}, {4, 4}}) {
    const mha::Dims d = make_dims(1, T, S, 1, 4, 4, 4, 4, 4, 4);
    const Problem pr = make_problem(d, true, Sharing::separate, 5);
    for (Causal causal : {Causal::top_left, Causal::bottom_right}) {
      ref::MaskSpec spec;
      spec.causal = causal;
      auto run = run_kernel<TestType>(pr.rounded<TestType>(), load_spec<TestType>(dir, spec, d),
                                      0.5, MaskedRows::nan, true, false);
      for (std::size_t t = 0; t < T; ++t) {
        // last visible key; bottom-right shifts the diagonal by S - T
        const long long last =
            causal == Causal::top_left ? (long long)t : (long long)t + (long long)S - (long long)T;
        for (std::size_t s = 0; s < S; ++s) {
          const TestType a = run.attention[t * S + s];
          INFO("T=" << T << " S=" << S << " causal=" << mha::to_string(causal) << " t=" << t
                    << " s=" << s << " a=" << a);
          if (last < 0)
            CHECK(std::isnan(a));  // every key hidden, policy nan
          else if ((long long)s <= last)
            CHECK(a > 0);
          else
            CHECK(a == 0);
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("multi_head_attention with explicit masks of every form", "[attention][mask]",
                   float, double) {
  TempDir dir("attention");
  std::uint64_t seed = 100;
  for (const Shape& s : kMaskShapes) {
    const mha::Dims d = s.dims();
    const Problem pr = make_problem(d, s.bias, s.sharing, 4);
    const std::vector<std::vector<std::size_t>> shapes = {
        {d.T, d.S},         {d.B, d.T, d.S},    {1, d.T, d.S},        {1, 1, d.T, d.S},
        {1, d.h, d.T, d.S}, {d.B, 1, d.T, d.S}, {d.B, d.h, d.T, d.S},
    };
    for (const auto& shape : shapes) {
      for (FileType type : {FileType::boolean, FileType::int32, FileType::uint8, FileType::int64,
                            FileType::float32, FileType::float64}) {
        const bool is_float = type == FileType::float32 || type == FileType::float64;
        const ref::MaskSpec spec = random_mask(shape, is_float, seed++);
        const auto mask = load_spec<TestType>(dir, spec, d, type);
        INFO("mask shape " << mha::shape_str(shape) << " file type " << int(type));
        for (MaskedRows policy : kPolicies)
          check_against_reference<TestType>(pr, spec, mask, default_scale(d), policy);
      }
    }
  }
}

TEMPLATE_TEST_CASE("a 4-D mask is broadcast exactly as (mask_B, mask_h) says", "[attention][mask]",
                   float, double) {
  // Built by hand (not by load_mask), so the kernel's indexing is checked on
  // its own: head 1 of batch 0 may see only key 2, everything else sees all.
  const mha::Dims d = make_dims(2, 3, 4, 2, 6, 3, 3, 6, 6, 6);
  const Problem pr = make_problem(d, true, Sharing::separate, 9);
  mha::Mask<TestType> mask;
  mask.mask_B = d.B;
  mask.mask_h = d.h;
  mask.allow.assign(d.B * d.h * d.T * d.S, 1);
  ref::MaskSpec spec;
  spec.shape = {d.B, d.h, d.T, d.S};
  spec.values.assign(mask.allow.size(), 1);
  for (std::size_t t = 0; t < d.T; ++t)
    for (std::size_t s = 0; s < d.S; ++s)
      if (s != 2) {
        const std::size_t i = ((0 * d.h + 1) * d.T + t) * d.S + s;
        mask.allow[i] = 0;
        spec.values[i] = 0;
      }
  check_against_reference<TestType>(pr, spec, mask, default_scale(d), MaskedRows::zero);
  auto run = run_kernel<TestType>(pr.rounded<TestType>(), mask, default_scale(d), MaskedRows::zero,
                                  true, false);
  for (std::size_t t = 0; t < d.T; ++t)
    for (std::size_t s = 0; s < d.S; ++s) {
      CHECK(run.attention[((0 * d.h + 1) * d.T + t) * d.S + s] == (s == 2 ? 1 : 0));
      CHECK(run.attention[((0 * d.h + 0) * d.T + t) * d.S + s] > 0);
      CHECK(run.attention[((1 * d.h + 1) * d.T + t) * d.S + s] > 0);
    }
}

TEMPLATE_TEST_CASE("multi_head_attention with key_lengths", "[attention][mask]", float, double) {
  TempDir dir("attention");
  for (const Shape& s : kMaskShapes) {
    const mha::Dims d = s.dims();
    const Problem pr = make_problem(d, s.bias, s.sharing, 6);
    const std::int64_t S = static_cast<std::int64_t>(d.S);
    for (std::vector<std::int64_t> lengths :
         {std::vector<std::int64_t>{0, S}, std::vector<std::int64_t>{S, 1},
          std::vector<std::int64_t>{3, 2}}) {
      ref::MaskSpec spec;
      spec.key_lengths = lengths;
      const auto mask = load_spec<TestType>(dir, spec, d);
      for (MaskedRows policy : kPolicies)
        check_against_reference<TestType>(pr, spec, mask, default_scale(d), policy);
    }
  }
}

TEMPLATE_TEST_CASE("causal, explicit mask and key_lengths combine", "[attention][mask]", float,
                   double) {
  TempDir dir("attention");
  std::uint64_t seed = 500;
  for (const Shape& s : kMaskShapes) {
    const mha::Dims d = s.dims();
    const Problem pr = make_problem(d, s.bias, s.sharing, 8);
    for (Causal causal : {Causal::none, Causal::top_left, Causal::bottom_right}) {
      for (bool is_float : {false, true}) {
        ref::MaskSpec spec = random_mask({1, d.h, d.T, d.S}, is_float, seed++);
        spec.causal = causal;
        spec.key_lengths = {static_cast<std::int64_t>(d.S) - 1, 2};
        const auto mask =
            load_spec<TestType>(dir, spec, d, is_float ? FileType::float32 : FileType::boolean);
        for (MaskedRows policy : kPolicies)
          check_against_reference<TestType>(pr, spec, mask, default_scale(d), policy);
      }
    }
  }
}

TEMPLATE_TEST_CASE("fully masked rows follow masked_rows exactly", "[attention][mask]", float,
                   double) {
  // Batch 0 has key_lengths 0 (every row fully masked), batch 1 has all keys,
  // and in batch 1 a 4-D mask hides every key from head 0 at query 1 only.
  TempDir dir("attention");
  const mha::Dims d = make_dims(2, 3, 5, 2, 6, 3, 4, 6, 6, 7);
  const Problem pr = make_problem(d, true, Sharing::separate, 12).rounded<TestType>();
  ref::MaskSpec spec;
  spec.key_lengths = {0, 5};
  spec.shape = {d.B, d.h, d.T, d.S};
  spec.values.assign(d.B * d.h * d.T * d.S, 1);
  for (std::size_t s = 0; s < d.S; ++s) spec.values[((1 * d.h + 0) * d.T + 1) * d.S + s] = 0;
  const auto mask = load_spec<TestType>(dir, spec, d);
  auto fully_masked = [&](std::size_t b, std::size_t i, std::size_t t) {
    return b == 0 || (b == 1 && i == 0 && t == 1);
  };
  const std::size_t T = d.T, S = d.S, h = d.h, d_out = d.d_out;

  SECTION("nan") {
    auto run = run_kernel<TestType>(pr, mask, default_scale(d), MaskedRows::nan, true, true);
    for (std::size_t b = 0; b < d.B; ++b)
      for (std::size_t t = 0; t < T; ++t) {
        bool any_head = false;
        for (std::size_t i = 0; i < h; ++i) {
          any_head = any_head || fully_masked(b, i, t);
          for (std::size_t s = 0; s < S; ++s) {
            INFO("b=" << b << " head=" << i << " t=" << t << " s=" << s);
            CHECK(std::isnan(run.attention[((b * h + i) * T + t) * S + s]) ==
                  fully_masked(b, i, t));
          }
        }
        for (std::size_t s = 0; s < S; ++s)
          CHECK(std::isnan(run.mean[(b * T + t) * S + s]) == any_head);
        for (std::size_t o = 0; o < d_out; ++o) {
          INFO("b=" << b << " t=" << t << " o=" << o);
          CHECK(std::isnan(run.output[(b * T + t) * d_out + o]) == any_head);
        }
      }
  }
  SECTION("zero") {
    auto run = run_kernel<TestType>(pr, mask, default_scale(d), MaskedRows::zero, true, true);
    for (std::size_t b = 0; b < d.B; ++b)
      for (std::size_t i = 0; i < h; ++i)
        for (std::size_t t = 0; t < T; ++t)
          if (fully_masked(b, i, t))
            for (std::size_t s = 0; s < S; ++s)
              CHECK(run.attention[((b * h + i) * T + t) * S + s] == 0);
    // Batch 0: every head's output is zero, so the output is exactly b_o.
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t o = 0; o < d_out; ++o)
        CHECK(run.output[t * d_out + o] == static_cast<TestType>(pr.p.b_o[o]));
    // Batch 1, query 1: head 0's slice of the concatenation is zero, so
    // the rows of W_o that head 0 owns ([0, d_v)) cannot affect that output
    // row, while they do affect query 0.
    check_against_reference<TestType>(pr, spec, mask, default_scale(d), MaskedRows::zero);
    Problem changed = pr;
    for (std::size_t j = 0; j < d.d_v * d_out; ++j) changed.p.W_o[j] *= 4;  // exact in T
    // Same path as `run` (attention requested), so equal rows are equal bits.
    auto other =
        run_kernel<TestType>(changed, mask, default_scale(d), MaskedRows::zero, true, true);
    std::size_t same_row_1 = 0, same_row_0 = 0;
    for (std::size_t o = 0; o < d_out; ++o) {
      same_row_1 += other.output[(1 * T + 1) * d_out + o] == run.output[(1 * T + 1) * d_out + o];
      same_row_0 += other.output[(1 * T + 0) * d_out + o] == run.output[(1 * T + 0) * d_out + o];
    }
    CHECK(same_row_1 == d_out);
    CHECK(same_row_0 == 0);
  }
  SECTION("uniform") {
    auto run = run_kernel<TestType>(pr, mask, default_scale(d), MaskedRows::uniform, true, true);
    for (std::size_t b = 0; b < d.B; ++b)
      for (std::size_t i = 0; i < h; ++i)
        for (std::size_t t = 0; t < T; ++t)
          if (fully_masked(b, i, t))
            for (std::size_t s = 0; s < S; ++s)
              CHECK(run.attention[((b * h + i) * T + t) * S + s] ==
                    TestType(1) / static_cast<TestType>(S));
    check_against_reference<TestType>(pr, spec, mask, default_scale(d), MaskedRows::uniform);
  }
}

TEMPLATE_TEST_CASE("softmax_rows", "[attention][softmax]", float, double) {
  using T = TestType;
  const T inf = std::numeric_limits<T>::infinity();

  SECTION("rows sum to one and match exp(x - max) / sum") {
    const std::size_t rows = 4, cols = 6, ld = 9;  // ld > cols: padding untouched
    std::vector<T> x(rows * ld);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<T>(mha::RandomStream(1, "softmax").uniform_double(i) * 8 - 4);
    const std::vector<T> before = x;
    mha::softmax_rows(x.data(), rows, cols, ld, MaskedRows::nan);
    for (std::size_t r = 0; r < rows; ++r) {
      double sum = 0, norm = 0;
      for (std::size_t c = 0; c < cols; ++c) norm += std::exp(double(before[r * ld + c]));
      for (std::size_t c = 0; c < cols; ++c) {
        const double want = std::exp(double(before[r * ld + c])) / norm;
        CHECK(double(x[r * ld + c]) ==
              Approx(want).epsilon(Tolerance<T>::rel).margin(Tolerance<T>::abs));
        CHECK(x[r * ld + c] > 0);
        sum += x[r * ld + c];
      }
      CHECK(sum == Approx(1.0).epsilon(Tolerance<T>::rel));
      for (std::size_t c = cols; c < ld; ++c) CHECK(x[r * ld + c] == before[r * ld + c]);
    }
  }
  SECTION("-inf entries get exactly zero weight") {
    std::vector<T> x = {1, -inf, 2, -inf};
    mha::softmax_rows(x.data(), 1, 4, 4, MaskedRows::nan);
    CHECK(x[1] == 0);
    CHECK(x[3] == 0);
    CHECK(double(x[0]) == Approx(1 / (1 + std::exp(1.0))));
    CHECK(double(x[2]) == Approx(std::exp(1.0) / (1 + std::exp(1.0))));
  }
  SECTION("large logits stay finite") {
    std::vector<T> x = {T(1e4), T(-1e4), 0, T(1e4), T(-1e4), T(-1e4), T(-1e4), T(-1e4)};
    mha::softmax_rows(x.data(), 2, 4, 4, MaskedRows::nan);
    CHECK(x[0] == T(0.5));
    CHECK(x[1] == 0);
    CHECK(x[2] == 0);
    CHECK(x[3] == T(0.5));
    for (std::size_t c = 4; c < 8; ++c) CHECK(x[c] == T(0.25));  // all equal, very negative
    std::vector<T> y = {T(3e4), T(3e4) - 1};
    mha::softmax_rows(y.data(), 1, 2, 2, MaskedRows::nan);
    CHECK(double(y[0]) == Approx(1 / (1 + std::exp(-1.0))));
  }
  SECTION("a row of only -inf follows the policy, other rows are unaffected") {
    for (MaskedRows policy : kPolicies) {
      std::vector<T> x = {-inf, -inf, -inf, 0, 0, 0};
      mha::softmax_rows(x.data(), 2, 3, 3, policy);
      INFO("policy " << mha::to_string(policy));
      for (std::size_t c = 0; c < 3; ++c) {
        if (policy == MaskedRows::zero) CHECK(x[c] == 0);
        if (policy == MaskedRows::uniform) CHECK(x[c] == T(1) / T(3));
        if (policy == MaskedRows::nan) CHECK(std::isnan(x[c]));
        CHECK(x[3 + c] == Approx(1.0 / 3).epsilon(Tolerance<T>::rel));
      }
    }
  }
  SECTION("zero rows is a no-op") {
    T x = 5;
    mha::softmax_rows(&x, 0, 1, 1, MaskedRows::nan);
    CHECK(x == 5);
  }
}

// ------------------------------------------------------------ resolve_dims

namespace {

mha::Config config(std::optional<std::int64_t> h, std::optional<std::int64_t> d_model,
                   std::optional<std::int64_t> seq_len) {
  mha::Config c;
  c.h = h;
  c.d_model = d_model;
  c.seq_len = seq_len;
  return c;
}

mha::FileShapes files(std::optional<std::vector<std::size_t>> q,
                      std::optional<std::vector<std::size_t>> k = std::nullopt,
                      std::optional<std::vector<std::size_t>> v = std::nullopt) {
  mha::FileShapes f;
  f.query = q;
  f.key = k;
  f.value = v;
  f.query_name = "q.npy";
  f.key_name = "k.npy";
  f.value_name = "v.npy";
  f.weights_name = "w.npz";
  return f;
}

}  // namespace

TEST_CASE("resolve_dims defaults", "[attention][dims]") {
  const mha::Dims d = mha::resolve_dims(config(2, 8, 5), {});
  CHECK(d.B == 1);
  CHECK(d.T == 5);
  CHECK(d.S == 5);
  CHECK(d.h == 2);
  CHECK(d.d_model == 8);
  CHECK(d.d_k == 4);
  CHECK(d.d_v == 4);
  CHECK(d.kdim == 8);
  CHECK(d.vdim == 8);
  CHECK(d.d_out == 8);
  CHECK(d.key_is_query);
  CHECK(d.value_is_key);

  mha::Config c = config(2, 8, 5);
  c.d_k = 3;
  c.batch = 4;
  c.kv_seq_len = 6;
  const mha::Dims e = mha::resolve_dims(c, {});
  CHECK(e.d_k == 3);
  CHECK(e.d_v == 3);  // d_v defaults to d_k, not d_model / h
  CHECK(e.B == 4);
  CHECK(e.S == 6);
  CHECK_FALSE(e.key_is_query);  // random cross-attention: S != T
  CHECK_FALSE(e.value_is_key);

  c = config(2, 8, 5);
  c.kdim = 6;
  const mha::Dims f = mha::resolve_dims(c, {});
  CHECK(f.kdim == 6);
  CHECK(f.vdim == 8);
  CHECK_FALSE(f.key_is_query);
  CHECK_FALSE(f.value_is_key);
}

TEST_CASE("resolve_dims infers sizes from files", "[attention][dims]") {
  SECTION("2-D query means batch 1, self-attention") {
    const mha::Dims d = mha::resolve_dims(config(2, std::nullopt, std::nullopt), files({{5, 8}}));
    CHECK(d.B == 1);
    CHECK(d.T == 5);
    CHECK(d.S == 5);
    CHECK(d.d_model == 8);
    CHECK(d.kdim == 8);
    CHECK(d.vdim == 8);
    CHECK(d.d_k == 4);
    CHECK(d.key_is_query);
    CHECK(d.value_is_key);
  }
  SECTION("3-D query gives the batch") {
    const mha::Dims d = mha::resolve_dims(config(4, std::nullopt, 5), files({{3, 5, 8}}));
    CHECK(d.B == 3);
    CHECK(d.d_k == 2);
  }
  SECTION("query, key and value") {
    const mha::Dims d = mha::resolve_dims(config(2, std::nullopt, std::nullopt),
                                          files({{2, 5, 8}}, {{2, 7, 6}}, {{2, 7, 4}}));
    CHECK(d.B == 2);
    CHECK(d.T == 5);
    CHECK(d.S == 7);
    CHECK(d.d_model == 8);
    CHECK(d.kdim == 6);
    CHECK(d.vdim == 4);
    CHECK_FALSE(d.key_is_query);
    CHECK_FALSE(d.value_is_key);
  }
  SECTION("query and value: the value is the key too") {
    const mha::Dims d =
        mha::resolve_dims(config(2, std::nullopt, std::nullopt), files({{5, 8}}, {}, {{7, 6}}));
    CHECK(d.S == 7);
    CHECK(d.kdim == 6);
    CHECK(d.vdim == 6);
    CHECK_FALSE(d.key_is_query);
    CHECK(d.value_is_key);
  }
  SECTION("weights give d_model, d_k, d_v, kdim, vdim and d_out") {
    mha::FileShapes f = files(std::nullopt);
    f.weights = {{"W_q", {10, 12}}, {"W_k", {9, 12}}, {"W_v", {11, 20}}, {"W_o", {20, 7}}};
    mha::Config c = config(4, std::nullopt, 3);
    c.kv_seq_len = 2;
    const mha::Dims d = mha::resolve_dims(c, f);
    CHECK(d.d_model == 10);
    CHECK(d.h == 4);
    CHECK(d.d_k == 3);
    CHECK(d.d_v == 5);
    CHECK(d.kdim == 9);
    CHECK(d.vdim == 11);
    CHECK(d.d_out == 7);
    CHECK(d.T == 3);
    CHECK(d.S == 2);
  }
  SECTION("d_k and W_q give h") {
    mha::FileShapes f = files(std::nullopt);
    f.weights = {{"W_q", {10, 12}}};
    mha::Config c = config(std::nullopt, std::nullopt, 3);
    c.d_k = 3;
    const mha::Dims d = mha::resolve_dims(c, f);
    CHECK(d.h == 4);
    CHECK(d.d_k == 3);
    CHECK(d.d_model == 10);
  }
  SECTION("flops counts the six products") {
    const mha::Dims d = make_dims(2, 3, 5, 4, 6, 7, 8, 9, 10, 11);
    const std::uint64_t bt = 6, bs = 10;
    CHECK(d.flops() == 2 * (bt * 6 * 28 + bs * 9 * 28 + bs * 10 * 32 + 2 * 4 * 3 * 5 * 7 +
                            2 * 4 * 3 * 5 * 8 + bt * 32 * 11));
  }
}

TEST_CASE("resolve_dims reports conflicts naming the key and the file", "[attention][dims]") {
  using mha::resolve_dims;
  mha::Config c = config(2, std::nullopt, std::nullopt);

  c.batch = 2;
  REQUIRE_INPUT_ERROR(resolve_dims(c, files({{3, 5, 8}})),
                      Contains("batch mismatch") && Contains("batch = 2 in the config") &&
                          Contains("'q.npy' of shape (3, 5, 8)") && Contains("batch = 3"));
  c.batch.reset();
  // A 2-D file means batch 1, which conflicts with a 3-D key of batch 2.
  REQUIRE_INPUT_ERROR(resolve_dims(c, files({{5, 8}}, {{2, 7, 6}}, {{2, 7, 6}})),
                      Contains("batch mismatch") && Contains("k.npy"));
  REQUIRE_INPUT_ERROR(resolve_dims(c, files({{2, 5, 8}}, {{2, 7, 6}}, {{3, 7, 6}})),
                      Contains("batch mismatch") && Contains("v.npy"));

  c.seq_len = 4;
  REQUIRE_INPUT_ERROR(resolve_dims(c, files({{5, 8}})),
                      Contains("seq_len mismatch") && Contains("seq_len = 4") &&
                          Contains("q.npy") && Contains("seq_len = 5"));
  c.seq_len.reset();

  c.kv_seq_len = 4;
  REQUIRE_INPUT_ERROR(resolve_dims(c, files({{5, 8}})),
                      Contains("kv_seq_len mismatch") && Contains("self-attention"));
  c.kv_seq_len.reset();
  REQUIRE_INPUT_ERROR(resolve_dims(c, files({{5, 8}}, {{7, 6}}, {{8, 6}})),
                      Contains("kv_seq_len mismatch") && Contains("k.npy") && Contains("v.npy"));

  c.d_model = 9;
  REQUIRE_INPUT_ERROR(resolve_dims(c, files({{5, 8}})),
                      Contains("d_model mismatch") && Contains("d_model = 9 in the config"));
  c.d_model.reset();
  {
    mha::FileShapes f = files({{5, 8}});
    f.weights = {{"W_q", {10, 8}}};
    REQUIRE_INPUT_ERROR(resolve_dims(c, f),
                        Contains("d_model mismatch") && Contains("w.npz:W_q of shape (10, 8)"));
  }

  c.kdim = 5;
  REQUIRE_INPUT_ERROR(resolve_dims(c, files({{5, 8}}, {{7, 6}}, {{7, 6}})),
                      Contains("kdim mismatch") && Contains("kdim = 5") && Contains("k.npy"));
  REQUIRE_INPUT_ERROR(resolve_dims(c, files({{5, 8}})),
                      Contains("kdim mismatch") && Contains("used as key"));
  c.kdim.reset();

  {
    mha::FileShapes f = files({{5, 8}}, {{7, 6}}, {{7, 4}});
    f.weights = {{"W_v", {5, 8}}};
    REQUIRE_INPUT_ERROR(resolve_dims(c, f),
                        Contains("vdim mismatch") && Contains("v.npy") && Contains("W_v"));
  }

  c.d_out = 5;
  {
    mha::FileShapes f = files({{5, 8}});
    f.weights = {{"W_o", {8, 7}}};
    REQUIRE_INPUT_ERROR(resolve_dims(c, f),
                        Contains("d_out mismatch") && Contains("d_out = 5") && Contains("W_o"));
  }
}

TEST_CASE("resolve_dims reports missing and inconsistent sizes", "[attention][dims]") {
  using mha::resolve_dims;
  REQUIRE_INPUT_ERROR(resolve_dims(config(2, 8, std::nullopt), {}), Contains("seq_len"));
  REQUIRE_INPUT_ERROR(resolve_dims(config(2, std::nullopt, 5), {}), Contains("d_model"));
  REQUIRE_INPUT_ERROR(resolve_dims(config(std::nullopt, 8, 5), {}),
                      Contains("h (number of heads) is required"));
  {
    mha::Config c = config(std::nullopt, 8, 5);
    c.d_k = 4;  // d_k alone needs W_q to give h
    REQUIRE_INPUT_ERROR(resolve_dims(c, {}), Contains("h (number of heads)"));
  }
  REQUIRE_INPUT_ERROR(resolve_dims(config(3, 10, 5), {}),
                      Contains("d_model = 10") && Contains("h = 3") && Contains("d_k"));
  {
    mha::FileShapes f = files(std::nullopt);
    f.weights = {{"W_q", {10, 12}}};
    REQUIRE_INPUT_ERROR(resolve_dims(config(5, std::nullopt, 3), f),
                        Contains("W_q") && Contains("h = 5"));
    mha::Config c = config(std::nullopt, std::nullopt, 3);
    c.d_k = 5;
    REQUIRE_INPUT_ERROR(resolve_dims(c, f), Contains("W_q") && Contains("d_k = 5"));
    f.weights["W_v"] = {10, 10};
    REQUIRE_INPUT_ERROR(resolve_dims(config(4, std::nullopt, 3), f),
                        Contains("W_v") && Contains("h = 4"));
  }
  REQUIRE_INPUT_ERROR(resolve_dims(config(2, 8, 5), files({{5, 8}}, {{5, 8}}, std::nullopt)),
                      Contains("'key' is given without 'value'"));
  REQUIRE_INPUT_ERROR(resolve_dims(config(2, 8, 5), files(std::nullopt, std::nullopt, {{5, 8}})),
                      Contains("'value' is given without 'query'"));
  REQUIRE_INPUT_ERROR(
      resolve_dims(config(2, 8, 5), files({{8}})),
      Contains("q.npy") && Contains("(B, T, d_model) or (T, d_model)") && Contains("(8,)"));
  REQUIRE_INPUT_ERROR(resolve_dims(config(2, 8, 5), files({{1, 2, 5, 8}})), Contains("q.npy"));
  REQUIRE_INPUT_ERROR(resolve_dims(config(2, 8, 5), files({{0, 8}})),
                      Contains("q.npy") && Contains("empty dimension"));
  REQUIRE_INPUT_ERROR(resolve_dims(config(2, 8, 5), files({{5, 8}}, {{7}}, {{7, 4}})),
                      Contains("k.npy") && Contains("(B, S, kdim) or (S, kdim)"));
}

// -------------------------------------------------------------- load_mask

TEST_CASE("load_mask normalizes every mask shape", "[attention][mask]") {
  TempDir dir("attention");
  const mha::Dims d = make_dims(2, 3, 4, 5, 10, 2, 2, 10, 10, 10);
  struct Case {
    std::vector<std::size_t> shape;
    std::size_t mask_B, mask_h;
  };
  for (const Case& k :
       {Case{{3, 4}, 1, 1}, Case{{2, 3, 4}, 2, 1}, Case{{1, 3, 4}, 1, 1}, Case{{1, 1, 3, 4}, 1, 1},
        Case{{1, 5, 3, 4}, 1, 5}, Case{{2, 1, 3, 4}, 2, 1}, Case{{2, 5, 3, 4}, 2, 5}}) {
    INFO("shape " << mha::shape_str(k.shape));
    const ref::MaskSpec spec = random_mask(k.shape, false, 77);
    mha::Config c;
    c.mask = write_mask(dir, spec, FileType::int64);
    const auto m = mha::load_mask<float>(c, d);
    CHECK(m.mask_B == k.mask_B);
    CHECK(m.mask_h == k.mask_h);
    CHECK(m.bias.empty());
    REQUIRE(m.allow.size() == spec.values.size());
    for (std::size_t i = 0; i < spec.values.size(); ++i)
      CHECK(int(m.allow[i]) == (spec.values[i] != 0 ? 1 : 0));
    CHECK_FALSE(m.empty());
  }
  {
    const ref::MaskSpec spec = random_mask({3, 4}, true, 78);
    mha::Config c;
    c.mask = write_mask(dir, spec, FileType::float64);
    const auto m = mha::load_mask<double>(c, d);
    CHECK(m.allow.empty());
    CHECK(m.bias == spec.values);
  }
  {
    mha::Config c;
    CHECK(mha::load_mask<double>(c, d).empty());
    c.causal = Causal::bottom_right;
    c.key_lengths = std::vector<std::int64_t>{4, 0};
    const auto m = mha::load_mask<double>(c, d);
    CHECK(m.causal == Causal::bottom_right);
    CHECK(m.mask_B == 0);
    CHECK(m.key_lengths == std::vector<std::int64_t>{4, 0});
  }
}

TEST_CASE("load_mask reads key_lengths files of any integer type", "[attention][mask]") {
  TempDir dir("attention");
  const mha::Dims d = make_dims(2, 3, 4, 1, 4, 4, 4, 4, 4, 4);
  auto raw = [&](mha::DType dtype, std::vector<unsigned char> bytes) {
    mha::NpyArray a;
    a.dtype = dtype;
    a.shape = {2};
    a.data = std::move(bytes);
    return dir.write_npy(a, "lengths");
  };
  const std::pair<mha::DType, std::vector<unsigned char>> cases[] = {
      {mha::DType::i1, {4, 0}},
      {mha::DType::u1, {4, 0}},
      {mha::DType::u2, {4, 0, 0, 0}},
      {mha::DType::i4, {4, 0, 0, 0, 0, 0, 0, 0}},
      {mha::DType::u8, {4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
  };
  for (const auto& [dtype, bytes] : cases) {
    INFO(mha::dtype_name(dtype));
    mha::Config c;
    c.key_lengths_file = raw(dtype, bytes);
    CHECK(mha::load_mask<float>(c, d).key_lengths == std::vector<std::int64_t>{4, 0});
  }
}

TEST_CASE("load_mask errors name the file and the expected shape or range", "[attention][mask]") {
  TempDir dir("attention");
  const mha::Dims d = make_dims(2, 5, 7, 3, 9, 3, 3, 9, 9, 9);
  const std::string expected =
      "expected (T, S), (B, T, S) or (B or 1, h or 1, T, S) = (5, 7), (2, 5, 7) or (2, 3, 5, 7)";
  for (const std::vector<std::size_t>& shape : {std::vector<std::size_t>{5, 8},
                                                {6, 7},
                                                {7},
                                                {3, 5, 7},
                                                {2, 2, 5, 7},
                                                {3, 1, 5, 7},
                                                {1, 2, 3, 5, 7},
                                                {7, 5}}) {
    INFO("shape " << mha::shape_str(shape));
    mha::Config c;
    c.mask = write_mask(dir, random_mask(shape, false, 1), FileType::boolean);
    REQUIRE_INPUT_ERROR(
        mha::load_mask<float>(c, d),
        Contains(*c.mask + ": mask of shape " + mha::shape_str(shape) + " does not fit") &&
            Contains(expected));
  }
  {
    mha::Config c;
    c.mask = dir / "missing.npy";
    REQUIRE_INPUT_ERROR(mha::load_mask<float>(c, d), Contains("missing.npy"));
  }
  {
    mha::Config c;
    c.key_lengths = std::vector<std::int64_t>{1, 2, 3};
    REQUIRE_INPUT_ERROR(mha::load_mask<float>(c, d),
                        Contains("key_lengths: expected B = 2 key lengths, got 3"));
    c.key_lengths = std::vector<std::int64_t>{7, 8};
    REQUIRE_INPUT_ERROR(mha::load_mask<float>(c, d),
                        Contains("key_lengths: key length 8 at index 1 is outside [0, S = 7]"));
    c.key_lengths = std::vector<std::int64_t>{7, -1};
    REQUIRE_INPUT_ERROR(mha::load_mask<float>(c, d),
                        Contains("key length -1 at index 1 is outside [0, S = 7]"));
  }
  {
    mha::Config c;
    std::int32_t v[] = {-1, 3};
    c.key_lengths_file = dir.write_npy(mha::NpyArray::of(v, {2}), "lengths");
    REQUIRE_INPUT_ERROR(mha::load_mask<float>(c, d),
                        Contains(*c.key_lengths_file + ": key length -1 at index 0 is outside"));
    std::int64_t w[] = {1, 2, 3};
    c.key_lengths_file = dir.write_npy(mha::NpyArray::of(w, {3}), "lengths");
    REQUIRE_INPUT_ERROR(mha::load_mask<float>(c, d),
                        Contains(*c.key_lengths_file + ": expected B = 2 key lengths, got 3"));
    c.key_lengths_file = dir.write_npy(mha::NpyArray::of(w, {1, 2}), "lengths");
    REQUIRE_INPUT_ERROR(
        mha::load_mask<float>(c, d),
        Contains(*c.key_lengths_file + ": expected a 1-D integer array of B = 2 key lengths, got "
                                       "int64 array of shape (1, 2)"));
    float f[] = {1, 2};
    c.key_lengths_file = dir.write_npy(mha::NpyArray::of(f, {2}), "lengths");
    REQUIRE_INPUT_ERROR(mha::load_mask<float>(c, d), Contains("got float32 array of shape (2,)"));
    bool b[] = {true, true};
    c.key_lengths_file = dir.write_npy(mha::NpyArray::of(b, {2}), "lengths");
    REQUIRE_INPUT_ERROR(mha::load_mask<float>(c, d), Contains("got bool array"));
  }
}
