#include "mha/inspect/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "mha/base/error.hpp"

namespace mha {

namespace {

bool supported(DType dtype) {
  switch (dtype) {
    case DType::f2:
    case DType::f4:
    case DType::f8:
    case DType::b1:
    case DType::i1:
    case DType::i2:
    case DType::i4:
    case DType::i8:
    case DType::u1:
    case DType::u2:
    case DType::u4:
    case DType::u8:
      return true;
  }
  return false;
}

template <class T>
void ints_to_double(const unsigned char* p, std::size_t n, double* out) {
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(v);
  }
}

// Converts elements [begin, begin + n) of `array` to double. Float dtypes go
// through mha::convert (which knows float16); bools and integers are
// converted by value here (64-bit integers beyond 2^53 round to nearest).
void to_double(const NpyArray& array, std::size_t begin, std::size_t n, double* out,
               const std::string& name) {
  const std::size_t item = itemsize(array.dtype);
  const unsigned char* p = array.data.data() + begin * item;
  if (is_float(array.dtype)) {
    NpyArray chunk;
    chunk.dtype = array.dtype;
    chunk.shape = {n};
    chunk.data.assign(p, p + n * item);
    convert(chunk, out, name);
    return;
  }
  switch (array.dtype) {
    case DType::b1:
      for (std::size_t i = 0; i < n; ++i) out[i] = p[i] != 0 ? 1.0 : 0.0;
      break;
    case DType::i1:
      ints_to_double<std::int8_t>(p, n, out);
      break;
    case DType::i2:
      ints_to_double<std::int16_t>(p, n, out);
      break;
    case DType::i4:
      ints_to_double<std::int32_t>(p, n, out);
      break;
    case DType::i8:
      ints_to_double<std::int64_t>(p, n, out);
      break;
    case DType::u1:
      ints_to_double<std::uint8_t>(p, n, out);
      break;
    case DType::u2:
      ints_to_double<std::uint16_t>(p, n, out);
      break;
    case DType::u4:
      ints_to_double<std::uint32_t>(p, n, out);
      break;
    case DType::u8:
      ints_to_double<std::uint64_t>(p, n, out);
      break;
    default:
      fail_input(name + ": cannot compare arrays of this dtype");
  }
}

void check_array(const NpyArray& array, const std::string& name) {
  if (!supported(array.dtype))
    fail_input(name + ": unsupported dtype (code " + std::to_string(static_cast<int>(array.dtype)) +
               "); expected a float, bool or integer array");
  const std::size_t expected = array.size() * itemsize(array.dtype);
  if (array.data.size() != expected)
    fail_runtime(name + ": " + array.describe() + " holds " + std::to_string(array.data.size()) +
                 " data bytes, expected " + std::to_string(expected));
}

std::vector<std::size_t> unravel(std::size_t flat, const std::vector<std::size_t>& shape) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// numpy accepts any tolerance, but a negative or NaN one answers "not close"
// for equal arrays and an infinite one "close" for any finite pair.
void check_tolerance(double value, const char* name) {
  if (std::isfinite(value) && value >= 0) return;
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  fail_input(std::string("compare: ") + name + " = " + text + "; expected a finite number >= 0");
}

}  // namespace

Comparison compare(const NpyArray& a, const NpyArray& b, double rtol, double atol,
                   const std::string& name_a, const std::string& name_b) {
  return compare(a, b, AllClose{rtol, atol, false}, name_a, name_b);
}

Comparison compare(const NpyArray& a, const NpyArray& b, const AllClose& tolerance,
                   const std::string& name_a, const std::string& name_b) {
  check_tolerance(tolerance.rtol, "rtol");
  check_tolerance(tolerance.atol, "atol");
  const double rtol = tolerance.rtol, atol = tolerance.atol;
  check_array(a, name_a);
  check_array(b, name_b);

  Comparison r;
  if (a.shape != b.shape) {
    r.same_shape = false;
    r.close = false;
    return r;
  }

  const std::size_t n = a.size();
  r.count = n;
  if (n == 0) return r;

  constexpr double kInf = std::numeric_limits<double>::infinity();
  double worst_excess = -kInf;
  std::size_t worst_flat = 0;
  bool have_worst = false;

  // Chunks keep the memory bounded for large tensors.
  constexpr std::size_t kChunk = 4096;
  std::vector<double> va(std::min(n, kChunk)), vb(std::min(n, kChunk));
  for (std::size_t begin = 0; begin < n; begin += kChunk) {
    const std::size_t len = std::min(kChunk, n - begin);
    to_double(a, begin, len, va.data(), name_a);
    to_double(b, begin, len, vb.data(), name_b);
    for (std::size_t i = 0; i < len; ++i) {
      const double x = va[i], y = vb[i];
      const bool nan_x = std::isnan(x), nan_y = std::isnan(y);
      r.nan_a += nan_x;
      r.nan_b += nan_y;

      bool mismatch;
      double excess;
      if (nan_x || nan_y) {
        mismatch = nan_x != nan_y || !tolerance.equal_nan;
        if (nan_x != nan_y) ++r.nan_mismatches;
        excess = mismatch ? kInf : -kInf;
      } else if (std::isinf(x) || std::isinf(y)) {
        mismatch = x != y;  // only the same infinity is close
        excess = mismatch ? kInf : -kInf;
      } else {
        const double diff = std::fabs(x - y);
        const double tol = atol + rtol * std::fabs(y);
        mismatch = !(diff <= tol);
        excess = diff - tol;
        if (std::isnan(excess)) excess = mismatch ? kInf : -kInf;  // inf - inf
        if (diff > r.max_abs_diff) r.max_abs_diff = diff;
        if (y != 0) {
          const double rel = diff / std::fabs(y);
          if (rel > r.max_rel_diff) r.max_rel_diff = rel;
        }
      }
      if (mismatch) ++r.mismatches;
      if (!have_worst || excess > worst_excess) {
        have_worst = true;
        worst_excess = excess;
        worst_flat = begin + i;
        r.worst_a = x;
        r.worst_b = y;
      }
    }
  }

  r.close = r.mismatches == 0;
  r.worst_index = unravel(worst_flat, a.shape);
  return r;
}

}  // namespace mha
