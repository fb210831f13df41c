// Inputs given in memory instead of files: the Python module's NumPy arrays
// and weight dicts. Each is registered under a name that stands for a path
// ("<memory:3>") and goes wherever a path goes in a config; read_npy,
// read_npy_header and read_weight_arrays look here first, so a run plans and
// loads them exactly as it would the same arrays from files.
#pragma once

#include <map>
#include <string>

#include "mha/io/npy.hpp"

namespace mha {

// Registers an array or a weights dict; returns its path. Thread-safe.
std::string provide_npy(NpyArray array);

// A caller's C-order, native-order buffer, borrowed: it must outlive the
// registration. Readers that can use it in place (a run's query, key and
// value in the compute dtype) do; read_npy copies it like any other.
struct NpyView {
  const void* data = nullptr;
  DType dtype = DType::f4;
  std::vector<std::size_t> shape;
  std::size_t bytes() const;
};
std::string provide_view(NpyView view);
const NpyView* provided_view(const std::string& path);
std::string provide_weights(std::map<std::string, NpyArray> arrays);

// Forgets a registration (its path then reads as a missing file).
void release_provided(const std::string& path);

// The registered array or dict under `path`, or null. The pointer stays
// valid until release_provided(path).
const NpyArray* provided_npy(const std::string& path);
const std::map<std::string, NpyArray>* provided_weights(const std::string& path);

}  // namespace mha
