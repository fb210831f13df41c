// HDF5 files, as Keras writes weights in them (.h5, .weights.h5 and the
// model.weights.h5 inside a .keras; config/keras_file.hpp knows those
// layouts), read and written through Debian's libhdf5, loaded at run time.
//
//   mha::Hdf5File f("model.weights.h5");
//   for (const std::string& child : f.children("layers")) ...
//   const mha::Hdf5Dataset& d = f.dataset("layers/dense/vars/0");   // dtype, shape
//   mha::NpyArray kernel = f.read("layers/dense/vars/0");           // checked, then read
//
// The file is treated as untrusted input. Opening walks the tree once, with
// bounds (kMaxObjects objects, kMaxDepth groups deep), through hard links
// only: a soft link or an external link anywhere is refused, so every path
// names an object inside the file. Reading a dataset checks first its dtype
// (float16/32/64 in IEEE layout; others refused by name), its storage (no
// external or virtual storage, no chunk or contiguous block left unwritten,
// which would read as the fill value, filters deflate/shuffle/fletcher32 only)
// and its declared size: under kMaxDatasetBytes, under the file's size when
// stored uncompressed, and under 1100 times the bytes it stores when deflated
// (deflate expands at most about 1032 times), so a header declaring 2^40
// elements is refused before anything is allocated. Every failure is one
// mha::Error (invalid_input) naming the file and the dataset; HDF5 prints
// nothing of its own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mha/io/npy.hpp"

namespace mha {

// A dataset's description from its header, before any data is read.
struct Hdf5Dataset {
  std::string type;                // "float32", "int32", "string", "compound", ...
  std::optional<DType> dtype;      // f2, f4 or f8 for IEEE floats; none for the rest
  std::vector<std::size_t> shape;  // empty: a scalar
  std::uint64_t bytes = 0;         // elements * item size, saturated at UINT64_MAX
};

class Hdf5File {
 public:
  static constexpr std::size_t kMaxObjects = 200000;  // groups, datasets and links walked
  static constexpr int kMaxDepth = 32;                // groups nested (also ends hard-link cycles)
  static constexpr std::uint64_t kMaxDatasetBytes = std::uint64_t{4} << 30;

  // A file on disk, or a pipe read whole (stream_input.hpp). Throws
  // mha::Error (invalid_input) naming `path` when it is not a readable HDF5
  // file, is truncated, or breaks the bounds above.
  explicit Hdf5File(const std::string& path);
  // A file image in memory (a .keras member), shared with the caller and kept
  // alive as long as this object: HDF5 reads it in place, without copies.
  Hdf5File(std::shared_ptr<const std::string> image, const std::string& name);
  ~Hdf5File();
  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;

  const std::string& name() const { return name_; }

  // Paths are link names joined by '/', without a leading '/'; "" is the root.
  bool is_group(const std::string& path) const;
  bool is_dataset(const std::string& path) const;
  // A group's link names, in HDF5's name order; throws when `path` is not a group.
  const std::vector<std::string>& children(const std::string& group) const;
  // Throws naming the file and the path when `path` is not a dataset.
  const Hdf5Dataset& dataset(const std::string& path) const;

  // A string attribute of the group or dataset at `path`, as a list (a
  // scalar string gives one element; fixed-length strings lose their
  // trailing NULs); none when absent. Throws when it is not a string or a
  // list of strings, or holds over 64 MiB.
  std::optional<std::vector<std::string>> strings(const std::string& path,
                                                  const std::string& attribute) const;

  // The dataset's values, in native byte order and C order, after the checks
  // in the opening comment.
  NpyArray read(const std::string& path) const;

 private:
  struct Object {
    bool group = false;
    std::vector<std::string> children;  // groups
    Hdf5Dataset dataset;                // datasets
  };
  void open(std::int64_t file_id);
  void walk(std::int64_t group_id, const std::string& path, int depth);

  std::string name_;
  std::shared_ptr<const std::string> image_;
  std::uint64_t file_bytes_ = 0;
  std::int64_t file_ = -1;  // hid_t
  std::map<std::string, Object> objects_;
  std::size_t walked_ = 0;
};

// The bytes of a new HDF5 file holding `datasets` (float16/32/64 arrays,
// little-endian, contiguous, uncompressed: what h5py writes for
// `group[name] = array`) at their paths, the groups on the way created as
// needed, and variable-length UTF-8 string attributes `attributes`
// ({group path, attribute name, value}) on groups. `what` names the output
// in messages.
struct Hdf5StringAttribute {
  std::string path, name, value;
};
std::string encode_hdf5(const std::vector<std::pair<std::string, NpyArray>>& datasets,
                        const std::vector<Hdf5StringAttribute>& attributes,
                        const std::string& what);

// Whether a file's first bytes start with HDF5's signature (a superblock at
// offset 0, as Keras' and h5py's files have).
bool looks_like_hdf5(const std::string& head);

}  // namespace mha
