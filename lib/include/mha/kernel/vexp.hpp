// Vectorized exponential for the softmax: an AVX-512 or AVX2 polynomial
// chosen at run time by CPU features, with a scalar fallback. No per-element
// std::exp in the hot loop.
#pragma once

#include <cstddef>

namespace mha {

// x[i] = exp(x[i] - shift) for i < n; returns the sum of the new x[i]
// (accumulated in float). exp(-inf) = 0; arguments below about -87.3 give 0,
// never a denormal surprise or NaN. Within 2 ulp of std::exp for arguments in
// [-87, 88].
float exp_shifted_sum(float* x, std::size_t n, float shift);
double exp_shifted_sum(double* x, std::size_t n, double shift);  // scalar std::exp

// max(x[0..n)), NaN values skipped, -inf for n = 0 (a softmax row's shift):
// vectorized in the same builds as exp_shifted_sum; exact, so every build
// returns the same value.
float max_of(const float* x, std::size_t n);
double max_of(const double* x, std::size_t n);

// Which implementation exp_shifted_sum<float> uses here: "avx512", "avx2" or "scalar".
const char* vexp_isa();

}  // namespace mha
