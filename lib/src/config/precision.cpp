#include "mha/config/precision.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "mha/base/error.hpp"
#include "mha/io/npy.hpp"

namespace mha {
namespace {

// Index of element i of a C-order tensor of `shape`, as NumPy prints it.
std::string index_str(std::size_t i, const std::vector<std::size_t>& shape) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    index[k] = shape[k] ? i % shape[k] : 0;
    i = shape[k] ? i / shape[k] : 0;
  }
  return shape_str(index);
}

template <class U>
const char* range_of() {
  return std::is_same_v<U, float16> ? "float16's range (+-65504)" : "float32's range (+-3.4e38)";
}

}  // namespace

template <class U, class T>
std::vector<U> convert_for_output(const T* data, std::size_t n,
                                  const std::vector<std::size_t>& shape, const std::string& name,
                                  bool allow_overflow) {
  std::vector<U> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = to_double(data[i]);
    if constexpr (std::is_same_v<U, float16>)
      out[i] = to_float16(x);
    else
      out[i] = static_cast<U>(x);  // double -> float: the FPU rounds to nearest even
    if (!allow_overflow && std::isinf(to_double(out[i])) && std::isfinite(x)) {
      char value[32];
      std::snprintf(value, sizeof value, "%.9g", x);
      fail_input(name + ": value " + value + " at index " + index_str(i, shape) + " is beyond " +
                 range_of<U>() + "; output_dtype " +
                 (std::is_same_v<U, float16> ? "float16" : "float32") +
                 " would write it as inf (use a wider output_dtype, or allow_nonfinite to write "
                 "inf)");
    }
  }
  return out;
}

#define MHA_INSTANTIATE(U, T)                       \
  template std::vector<U> convert_for_output<U, T>( \
      const T*, std::size_t, const std::vector<std::size_t>&, const std::string&, bool);
MHA_INSTANTIATE(float16, float)
MHA_INSTANTIATE(float16, double)
MHA_INSTANTIATE(float, double)
MHA_INSTANTIATE(double, float)
#undef MHA_INSTANTIATE

}  // namespace mha
