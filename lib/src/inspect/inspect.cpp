#include "mha/inspect/inspect.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <type_traits>
#include <utility>

#include "mha/base/error.hpp"
#include "mha/io/file_kind.hpp"
#include "mha/io/npz.hpp"
#include "mha/io/safetensors.hpp"
#include "mha/io/stream_input.hpp"

namespace mha {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
// A row is a distribution when every value lies in [0, 1] within
// kValueTolerance and the row sums to 1 within kSumTolerance (AttentionStats'
// own tolerance, well above a float32 softmax's rounding).
constexpr double kValueTolerance = 1e-6;
constexpr double kSumTolerance = 1e-3;
// An attention row is held whole, whatever the chunk size; longer rows than
// this (64 MiB of float32) are not taken for attention.
constexpr std::size_t kMaxRowKeys = std::size_t{1} << 24;
// AttentionStats keeps sums per head (a few hundred bytes each), and a header
// can claim any number of heads over no data at all (fuzz_npy found it).
constexpr std::size_t kMaxHeads = std::size_t{1} << 16;

nlohmann::json number_or_null(double x) {
  return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x);
}

// ---- Reading the data piecewise ----

// Copies n bytes from offset `pos` of an array's data (file order) to `out`.
using ReadAt = std::function<void(std::uint64_t pos, std::size_t n, unsigned char* out)>;

// The data of a .npy file, read with pread(): unlike a mapping, reads leave
// nothing in this process's resident memory but the chunk buffer.
class FileData {
 public:
  FileData(const std::string& path, const NpyHeaderInfo& h) : path_(path), header_(h) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail_input(path + ": cannot open: " + std::strerror(errno));
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  ~FileData() { ::close(fd_); }
  FileData(const FileData&) = delete;
  FileData& operator=(const FileData&) = delete;

  void read(std::uint64_t pos, std::size_t n, unsigned char* out) const {
    std::size_t done = 0;
    while (done < n) {
      const ssize_t got =
          ::pread(fd_, out + done, n - done, static_cast<off_t>(header_.header_bytes + pos + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail_input(path_ + ": cannot read: " + std::strerror(errno));
      // read_npy's message: the size was checked against the header before.
      if (got == 0)
        fail_input(path_ + ": read only " + std::to_string(pos + done) + " of " +
                   std::to_string(header_.data_bytes) +
                   " data bytes (was the file truncated while reading?)");
      done += static_cast<std::size_t>(got);
    }
  }

 private:
  std::string path_;
  const NpyHeaderInfo& header_;
  int fd_ = -1;
};

ReadAt read_from_memory(const unsigned char* data) {
  return [data](std::uint64_t pos, std::size_t n, unsigned char* out) {
    std::memcpy(out, data + pos, n);
  };
}

// With at most one axis longer than 1, C and Fortran order are the same layout.
bool needs_reordering(const NpyHeaderInfo& h) {
  return h.fortran_order &&
         std::count_if(h.shape.begin(), h.shape.end(), [](std::size_t d) { return d > 1; }) > 1;
}

// ---- Statistics of the values ----

// Pairwise summation as NumPy's: blocks of up to 128 summed in 8 lanes, the
// blocks added in a binary tree, so the error grows as O(log n), not O(n).
double pairwise_sum(const double* x, std::size_t n) {
  if (n <= 128) {
    double lane[8] = {};
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int l = 0; l < 8; ++l) lane[l] += x[i + l];
    double s =
        ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; i < n; ++i) s += x[i];
    return s;
  }
  const std::size_t half = n / 2 / 8 * 8;
  return pairwise_sum(x, half) + pairwise_sum(x + half, n - half);
}

// min, max, mean and std of the finite values and counts of the others, chunk
// by chunk. Values are shifted by the first chunk's mean, so that a large
// offset (1e8 + noise) costs no digits; within a chunk, two pairwise passes
// (mean, then squared deviations from it); chunks are merged with Chan, Golub
// and LeVeque's update of (count, mean, M2), so the result is as accurate for
// 2^31 values as for one chunk.
class ValueScan {
 public:
  explicit ValueScan(DType dtype) : dtype_(dtype) {}

  // p: n values, C order; T is float, double or an integer type (bools as 0/1 bytes).
  template <class T>
  void add(const T* p, std::size_t n) {
    if (finite_.size() < n) finite_.resize(n);
    std::size_t k = 0;
    s_.count += n;
    for (std::size_t i = 0; i < n; ++i) {
      const T v = p[i];
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(v)) {
          ++s_.nan;
          continue;
        }
        if (std::isinf(v)) {
          ++(v > 0 ? s_.posinf : s_.neginf);
          continue;
        }
        dmin_ = std::min<double>(dmin_, v);
        dmax_ = std::max<double>(dmax_, v);
      } else if constexpr (std::is_signed_v<T>) {
        imin_ = std::min<std::int64_t>(imin_, v);
        imax_ = std::max<std::int64_t>(imax_, v);
      } else {
        umin_ = std::min<std::uint64_t>(umin_, v);
        umax_ = std::max<std::uint64_t>(umax_, v);
      }
      s_.zeros += v == 0;
      finite_[k++] = static_cast<double>(v);
    }
    merge_chunk(k);
  }

  TensorStats finish() const {
    TensorStats s = s_;
    s.finite = n_;
    s.mean = n_ ? shift_ + mean_ : kNaN;
    s.std = n_ ? std::sqrt(m2_ / static_cast<double>(n_)) : kNaN;
    if (!n_) {
      s.min = s.max = nullptr;
    } else if (is_float(dtype_)) {
      s.min = dmin_;
      s.max = dmax_;
    } else if (dtype_ == DType::i1 || dtype_ == DType::i2 || dtype_ == DType::i4 ||
               dtype_ == DType::i8) {
      s.min = imin_;
      s.max = imax_;
    } else {
      s.min = umin_;
      s.max = umax_;
    }
    return s;
  }

 private:
  // finite_[0, k): this chunk's finite values, overwritten.
  void merge_chunk(std::size_t k) {
    if (k == 0) return;
    const double nb = static_cast<double>(k);
    if (n_ == 0) {
      shift_ = pairwise_sum(finite_.data(), k) / nb;
      if (!std::isfinite(shift_)) shift_ = 0;  // the sum overflowed: values near DBL_MAX
    }
    for (std::size_t j = 0; j < k; ++j) finite_[j] -= shift_;
    const double mean_b = pairwise_sum(finite_.data(), k) / nb;
    for (std::size_t j = 0; j < k; ++j) {
      const double d = finite_[j] - mean_b;
      finite_[j] = d * d;
    }
    const double m2_b = pairwise_sum(finite_.data(), k);
    const double na = static_cast<double>(n_), n = na + nb;
    const double delta = mean_b - mean_;
    mean_ += delta * (nb / n);
    m2_ += m2_b + delta * delta * (na / n * nb);
    n_ += k;
  }

  DType dtype_;
  TensorStats s_;
  std::uint64_t n_ = 0;                   // finite values so far
  double shift_ = 0, mean_ = 0, m2_ = 0;  // mean_ of the values minus shift_
  double dmin_ = kInf, dmax_ = -kInf;
  std::int64_t imin_ = std::numeric_limits<std::int64_t>::max(),
               imax_ = std::numeric_limits<std::int64_t>::min();
  std::uint64_t umin_ = std::numeric_limits<std::uint64_t>::max(), umax_ = 0;
  std::vector<double> finite_;
};

// ---- Attention ----

enum class RowKind { distribution, masked, other };

// a: one row of S weights.
template <class T>
RowKind classify(const T* a, std::size_t S) {
  double sum = 0;
  bool in_range = true, all_zero = true, all_nan = true;
  for (std::size_t s = 0; s < S; ++s) {
    const double x = a[s];
    all_zero &= x == 0;
    all_nan &= std::isnan(x);
    in_range &= x >= -kValueTolerance && x <= 1 + kValueTolerance;  // false for NaN
    sum += x;
  }
  if (all_zero || all_nan) return RowKind::masked;
  return in_range && std::abs(sum - 1) <= kSumTolerance ? RowKind::distribution : RowKind::other;
}

// The array seen as M = prod(leading axes) maps of (T, S); map m belongs to
// head (m / inner) % heads, inner being the product of the leading axes after
// the heads axis.
class AttentionScan {
 public:
  AttentionScan(AttentionInfo& info, const std::vector<std::size_t>& shape, bool detecting,
                const InspectOptions& options, bool layer_maps)
      : info_(info), detecting_(detecting) {
    const std::size_t rank = shape.size();
    info_.T = shape[rank - 2];
    info_.S = shape[rank - 1];
    if (info_.heads_axis) {
      heads_ = shape[*info_.heads_axis];
      for (std::size_t k = *info_.heads_axis + 1; k + 2 < rank; ++k) inner_ *= shape[k];
    }
    info_.stats = std::make_unique<AttentionStats>(heads_, info_.T, info_.S);
    // A padded batch's lengths, when this array's batch axis holds their rows.
    std::size_t axis = layer_maps ? 1 : 0;
    if (info_.heads_axis && *info_.heads_axis == axis) ++axis;
    const std::vector<std::size_t>&q = options.query_lengths, &k = options.key_lengths;
    const auto within = [](const std::vector<std::size_t>& n, std::size_t most) {
      return std::all_of(n.begin(), n.end(), [&](std::size_t x) { return x <= most; });
    };
    if (axis + 2 < rank && !q.empty() && q.size() == shape[axis] && k.size() == q.size() &&
        within(q, info_.T) && within(k, info_.S)) {
      info_.batch_axis = axis;
      queries_ = q, keys_ = k;
      for (std::size_t j = axis + 1; j + 2 < rank; ++j) batch_inner_ *= shape[j];
    }
  }

  // Rows [row0, row0 + rows) of all M * T rows, C order. Returns false when
  // detecting and a row is neither a distribution nor masked: then the
  // array is not attention and no more rows are needed.
  template <class T>
  bool add(std::uint64_t row0, std::size_t rows, const T* block) {
    const std::size_t T_ = info_.T, S = info_.S;
    for (std::size_t r = 0; r < rows;) {
      const std::uint64_t row = row0 + r, m = row / T_;
      const std::size_t t = static_cast<std::size_t>(row % T_);
      const std::size_t n = std::min(rows - r, T_ - t);  // rows of map m in the block
      const T* seg = block + r * S;
      r += n;
      // A padded batch row: its real queries over its real keys.
      std::size_t real = n, keys = S;
      if (!queries_.empty()) {
        const std::size_t b = static_cast<std::size_t>((m / batch_inner_) % queries_.size());
        real = t < queries_[b] ? std::min(n, queries_[b] - t) : 0;
        keys = keys_[b];
        info_.padded_rows += n - real;
      }
      for (std::size_t i = 0; i < real; ++i) {
        switch (classify(seg + i * S, keys)) {
          case RowKind::distribution:
            ++info_.distribution_rows;
            break;
          case RowKind::masked:
            ++info_.masked_rows;
            break;
          case RowKind::other:
            if (detecting_) return false;
            ++info_.other_rows;
            break;
        }
      }
      info_.stats->add_rows(static_cast<std::size_t>((m / inner_) % heads_), t, real, seg, keys);
    }
    return true;
  }

 private:
  AttentionInfo& info_;
  bool detecting_;
  std::size_t heads_ = 1;
  std::uint64_t inner_ = 1;
  std::vector<std::size_t> queries_, keys_;  // per batch row; empty: all real
  std::uint64_t batch_inner_ = 1;            // maps per batch row's step
};

// "(B, h, T, S)": leading axes are B (or B0, B1, ... when there are several)
// except the heads axis h, and a stack's layers axis first (self_attention.npy).
std::string layout_of(std::size_t rank, std::optional<std::size_t> heads_axis, bool layer_maps) {
  const std::size_t leading = rank - 2,
                    batch = leading - (heads_axis ? 1 : 0) - (layer_maps && leading > 1 ? 1 : 0);
  std::string s = "(";
  for (std::size_t k = 0, b = 0; k < leading; ++k) {
    if (heads_axis && k == *heads_axis)
      s += "h";
    else if (layer_maps && k == 0 && leading > 1)
      s += "layers";
    else
      s += batch == 1 ? std::string("B") : "B" + std::to_string(b++);
    s += ", ";
  }
  return s + "T, S)";
}

// ---- One array ----

// Items as stored; the scan sees float16 as float and bools as 0/1 bytes.
struct Half {
  std::uint16_t bits;
};
struct Bool {
  std::uint8_t byte;
};
template <class Stored>
using value_t =
    std::conditional_t<std::is_same_v<Stored, Half>, float,
                       std::conditional_t<std::is_same_v<Stored, Bool>, std::uint8_t, Stored>>;

struct Scan {
  Scan(const NpyHeaderInfo& h, ValueScan& v) : header(h), values(v) {}
  const NpyHeaderInfo& header;  // dtype and shape (of the data as read: C order)
  ValueScan& values;
  AttentionScan* attention = nullptr;  // null: not attention, or no longer a candidate
  std::size_t chunk_bytes = 1;
  ReadAt read;
  bool swap = false;  // the data's byte order is not the host's
};

template <class Stored>
void scan_data(Scan& sc) {
  using Value = value_t<Stored>;
  const std::size_t n = sc.header.size();
  if (n == 0) return;  // T, S or a batch axis of 0: no rows either
  const std::size_t item = sizeof(Stored);
  // Chunks hold whole rows of S while attention is possible.
  const std::size_t S = sc.attention ? sc.header.shape.back() : 1;
  const std::size_t rows_per_chunk = std::max<std::size_t>(1, sc.chunk_bytes / (item * S));
  const std::size_t chunk = rows_per_chunk * S;
  std::vector<Stored> stored(std::min(chunk, n));
  std::vector<Value> converted(std::is_same_v<Stored, Value> ? 0 : stored.size());
  for (std::size_t done = 0; done < n;) {
    const std::size_t k = std::min(chunk, n - done);
    auto* bytes = reinterpret_cast<unsigned char*>(stored.data());
    sc.read(static_cast<std::uint64_t>(done) * item, k * item, bytes);
    if (sc.swap && item > 1)
      for (std::size_t i = 0; i < k; ++i) std::reverse(bytes + i * item, bytes + (i + 1) * item);
    const Value* v;
    if constexpr (std::is_same_v<Stored, Half>) {
      for (std::size_t i = 0; i < k; ++i) converted[i] = half_to_float(stored[i].bits);
      v = converted.data();
    } else if constexpr (std::is_same_v<Stored, Bool>) {
      for (std::size_t i = 0; i < k; ++i) converted[i] = stored[i].byte != 0;
      v = converted.data();
    } else {
      v = stored.data();
    }
    sc.values.add(v, k);
    if constexpr (std::is_floating_point_v<Value>) {
      if (sc.attention && !sc.attention->add(done / S, k / S, v)) sc.attention = nullptr;
    }
    done += k;
  }
}

void scan_any(Scan& sc) {
  switch (sc.header.dtype) {
    case DType::f2:
      return scan_data<Half>(sc);
    case DType::f4:
      return scan_data<float>(sc);
    case DType::f8:
      return scan_data<double>(sc);
    case DType::b1:
      return scan_data<Bool>(sc);
    case DType::i1:
      return scan_data<std::int8_t>(sc);
    case DType::i2:
      return scan_data<std::int16_t>(sc);
    case DType::i4:
      return scan_data<std::int32_t>(sc);
    case DType::i8:
      return scan_data<std::int64_t>(sc);
    case DType::u1:
      return scan_data<std::uint8_t>(sc);
    case DType::u2:
      return scan_data<std::uint16_t>(sc);
    case DType::u4:
      return scan_data<std::uint32_t>(sc);
    case DType::u8:
      return scan_data<std::uint64_t>(sc);
  }
}

// Where an array's data comes from: a .npy file, or the bytes of an .npz member.
struct Origin {
  std::string name;              // for messages and InspectResult::file
  bool named_attention = false;  // attention.npy, or member "attention"
  bool layer_maps = false;  // self_, encoder_, decoder_, cross_attention.npy: (layers, B, h, T, S)
  const std::string* bytes = nullptr;  // the member's whole .npy; null: the file `name`
  // Or an .npz member streamed from the archive: its header, and its bytes in order.
  const NpyHeaderInfo* member_header = nullptr;
  const NpzMemberRead* member = nullptr;
};

// Whether an array is taken for attention: forced (by --attention or by its
// name), a candidate that its rows may show to be attention, or neither.
struct AttentionChoice {
  bool forced = false, candidate = false;
  std::string detected_by;  // when forced: "forced" or "name"
};

AttentionChoice choose_attention(const Origin& origin, const InspectOptions& options,
                                 const NpyHeaderInfo& h, const std::string& what,
                                 const Warn& warn) {
  using A = InspectOptions::Attention;
  const std::string& name = origin.name;
  const bool fits = h.shape.size() >= 2 && is_float(h.dtype);
  AttentionChoice choice;
  if (options.attention == A::on) {
    if (!fits)
      fail_input(name + ": cannot inspect the " + what +
                 " as attention (expected a float array of rank >= 2, (..., T, S))");
    choice.forced = true;
    choice.detected_by = "forced";
  } else if (options.attention == A::detect && origin.named_attention) {
    if (fits) {
      choice.forced = true;
      choice.detected_by = "name";
    } else if (warn) {
      warn(name + ": named like attention weights, but the " + what +
           " is not attention (expected a float array of rank >= 2, (..., T, S))");
    }
  } else if (options.attention == A::detect) {
    choice.candidate = fits;
  }
  return choice;
}

// The attention statistics to gather, with the heads axis and layout; none
// when the array cannot be attention as the options describe it (a forced
// array then fails, a candidate stops being one).
std::optional<AttentionInfo> attention_layout(const Origin& origin, const InspectOptions& options,
                                              const NpyHeaderInfo& h, const std::string& what,
                                              AttentionChoice& choice) {
  if (!choice.forced && !choice.candidate) return std::nullopt;
  const std::string& name = origin.name;
  const std::size_t rank = h.shape.size();
  const bool forced = choice.forced;
  bool& candidate = choice.candidate;
  std::optional<std::size_t> axis;
  if (options.heads_axis) {
    const long given = *options.heads_axis;
    const long a = given < 0 ? given + static_cast<long>(rank) : given;
    if (a >= 0 && a + 2 < static_cast<long>(rank)) {
      axis = static_cast<std::size_t>(a);
    } else if (forced) {
      fail_input(name + ": heads axis " + std::to_string(given) + " is not a leading axis of the " +
                 what +
                 (rank == 2 ? " (a (T, S) map has none)"
                            : " (expected 0.." + std::to_string(rank - 3) + ", or -" +
                                  std::to_string(rank) + "..-3 from the end)"));
    } else {
      candidate = false;  // not attention as the options describe it
    }
  } else if (origin.layer_maps) {
    if (rank == 5) axis = 2;  // (layers, B, h, T, S); rank 4 is averaged over heads
  } else if (rank == 4) {
    axis = 1;
  }
  if (h.shape.back() > kMaxRowKeys) {
    if (forced)
      fail_input(name + ": rows of " + std::to_string(h.shape.back()) +
                 " keys are too long to inspect as attention (at most " +
                 std::to_string(kMaxRowKeys) + ")");
    candidate = false;
  }
  if (axis && h.shape[*axis] > kMaxHeads) {
    if (forced)
      fail_input(name + ": " + std::to_string(h.shape[*axis]) + " heads on axis " +
                 std::to_string(*axis) + " of the " + what +
                 " are too many to inspect as attention (at most " + std::to_string(kMaxHeads) +
                 "; see --head_axis)");
    candidate = false;
  }
  if (h.size() == 0) candidate = false;  // no row to detect it from
  if (!forced && !candidate) return std::nullopt;
  AttentionInfo info;
  info.detected_by = forced ? choice.detected_by : "rows";
  info.heads_axis = axis;
  info.layout = layout_of(rank, axis, origin.layer_maps && !options.heads_axis);
  return info;
}

// Where the scan reads the array's data from. Fortran order needs the whole
// array to reorder (read_npy does it); every other array is streamed,
// byte-swapped chunk by chunk when big-endian.
class ArrayData {
 public:
  ArrayData(const Origin& origin, const NpyHeaderInfo& h) {
    if (needs_reordering(h)) {
      if (origin.member) {  // the member whole, to reorder
        std::string bytes(h.header_bytes + h.data_bytes, '\0');
        (*origin.member)(bytes.size(), reinterpret_cast<unsigned char*>(bytes.data()));
        whole_ = parse_npy(bytes, origin.name);
      } else {
        whole_ = origin.bytes ? parse_npy(*origin.bytes, origin.name) : read_npy(origin.name);
      }
      read_ = read_from_memory(whole_.data.data());  // C order, native byte order
      return;
    }
    swap_ = itemsize(h.dtype) > 1 && h.big_endian != host_is_big_endian();
    if (origin.member) {
      // Past the header, then the data in the order the scan asks for it.
      std::vector<unsigned char> header(h.header_bytes);
      (*origin.member)(header.size(), header.data());
      const NpzMemberRead* member = origin.member;
      read_ = [member](std::uint64_t, std::size_t n, unsigned char* out) { (*member)(n, out); };
    } else if (origin.bytes) {
      read_ = read_from_memory(reinterpret_cast<const unsigned char*>(origin.bytes->data()) +
                               h.header_bytes);
    } else {
      const FileData& f = file_.emplace(origin.name, h);
      read_ = [&f](std::uint64_t pos, std::size_t n, unsigned char* out) { f.read(pos, n, out); };
    }
  }
  ArrayData(const ArrayData&) = delete;
  ArrayData& operator=(const ArrayData&) = delete;

  const ReadAt& read() const { return read_; }
  bool swap() const { return swap_; }

 private:
  NpyArray whole_;
  std::optional<FileData> file_;
  ReadAt read_;
  bool swap_ = false;
};

InspectResult inspect_array(const Origin& origin, const InspectOptions& options, const Warn& warn) {
  const std::string& name = origin.name;
  InspectResult result;
  result.file = name;
  result.header = origin.member_header ? *origin.member_header
                  : origin.bytes       ? parse_npy_header(*origin.bytes, name)
                                       : read_npy_header(name);
  const NpyHeaderInfo& h = result.header;
  const std::string what =
      std::string(dtype_name(h.dtype)) + " array of shape " + shape_str(h.shape);
  AttentionChoice choice = choose_attention(origin, options, h, what, warn);
  std::optional<AttentionInfo> info = attention_layout(origin, options, h, what, choice);
  const bool forced = choice.forced;

  ValueScan values(h.dtype);
  std::optional<AttentionScan> attention;
  if (info) attention.emplace(*info, h.shape, !forced, options, origin.layer_maps);
  Scan sc(h, values);
  sc.attention = attention ? &*attention : nullptr;
  sc.chunk_bytes = std::max<std::size_t>(options.chunk_bytes, 1);
  const ArrayData data(origin, h);
  sc.read = data.read();
  sc.swap = data.swap();
  scan_any(sc);
  result.stats = values.finish();

  if (info && forced) {
    if (info->other_rows && warn)
      warn(name + ": " + std::to_string(info->other_rows) + " of " +
           std::to_string(info->distribution_rows + info->masked_rows + info->other_rows) +
           " rows are not distributions (values in [0, 1] summing to 1) nor fully masked; "
           "the attention statistics skip them");
    result.attention = std::move(info);
  } else if (info && sc.attention && info->distribution_rows > 0) {
    // Detected: every row was a distribution or masked, and one at least a distribution.
    result.attention = std::move(info);
  }
  return result;
}

}  // namespace

nlohmann::json TensorStats::to_json() const {
  return {{"count", count},
          {"finite", finite},
          {"nan", nan},
          {"posinf", posinf},
          {"neginf", neginf},
          {"zeros", zeros},
          {"min", min},
          {"max", max},
          {"mean", number_or_null(mean)},
          {"std", number_or_null(std)}};
}

nlohmann::json AttentionInfo::to_json() const {
  nlohmann::json j = stats ? stats->to_json() : nlohmann::json::object();
  j["layout"] = layout;
  j["heads_axis"] = heads_axis ? nlohmann::json(*heads_axis) : nlohmann::json(nullptr);
  j["detected_by"] = detected_by;
  j["distribution_rows"] = distribution_rows;
  j["masked_rows"] = masked_rows;
  j["other_rows"] = other_rows;
  j["padded_rows"] = padded_rows;
  j["batch_axis"] = batch_axis ? nlohmann::json(*batch_axis) : nlohmann::json(nullptr);
  return j;
}

nlohmann::json header_json(const NpyHeaderInfo& h) {
  return {{"version", std::to_string(h.major) + "." + std::to_string(h.minor)},
          {"descr", h.descr},
          {"dtype", dtype_name(h.dtype)},
          {"byte_order", itemsize(h.dtype) == 1 ? "none"
                         : h.big_endian         ? "big"
                                                : "little"},
          {"fortran_order", h.fortran_order},
          {"shape", h.shape},
          {"header_bytes", h.header_bytes},
          {"data_bytes", h.data_bytes}};
}

nlohmann::json InspectResult::to_json() const {
  nlohmann::json j = {{"file", file}, {"header", header_json(header)}, {"stats", stats.to_json()}};
  if (attention) j["attention"] = attention->to_json();
  return j;
}

InspectResult inspect_npy(const std::string& path, const InspectOptions& options,
                          const Warn& warn) {
  Origin origin;
  origin.name = path;
  const std::string file = std::filesystem::path(path).filename().string();
  origin.layer_maps = file == "self_attention.npy" || file == "cross_attention.npy" ||
                      file == "encoder_attention.npy" || file == "decoder_attention.npy";
  origin.named_attention = file == "attention.npy" || origin.layer_maps;
  if (is_stream_input(path)) origin.bytes = &stream_input_bytes(path);  // a pipe is read once
  return inspect_array(origin, options, warn);
}

std::vector<InspectResult> inspect_file(const std::string& path, const InspectOptions& options,
                                        const Warn& warn) {
  std::vector<InspectResult> results;
  const FileKind kind = file_kind(path);
  if (kind == FileKind::safetensors) {
    for (const auto& [key, array] : read_safetensors(path)) {  // each tensor as its .npy
      const std::string bytes = encode_npy(array);
      Origin origin;
      origin.name = path + ":" + key;
      origin.bytes = &bytes;
      results.push_back(inspect_array(origin, options, warn));
    }
    return results;
  }
  if (kind != FileKind::npz) {
    results.push_back(inspect_npy(path, options, warn));
    return results;
  }
  // Every member's header first (read_npz's checks), then each member
  // streamed from the archive as the scan reads it.
  for_each_npz_member_streamed(path, [&](const NpzMember& member, const NpzMemberRead& read) {
    const std::string& key = member.key;
    Origin origin;
    origin.name = member.name;
    origin.layer_maps = key == "self_attention" || key == "cross_attention" ||
                        key == "encoder_attention" || key == "decoder_attention";
    origin.named_attention = key == "attention" || origin.layer_maps;
    origin.member_header = &member.header;
    origin.member = &read;
    results.push_back(inspect_array(origin, options, warn));
  });
  return results;
}

}  // namespace mha
