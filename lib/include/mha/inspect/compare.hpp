// Element-wise comparison of two arrays, as numpy.allclose decides it:
// |a - b| <= atol + rtol * |b|; an infinity is close only to the same
// infinity, and NaN to NaN only with equal_nan.
// `mha compare` and the interop test suites use it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mha/io/npy.hpp"

namespace mha {

// numpy.allclose's keyword arguments, with its defaults.
struct AllClose {
  double rtol = 1e-5;
  double atol = 1e-8;
  bool equal_nan = false;  // NaN in both arrays at the same index counts as close
};

struct Comparison {
  bool same_shape = true;
  bool close = true;                     // every element within tolerance
  std::uint64_t count = 0;               // elements compared
  std::uint64_t mismatches = 0;          // elements outside tolerance (NaN mismatches included)
  double max_abs_diff = 0;               // over elements where both are finite
  double max_rel_diff = 0;               // |a - b| / |b| over finite elements with b != 0
  std::vector<std::size_t> worst_index;  // index of the largest |a - b| - (atol + rtol |b|)
  double worst_a = 0, worst_b = 0;
  std::uint64_t nan_a = 0, nan_b = 0;  // NaN counts in each array
  std::uint64_t nan_mismatches = 0;    // indices where exactly one is NaN
};

// Compares float arrays (f2/f4/f8, converted to double) or bool/integer
// arrays (compared as numbers). Arrays of different shapes compare as not
// close with same_shape false. Throws mha::Error (invalid_input) for
// unsupported dtypes, naming `name_a` or `name_b`, and for a tolerance that is
// negative, infinite or NaN.
Comparison compare(const NpyArray& a, const NpyArray& b, const AllClose& tolerance,
                   const std::string& name_a = "a", const std::string& name_b = "b");

// The same with equal_nan = false, numpy's default.
Comparison compare(const NpyArray& a, const NpyArray& b, double rtol, double atol,
                   const std::string& name_a = "a", const std::string& name_b = "b");

}  // namespace mha
