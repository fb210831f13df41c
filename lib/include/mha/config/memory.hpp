// What a run will hold in memory, computed from its sizes before anything
// large is allocated, so that a run too big for the machine is refused with
// the numbers instead of being killed by the OOM killer half-way.
#pragma once

#include <cstdint>
#include <string>

#include "mha/config/dims.hpp"

namespace mha {

struct MemoryEstimate {
  double inputs = 0;       // query/key/value in the compute dtype, plus their file images
  double weights = 0;      // the four kernels and biases, plus their file images
  double projections = 0;  // Q, K, V and the concatenated head outputs
  double output = 0;       // (B, T, d_out)
  double scratch = 0;      // per-thread blocks of the attention kernel
  double total() const { return inputs + weights + projections + output + scratch; }
  std::string describe() const;  // "9.1 GiB (inputs 2.0 GiB, ...)"
};

// `itemsize`: 4 for float32, 8 for float64. Doubles avoid overflow for any
// sizes the config accepts.
MemoryEstimate estimate_memory(const Dims& dims, std::size_t itemsize, bool save_attention,
                               int threads);

// 80% of physical memory: the default max_memory.
std::uint64_t default_max_memory();

// "512MiB", "8GiB", "1.5GB", "1000000" (bytes) -> bytes; throws mha::Error
// (invalid_input) naming `where` on anything else.
std::uint64_t parse_byte_size(const std::string& text, const std::string& where);

std::string format_bytes(double bytes);  // "1.5 GiB"

}  // namespace mha
