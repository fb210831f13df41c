// Internals of vexp.cpp shared with its unit tests (tests/test_vexp.cpp):
// the three implementations of the float exp_shifted_sum, the CPU feature
// checks that say which of them may run here, and the run-time choice among
// them. Not part of the installed interface (mha/vexp.hpp is).
#pragma once

#include <cstddef>

namespace mha::detail {

// The float exp_shifted_sum of mha/vexp.hpp, one per instruction set. All
// three use the same algorithm and constants, so they agree to within the
// rounding of the last few operations. The AVX2 and AVX-512 versions are
// compiled for their ISA whatever the build flags; calling one on a CPU
// without it (see below) is undefined (an illegal instruction).
float exp_shifted_sum_scalar(float* x, std::size_t n, float shift);
float exp_shifted_sum_avx2(float* x, std::size_t n, float shift);
float exp_shifted_sum_avx512(float* x, std::size_t n, float shift);
// max_of (vexp.hpp) in each build, under the same conditions.
float max_of_scalar(const float* x, std::size_t n);
float max_of_avx2(const float* x, std::size_t n);
float max_of_avx512(const float* x, std::size_t n);

// Whether this CPU (and OS) supports what exp_shifted_sum_avx2 needs
// (AVX2 and FMA) and what exp_shifted_sum_avx512 needs (AVX-512F and DQ).
bool cpu_has_avx2();
bool cpu_has_avx512();

// The implementation ("avx512", "avx2" or "scalar") chosen for a request, the
// value of MHA_VEXP: the requested one if the CPU supports it, otherwise (and
// for a null, empty or unknown request) the best the CPU supports. The choice
// mha::exp_shifted_sum makes once, exposed so tests can check the fallbacks.
const char* select_vexp_isa(const char* request);

}  // namespace mha::detail
