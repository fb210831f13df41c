// What kind of array file a path is, decided here for every reader and
// writer (weights, `mha inspect`, the plan's one-layer reads, `mha weights
// convert`), so that no two of them can disagree about the same file:
//
//   a directory                                  npy_directory (NAME.npy, one array each)
//   NAME.safetensors, or a file that starts as one  safetensors
//   NAME.keras                                   keras (a zip holding model.weights.h5)
//   NAME.h5, NAME.hdf5, or a file that starts as HDF5  hdf5 (Keras' .h5 and .weights.h5)
//   NAME.npz, NAME.npy                            npz, npy
//   another name, or a pipe                      npz if it starts as a zip archive, else npy
//
// safetensors comes before the name so that a checkpoint saved under another
// ending is still read as one. What is recognised as nothing is npy, whose
// reader then says what is wrong with it.
#pragma once

#include <optional>
#include <string>

namespace mha {

enum class FileKind { npy, npz, safetensors, npy_directory, hdf5, keras };

// The kind of `path` as above. A stream input (stream_input.hpp) is read
// whole to look at its first bytes; a missing or unreadable file is npy.
FileKind file_kind(const std::string& path);

// The kind the name alone says (.npy, .npz, .safetensors, .h5, .hdf5, .keras), for a file about to
// be written or a directory's entries; nothing for another ending.
std::optional<FileKind> kind_from_name(const std::string& path);

}  // namespace mha
