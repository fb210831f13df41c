#include "mha/io/hdf5.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>

#include "libhdf5.hpp"
#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/io/stream_input.hpp"

namespace mha {

namespace {

const detail::Libhdf5& h5() {
  return detail::libhdf5();
}

// Debian's libhdf5 is built without thread safety: one call at a time in the
// process, whoever makes it (the Python module may read from several threads).
std::mutex& h5_mutex() {
  static std::mutex m;
  return m;
}

// An HDF5 identifier closed by `close` when it goes out of scope.
class Id {
 public:
  using Close = herr_t (*)(hid_t);
  Id(hid_t id, Close close) : id_(id), close_(close) {}
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  Close close_;
};

std::string join(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "/" + name;
}

// "/a/b" as HDF5 opens it from the file; "" is the root.
std::string absolute(const std::string& path) {
  return "/" + path;
}

// HDF5 names the on-disk type; messages name it as NumPy would.
std::string describe_type(hid_t type, std::optional<DType>& dtype) {
  const H5T_class_t cls = h5().H5Tget_class(type);
  const std::size_t size = h5().H5Tget_size(type);
  switch (cls) {
    case H5T_FLOAT: {
      std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
      h5().H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
      const std::size_t bias = h5().H5Tget_ebias(type);
      // IEEE binary16/32/64 exactly (h5py's float16 is binary16 this way);
      // another layout would be read as wrong numbers.
      struct Ieee {
        std::size_t size, spos, epos, esize, msize, bias;
        DType dtype;
      };
      const Ieee ieee[] = {{2, 15, 10, 5, 10, 15, DType::f2},
                           {4, 31, 23, 8, 23, 127, DType::f4},
                           {8, 63, 52, 11, 52, 1023, DType::f8}};
      for (const Ieee& f : ieee)
        if (size == f.size && spos == f.spos && epos == f.epos && esize == f.esize && mpos == 0 &&
            msize == f.msize && bias == f.bias) {
          dtype = f.dtype;
          return dtype_name(f.dtype);
        }
      return "a non-IEEE " + std::to_string(8 * size) + "-bit float";
    }
    case H5T_INTEGER:
      return std::string(h5().H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") +
             std::to_string(8 * size);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "variable-length";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_REFERENCE:
      return "reference";
    case H5T_BITFIELD:
      return "bitfield";
    default:
      return "an unknown type";
  }
}

// kAccessReadOnly and kAccessTruncate, whose macros call H5check() and H5open()
// from the linked library, which this one is not.
constexpr unsigned kAccessReadOnly = 0x0000u;
constexpr unsigned kAccessTruncate = 0x0002u;

std::string bytes_str(std::uint64_t n) {
  std::string s = std::to_string(n) + " bytes";
  if (n >= (std::uint64_t{1} << 30) && n % (std::uint64_t{1} << 30) == 0)
    s += " (" + std::to_string(n >> 30) + " GiB)";
  return s;
}

// HDF5's core driver over a file image in memory, read in place: the
// callbacks hand HDF5 the image wherever it would allocate a buffer for it or
// copy it (at H5Pset_file_image, when the property list is copied, at open),
// and free nothing. udata is the std::string holding the image, which the
// Hdf5File keeps (image_) for as long as the file is open. This is
// H5LTopen_file_image's DONT_COPY | DONT_RELEASE mode without the high-level
// library, whose 1.10 series leaks that mode's bookkeeping on every open.
void* image_malloc(size_t size, H5FD_file_image_op_t, void* udata) {
  auto* image = static_cast<std::string*>(udata);
  return size == image->size() ? image->data() : nullptr;
}
void* image_memcpy(void* dest, const void* src, size_t size, H5FD_file_image_op_t, void* udata) {
  auto* image = static_cast<std::string*>(udata);
  // Every copy asked for is of the image onto itself.
  return dest == image->data() && src == image->data() && size == image->size() ? dest : nullptr;
}
void* image_realloc(void*, size_t, H5FD_file_image_op_t, void*) {
  return nullptr;  // opened read-only: the image never grows
}
herr_t image_free(void*, H5FD_file_image_op_t, void*) {
  return 0;
}
void* udata_copy(void* udata) {
  return udata;
}
herr_t udata_free(void*) {
  return 0;
}

// Called with the lock held; the file's id, or negative when HDF5 refused it.
hid_t open_image(const std::string& image) {
  const detail::Libhdf5& h = h5();
  const Id fapl(h.H5Pcreate(h.H5P_CLS_FILE_ACCESS_ID_g), h.H5Pclose);
  H5FD_file_image_callbacks_t callbacks = {image_malloc, image_memcpy, image_realloc, image_free,
                                           udata_copy,   udata_free,   nullptr};
  callbacks.udata = const_cast<std::string*>(&image);
  if (!fapl.ok() || h.H5Pset_fapl_core(fapl.get(), image.size(), false) < 0 ||
      h.H5Pset_file_image_callbacks(fapl.get(), &callbacks) < 0 ||
      h.H5Pset_file_image(fapl.get(), const_cast<char*>(image.data()), image.size()) < 0)
    return -1;
  // The name only labels the file in HDF5's own bookkeeping; nothing is opened by it.
  return h.H5Fopen("image.h5", kAccessReadOnly, fapl.get());
}

}  // namespace

bool looks_like_hdf5(const std::string& head) {
  return head.size() >= 8 && head.compare(0, 8, "\x89HDF\r\n\x1a\n", 8) == 0;
}

Hdf5File::Hdf5File(const std::string& path) : name_(path) {
  std::error_code ec;
  if (is_stream_input(path)) {  // a pipe: its bytes, opened as an image
    image_ = std::make_shared<const std::string>(stream_input_bytes(path));
  } else {
    if (!std::filesystem::exists(path, ec)) fail_input(path + ": no such file");
    if (!std::filesystem::is_regular_file(path, ec))
      fail_input(path + ": not a regular file; expected an HDF5 file (.h5)");
    file_bytes_ = std::filesystem::file_size(path, ec);
  }
  const detail::Libhdf5& h = h5();
  std::lock_guard<std::mutex> lock(h5_mutex());
  hid_t id = -1;
  if (image_) {
    file_bytes_ = image_->size();
    if (!looks_like_hdf5(*image_))
      fail_input(path + ": not an HDF5 file (no HDF5 signature at its start)");
    id = open_image(*image_);
  } else {
    std::string head(8, '\0');
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      head.resize(std::fread(head.data(), 1, head.size(), f));
      std::fclose(f);
    }
    if (!looks_like_hdf5(head))
      fail_input(path + ": not an HDF5 file (no HDF5 signature at its start)");
    id = h.H5Fopen(path.c_str(), kAccessReadOnly, H5P_DEFAULT);
  }
  if (id < 0)
    fail_input(path + ": cannot open as an HDF5 file (truncated or corrupt; HDF5 refused it)");
  open(id);
}

Hdf5File::Hdf5File(std::shared_ptr<const std::string> image, const std::string& name)
    : name_(name), image_(std::move(image)) {
  h5();  // loaded before the lock is taken
  std::lock_guard<std::mutex> lock(h5_mutex());
  file_bytes_ = image_->size();
  if (!looks_like_hdf5(*image_))
    fail_input(name + ": not an HDF5 file (no HDF5 signature at its start)");
  const hid_t id = open_image(*image_);
  if (id < 0)
    fail_input(name + ": cannot open as an HDF5 file (truncated or corrupt; HDF5 refused it)");
  open(id);
}

Hdf5File::~Hdf5File() {
  if (file_ < 0) return;
  std::lock_guard<std::mutex> lock(h5_mutex());
  h5().H5Fclose(file_);
}

// Called with the lock held. Closes the file itself when the walk throws,
// since the destructor of an object whose constructor threw does not run.
void Hdf5File::open(std::int64_t file_id) {
  try {
    const Id root(h5().H5Gopen2(file_id, "/", H5P_DEFAULT), h5().H5Gclose);
    if (!root.ok()) fail_input(name_ + ": cannot open the root group");
    walk(root.get(), "", 0);
  } catch (...) {
    h5().H5Fclose(file_id);
    throw;
  }
  file_ = file_id;
}

void Hdf5File::walk(std::int64_t group_id, const std::string& path, int depth) {
  const detail::Libhdf5& h = h5();
  Object& group = objects_[path];
  group.group = true;
  if (depth > kMaxDepth)
    fail_input(name_ + ": group " + echo("/" + path) + " is nested over " +
               std::to_string(kMaxDepth) + " groups deep (a cycle of hard links?)");
  H5G_info_t info;
  if (h.H5Gget_info(group_id, &info) < 0)
    fail_input(name_ + ": cannot read group " + echo("/" + path) + " (truncated or corrupt file)");
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    if (++walked_ > kMaxObjects)
      fail_input(name_ + ": holds over " + std::to_string(kMaxObjects) +
                 " objects; expected a Keras weights file");
    const ssize_t length =
        h.H5Lget_name_by_idx(group_id, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (length < 0 || length > 65535)
      fail_input(name_ + ": cannot read link " + std::to_string(i) + " of group " +
                 echo("/" + path) + " (truncated or corrupt file)");
    std::string link(static_cast<std::size_t>(length) + 1, '\0');
    h.H5Lget_name_by_idx(group_id, ".", H5_INDEX_NAME, H5_ITER_INC, i, link.data(), link.size(),
                         H5P_DEFAULT);
    link.resize(static_cast<std::size_t>(length));
    const std::string child = join(path, link);
    if (link.empty() || link.find('/') != std::string::npos || link == "." || link == "..")
      fail_input(name_ + ": group " + echo("/" + path) + " has a link named " + echo(link));
    H5L_info_t linfo;
    if (h.H5Lget_info_by_idx(group_id, ".", H5_INDEX_NAME, H5_ITER_INC, i, &linfo, H5P_DEFAULT) < 0)
      fail_input(name_ + ": cannot read link " + echo("/" + child) +
                 " (truncated or corrupt file)");
    if (linfo.type == H5L_TYPE_SOFT) {
      std::string target(std::min<std::size_t>(linfo.u.val_size, 4096), '\0');
      if (!target.empty())
        h.H5Lget_val_by_idx(group_id, ".", H5_INDEX_NAME, H5_ITER_INC, i, target.data(),
                            target.size(), H5P_DEFAULT);
      target.resize(std::strlen(target.c_str()));
      fail_input(name_ + ": " + echo("/" + child) + " is a soft link to " + echo(target) +
                 "; only hard links are followed (a Keras file has no other)");
    }
    if (linfo.type != H5L_TYPE_HARD)
      fail_input(name_ + ": " + echo("/" + child) + " is " +
                 (linfo.type == H5L_TYPE_EXTERNAL ? "an external link to another file"
                                                  : "a user-defined link") +
                 "; only hard links inside the file are followed");
    const Id object(h.H5Oopen(group_id, link.c_str(), H5P_DEFAULT), h.H5Oclose);
    if (!object.ok())
      fail_input(name_ + ": cannot open " + echo("/" + child) + " (truncated or corrupt file)");
    const H5I_type_t kind = h.H5Iget_type(object.get());
    objects_[path].children.push_back(link);  // `group` may have moved: the map grew
    if (kind == H5I_GROUP) {
      walk(object.get(), child, depth + 1);
      continue;
    }
    Object& entry = objects_[child];
    if (kind != H5I_DATASET) continue;  // a named datatype: neither group nor dataset
    Hdf5Dataset& d = entry.dataset;
    const Id type(h.H5Dget_type(object.get()), h.H5Tclose);
    const Id space(h.H5Dget_space(object.get()), h.H5Sclose);
    if (!type.ok() || !space.ok())
      fail_input(name_ + ": cannot read the header of dataset " + echo("/" + child) +
                 " (truncated or corrupt file)");
    d.type = describe_type(type.get(), d.dtype);
    const H5S_class_t space_class = h.H5Sget_simple_extent_type(space.get());
    if (space_class == H5S_SIMPLE) {
      const int rank = h.H5Sget_simple_extent_ndims(space.get());
      if (rank < 0 || rank > H5S_MAX_RANK)
        fail_input(name_ + ": dataset " + echo("/" + child) + " has an unreadable dataspace");
      std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
      h.H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
      for (hsize_t n : dims) d.shape.push_back(static_cast<std::size_t>(n));
    } else if (space_class != H5S_SCALAR) {
      d.type = "an empty (null) dataspace of " + d.type;
      d.dtype.reset();
    }
    // Saturating: a header may declare more than 64 bits can count.
    std::uint64_t bytes = h.H5Tget_size(type.get());
    for (std::size_t n : d.shape) {
      if (n && bytes > std::numeric_limits<std::uint64_t>::max() / n)
        bytes = std::numeric_limits<std::uint64_t>::max();
      else
        bytes *= n;
    }
    d.bytes = bytes;
  }
}

bool Hdf5File::is_group(const std::string& path) const {
  const auto it = objects_.find(path);
  return it != objects_.end() && it->second.group;
}

bool Hdf5File::is_dataset(const std::string& path) const {
  const auto it = objects_.find(path);
  return it != objects_.end() && !it->second.group && !it->second.dataset.type.empty();
}

const std::vector<std::string>& Hdf5File::children(const std::string& group) const {
  if (!is_group(group)) fail_input(name_ + ": " + echo("/" + group) + " is not a group");
  return objects_.at(group).children;
}

const Hdf5Dataset& Hdf5File::dataset(const std::string& path) const {
  if (!is_dataset(path)) fail_input(name_ + ": " + echo("/" + path) + " is not a dataset");
  return objects_.at(path).dataset;
}

std::optional<std::vector<std::string>> Hdf5File::strings(const std::string& path,
                                                          const std::string& attribute) const {
  if (!objects_.count(path)) return std::nullopt;
  const detail::Libhdf5& h = h5();
  std::lock_guard<std::mutex> lock(h5_mutex());
  const std::string what = name_ + ": attribute " + echo(attribute) + " of " + echo("/" + path);
  const Id object(h.H5Oopen(file_, absolute(path).c_str(), H5P_DEFAULT), h.H5Oclose);
  if (!object.ok()) fail_input(name_ + ": cannot open " + echo("/" + path));
  const htri_t exists = h.H5Aexists(object.get(), attribute.c_str());
  if (exists < 0) fail_input(what + ": cannot read (truncated or corrupt file)");
  if (exists == 0) return std::nullopt;
  const Id attr(h.H5Aopen(object.get(), attribute.c_str(), H5P_DEFAULT), h.H5Aclose);
  const Id type(attr.ok() ? h.H5Aget_type(attr.get()) : -1, h.H5Tclose);
  const Id space(attr.ok() ? h.H5Aget_space(attr.get()) : -1, h.H5Sclose);
  if (!type.ok() || !space.ok()) fail_input(what + ": cannot read (truncated or corrupt file)");
  std::size_t count = 1;
  const H5S_class_t space_class = h.H5Sget_simple_extent_type(space.get());
  if (space_class == H5S_SIMPLE) {
    if (h.H5Sget_simple_extent_ndims(space.get()) != 1)
      fail_input(what + ": expected a string or a list of strings");
    hsize_t n = 0;
    h.H5Sget_simple_extent_dims(space.get(), &n, nullptr);
    count = static_cast<std::size_t>(n);
  } else if (space_class != H5S_SCALAR) {
    count = 0;
  }
  // tf.keras stores an empty list as NumPy makes it of [], float64.
  if (count == 0) return std::vector<std::string>{};
  if (h.H5Tget_class(type.get()) != H5T_STRING)
    fail_input(what + ": expected a string or a list of strings");
  constexpr std::size_t kMaxAttributeBytes = std::size_t{64} << 20;
  std::vector<std::string> out;
  if (h.H5Tis_variable_str(type.get()) > 0) {
    if (count > kMaxAttributeBytes / sizeof(char*))
      fail_input(what + ": holds over " + std::to_string(kMaxAttributeBytes >> 20) + " MiB");
    const Id memtype(h.H5Tcopy(type.get()), h.H5Tclose);
    std::vector<char*> values(count, nullptr);
    if (!memtype.ok() || h.H5Aread(attr.get(), memtype.get(), values.data()) < 0)
      fail_input(what + ": cannot read (truncated or corrupt file)");
    std::size_t total = 0;
    for (char* v : values) {
      const std::size_t n = v ? std::strlen(v) : 0;
      total += n;
      if (total <= kMaxAttributeBytes) out.emplace_back(v ? v : "", n);
      if (v) h.H5free_memory(v);
    }
    if (total > kMaxAttributeBytes)
      fail_input(what + ": holds over " + std::to_string(kMaxAttributeBytes >> 20) + " MiB");
    return out;
  }
  const std::size_t size = h.H5Tget_size(type.get());
  if (size == 0 || count > kMaxAttributeBytes / size)
    fail_input(what + ": holds over " + std::to_string(kMaxAttributeBytes >> 20) + " MiB");
  std::string buffer(count * size, '\0');
  if (h.H5Aread(attr.get(), type.get(), buffer.data()) < 0)
    fail_input(what + ": cannot read (truncated or corrupt file)");
  for (std::size_t i = 0; i < count; ++i) {
    std::string s = buffer.substr(i * size, size);
    s.resize(std::strlen(s.c_str()));  // NUL-padded, as NumPy's 'S' arrays are stored
    out.push_back(std::move(s));
  }
  return out;
}

NpyArray Hdf5File::read(const std::string& path) const {
  const Hdf5Dataset& d = dataset(path);
  const std::string what = name_ + ": dataset " + echo("/" + path);
  if (!d.dtype)
    fail_input(what + " has dtype " + d.type + "; expected float16, float32 or float64");
  if (d.bytes > kMaxDatasetBytes)
    fail_input(what + " declares shape " + shape_str(d.shape) + " of " + d.type + ", " +
               std::to_string(d.bytes) + " bytes, over the limit of " +
               bytes_str(kMaxDatasetBytes) + " per dataset");
  const detail::Libhdf5& h = h5();
  std::lock_guard<std::mutex> lock(h5_mutex());
  const Id dset(h.H5Dopen2(file_, absolute(path).c_str(), H5P_DEFAULT), h.H5Dclose);
  const Id plist(dset.ok() ? h.H5Dget_create_plist(dset.get()) : -1, h.H5Pclose);
  if (!plist.ok()) fail_input(what + ": cannot open (truncated or corrupt file)");
  if (h.H5Pget_external_count(plist.get()) != 0)
    fail_input(what + " keeps its data in external files; only data inside the file is read");
  const H5D_layout_t layout = h.H5Pget_layout(plist.get());
  const hsize_t stored = h.H5Dget_storage_size(dset.get());
  bool deflated = false;
  if (layout == H5D_CHUNKED) {
    const int filters = h.H5Pget_nfilters(plist.get());
    for (int i = 0; i < filters; ++i) {
      unsigned flags = 0, config = 0;
      std::size_t n_values = 0;
      const H5Z_filter_t filter = h.H5Pget_filter2(plist.get(), static_cast<unsigned>(i), &flags,
                                                   &n_values, nullptr, 0, nullptr, &config);
      if (filter == H5Z_FILTER_DEFLATE)
        deflated = true;
      else if (filter != H5Z_FILTER_SHUFFLE && filter != H5Z_FILTER_FLETCHER32)
        fail_input(what + " is stored through HDF5 filter " + std::to_string(filter) +
                   "; expected none, deflate (gzip), shuffle or fletcher32");
    }
    // Every chunk written: one never written reads as the fill value.
    const int rank = static_cast<int>(d.shape.size());
    std::vector<hsize_t> chunk(static_cast<std::size_t>(std::max(rank, 1)), 1);
    if (h.H5Pget_chunk(plist.get(), rank, chunk.data()) != rank)
      fail_input(what + ": cannot read its chunk shape (truncated or corrupt file)");
    hsize_t expected = d.bytes ? 1 : 0;
    for (int i = 0; i < rank && expected; ++i)
      expected *= (d.shape[static_cast<std::size_t>(i)] + chunk[static_cast<std::size_t>(i)] - 1) /
                  std::max<hsize_t>(chunk[static_cast<std::size_t>(i)], 1);
    hsize_t written = 0;
    if (expected && h.H5Dget_num_chunks(dset.get(), H5S_ALL, &written) < 0)
      fail_input(what + ": cannot count its chunks (truncated or corrupt file)");
    if (written < expected)
      fail_input(what + " has " + std::to_string(written) + " of its " + std::to_string(expected) +
                 " chunks written; the rest would read as the fill value");
  } else if (layout == H5D_CONTIGUOUS) {
    H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
    h.H5Dget_space_status(dset.get(), &status);
    if (d.bytes && status != H5D_SPACE_STATUS_ALLOCATED)
      fail_input(what + " was never written; it would read as the fill value");
  } else if (layout != H5D_COMPACT) {
    fail_input(what + " has a virtual or unknown storage layout; expected its data in the file");
  }
  if (!deflated && d.bytes > file_bytes_)
    fail_input(what + " declares shape " + shape_str(d.shape) + " of " + d.type + ", " +
               std::to_string(d.bytes) + " bytes, more than the whole file holds (" +
               std::to_string(file_bytes_) + " bytes)");
  if (deflated && d.bytes / 1100 > stored)
    fail_input(what + " declares " + std::to_string(d.bytes) + " bytes but stores " +
               std::to_string(stored) + " compressed, more than deflate can expand");
  NpyArray a;
  a.dtype = *d.dtype;
  a.shape = d.shape;
  if (!d.bytes) return a;
  a.data.resize(static_cast<std::size_t>(d.bytes));
  // The file's float type in this host's byte order: HDF5 swaps as it reads.
  const Id filetype(h.H5Dget_type(dset.get()), h.H5Tclose);
  const Id memtype(filetype.ok() ? h.H5Tcopy(filetype.get()) : -1, h.H5Tclose);
  if (!memtype.ok() ||
      h.H5Tset_order(memtype.get(), host_is_big_endian() ? H5T_ORDER_BE : H5T_ORDER_LE) < 0 ||
      h.H5Dread(dset.get(), memtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()) < 0)
    fail_input(what + ": cannot read its data (truncated or corrupt file)");
  return a;
}

namespace {

// A float type of `dtype` in byte order `order` (h5py's float16 is IEEE
// binary16 built from float32 this way).
hid_t float_type(DType dtype, H5T_order_t order) {
  const detail::Libhdf5& h = h5();
  const hid_t t = h.H5Tcopy(dtype == DType::f8 ? h.H5T_IEEE_F64LE_g : h.H5T_IEEE_F32LE_g);
  if (dtype == DType::f2) {
    h.H5Tset_fields(t, 15, 10, 5, 0, 10);
    h.H5Tset_size(t, 2);
    h.H5Tset_ebias(t, 15);
  }
  h.H5Tset_order(t, order);
  return t;
}

}  // namespace

std::string encode_hdf5(const std::vector<std::pair<std::string, NpyArray>>& datasets,
                        const std::vector<Hdf5StringAttribute>& attributes,
                        const std::string& what) {
  const detail::Libhdf5& h = h5();
  std::lock_guard<std::mutex> lock(h5_mutex());
  const auto fail = [&](const std::string& step) {
    fail_runtime(what + ": cannot write the HDF5 file (" + step + ")");
  };
  // The core driver without a backing store: the file exists only in memory,
  // and its image is taken at the end (the caller writes it atomically).
  const Id fapl(h.H5Pcreate(h.H5P_CLS_FILE_ACCESS_ID_g), h.H5Pclose);
  if (!fapl.ok() || h.H5Pset_fapl_core(fapl.get(), std::size_t{1} << 20, 0) < 0)
    fail("file access properties");
  const Id file(h.H5Fcreate("weights.h5", kAccessTruncate, H5P_DEFAULT, fapl.get()), h.H5Fclose);
  if (!file.ok()) fail("create");
  std::map<std::string, std::unique_ptr<Id>> groups;  // path -> open group
  const auto group = [&](const std::string& path) -> hid_t {
    if (path.empty()) return file.get();
    std::string at;
    for (std::size_t start = 0; start <= path.size();) {
      const std::size_t slash = std::min(path.find('/', start), path.size());
      const std::string parent = at;
      at = path.substr(0, slash);
      if (!groups.count(at)) {
        const hid_t in = parent.empty() ? file.get() : groups.at(parent)->get();
        const std::string link = path.substr(start, slash - start);
        auto g = std::make_unique<Id>(
            h.H5Gcreate2(in, link.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), h.H5Gclose);
        if (!g->ok()) fail("group /" + at);
        groups[at] = std::move(g);
      }
      start = slash + 1;
    }
    return groups.at(path)->get();
  };
  for (const auto& [path, array] : datasets) {
    if (!is_float(array.dtype)) fail_input(what + ": " + path + " is not a float array");
    const std::size_t slash = path.rfind('/');
    const hid_t parent = group(slash == std::string::npos ? "" : path.substr(0, slash));
    const std::string link = slash == std::string::npos ? path : path.substr(slash + 1);
    std::vector<hsize_t> dims(array.shape.begin(), array.shape.end());
    const Id space(dims.empty()
                       ? h.H5Screate(H5S_SCALAR)
                       : h.H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                   h.H5Sclose);
    const Id filetype(float_type(array.dtype, H5T_ORDER_LE), h.H5Tclose);
    const Id memtype(float_type(array.dtype, host_is_big_endian() ? H5T_ORDER_BE : H5T_ORDER_LE),
                     h.H5Tclose);
    if (!space.ok() || !filetype.ok() || !memtype.ok()) fail("types for /" + path);
    const Id dset(h.H5Dcreate2(parent, link.c_str(), filetype.get(), space.get(), H5P_DEFAULT,
                               H5P_DEFAULT, H5P_DEFAULT),
                  h.H5Dclose);
    if (!dset.ok()) fail("dataset /" + path);
    if (array.size() &&
        h.H5Dwrite(dset.get(), memtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, array.data.data()) < 0)
      fail("data of /" + path);
  }
  for (const Hdf5StringAttribute& a : attributes) {
    const hid_t object = group(a.path);
    const Id type(h.H5Tcopy(h.H5T_C_S1_g), h.H5Tclose);
    const Id space(h.H5Screate(H5S_SCALAR), h.H5Sclose);
    if (!type.ok() || !space.ok() || h.H5Tset_size(type.get(), H5T_VARIABLE) < 0 ||
        h.H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0)
      fail("string type");
    const Id attr(
        h.H5Acreate2(object, a.name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
        h.H5Aclose);
    const char* value = a.value.c_str();
    if (!attr.ok() || h.H5Awrite(attr.get(), type.get(), &value) < 0)
      fail("attribute " + a.name + " of /" + a.path);
  }
  groups.clear();
  if (h.H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) fail("flush");
  const ssize_t size = h.H5Fget_file_image(file.get(), nullptr, 0);
  if (size <= 0) fail("image size");
  std::string image(static_cast<std::size_t>(size), '\0');
  if (h.H5Fget_file_image(file.get(), image.data(), image.size()) != size) fail("image");
  return image;
}

}  // namespace mha
