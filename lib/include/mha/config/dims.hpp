// How the sizes of one multi-head attention problem (Dims, kernel/dims.hpp)
// are resolved from the config and the shapes of the given files.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mha/config/config.hpp"
#include "mha/kernel/dims.hpp"

namespace mha {

// Shapes of whatever tensors came from files; absent ones are random.
struct FileShapes {
  std::optional<std::vector<std::size_t>> query, key, value;
  std::string query_name, key_name, value_name;             // paths, for messages
  std::map<std::string, std::vector<std::size_t>> weights;  // native "W_q" -> shape
  std::optional<std::size_t> weights_h;  // when the weights layout stores h (keras)
  std::string weights_name;
};

// Fills every size from the config, the files and the documented defaults.
// Throws mha::Error (invalid_input) naming the key and the file whenever they
// disagree or a size is missing.
Dims resolve_dims(const Config& config, const FileShapes& files);

}  // namespace mha
