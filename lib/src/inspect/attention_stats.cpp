#include "mha/inspect/attention_stats.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"

namespace mha {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// How far from 1 a row's sum may be and still count as a distribution: well
// above the rounding of a float32 softmax, far below a masked row's 0.
constexpr double kSumTolerance = 1e-3;

nlohmann::json number_or_null(double x) {
  return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x);
}

// The per-row pass, in double with GCC/clang vector extensions. Its plain form:
//   sum = a.sum(); non_negative = (a >= 0).all()
//   entropy = -(a * log(a))[a > 0].sum(); max_weight = a.max()
//   distance = (a * abs(t - arange(S))).sum(); above = a[t+1:].max(initial=0)
// except that weights below DBL_MIN (double subnormals) add nothing to the
// entropy (|a log a| < 2e-305), and that weight s goes to lane s % kLanes,
// the lanes being added in a fixed order at the end. The lanes are kept in
// vectors of the widest width the build targets; with -ffp-contract=off for
// this file every lane does the same IEEE operations whatever that width, so
// the results are the same on any machine.
#if defined(__AVX512F__)
constexpr int kWidth = 8;
#elif defined(__AVX__)
constexpr int kWidth = 4;
#else
constexpr int kWidth = 2;
#endif
constexpr int kLanes = 8, kVectors = kLanes / kWidth;
constexpr double kLanePositions[kLanes] = {0, 1, 2, 3, 4, 5, 6, 7};
using vd = double __attribute__((vector_size(8 * kWidth)));
using vi = std::int64_t __attribute__((vector_size(8 * kWidth)));
using vu = std::uint64_t __attribute__((vector_size(8 * kWidth)));

inline vd select(vi mask, vd yes, vd no) {
  return (vd)((mask & (vi)yes) | (~mask & (vi)no));
}

// log(x) for normal positive doubles, within 1 ulp: fdlibm's e_log.c, lane by
// lane. x = 2^k m with m in [sqrt(2)/2, sqrt(2)), f = m - 1, s = f / (2 + f):
// log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)), R a minimax polynomial.
inline vd log_lanes(vd x) {
  constexpr double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  constexpr double Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01,
                   Lg3 = 2.857142874366239149e-01, Lg4 = 2.222219843214978396e-01,
                   Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
                   Lg7 = 1.479819860511658591e-01;
  const vu bits = (vu)x;
  // k + 1024 = floor((bits - bits(sqrt(2)/2)) / 2^52) + 1024, kept unsigned
  // (AVX2 has no 64-bit arithmetic shift).
  const vu k_biased = (bits - 0x3fe6a09e667f3bcdULL + (1ULL << 62)) >> 52;
  const vd m = (vd)(bits - (k_biased << 52) + (1024ULL << 52));
  // k as a double, exactly, without a 64-bit integer conversion.
  const vd k = (vd)(k_biased | 0x4330000000000000ULL) - (4503599627370496.0 + 1024.0);
  const vd f = m - 1.0, hfsq = 0.5 * f * f, s = f / (2.0 + f), z = s * s, w = z * z;
  const vd t1 = w * (Lg2 + w * (Lg4 + w * Lg6));
  const vd t2 = z * (Lg1 + w * (Lg3 + w * (Lg5 + w * Lg7)));
  return s * (hfsq + (t1 + t2)) + k * ln2_lo - hfsq + f + k * ln2_hi;
}

// kWidth weights as doubles.
using vf = float __attribute__((vector_size(4 * kWidth)));
inline vd load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, vd);
}
inline vd load(const double* p) {
  vd v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The kLanes lanes of kVectors vectors, in order.
double lanes_sum(const vd (&v)[kVectors]) {
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += v[l / kWidth][l % kWidth];
  return sum;
}

double lanes_max(const vd (&v)[kVectors]) {
  double max = 0;  // every lane starts at 0
  for (int l = 0; l < kLanes; ++l) max = std::max(max, v[l / kWidth][l % kWidth]);
  return max;
}

struct RowSums {
  double sum, entropy, max_weight, distance, above;
  bool non_negative;
};

// a: the S weights of query row t.
template <class T>
RowSums row_sums(const T* a, std::size_t S, std::size_t t) {
  const vd zero = {}, td = zero + static_cast<double>(t);
  const vi abs_mask = vi{} + INT64_MAX;
  vd sum[kVectors], entropy[kVectors], max_weight[kVectors], distance[kVectors], above[kVectors],
      pos[kVectors];
  vi negative[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    sum[v] = entropy[v] = max_weight[v] = distance[v] = above[v] = zero;
    negative[v] = vi{};
    pos[v] = load(kLanePositions + v * kWidth);  // key positions of the lanes
  }
  for (std::size_t s0 = 0; s0 < S; s0 += kLanes) {
    const T* p = a + s0;
    T tail[kLanes] = {};
    if (S - s0 < kLanes) {
      // The last weights, padded with zeros, which change none of the sums.
      std::memcpy(tail, p, (S - s0) * sizeof(T));
      p = tail;
    }
    for (int v = 0; v < kVectors; ++v) {
      const vd x = load(p + v * kWidth);
      negative[v] |= ~(vi)(x >= 0);  // NaN too
      sum[v] += x;
      entropy[v] -= select((vi)(x >= DBL_MIN), x * log_lanes(x), zero);
      max_weight[v] = select((vi)(x > max_weight[v]), x, max_weight[v]);
      distance[v] += x * (vd)((vi)(td - pos[v]) & abs_mask);
      above[v] = select((vi)(pos[v] > td) & (vi)(x > above[v]), x, above[v]);
      pos[v] += static_cast<double>(kLanes);
    }
  }
  bool non_negative = true;
  for (int l = 0; l < kLanes; ++l) non_negative &= negative[l / kWidth][l % kWidth] == 0;
  return {lanes_sum(sum),      lanes_sum(entropy), lanes_max(max_weight),
          lanes_sum(distance), lanes_max(above),   non_negative};
}

}  // namespace

// Shewchuk's grow-expansion, as in Python's math.fsum: after each add the
// partials are non-overlapping and sum exactly to everything added.
void AttentionStats::ExactSum::add(double x) {
  std::size_t kept = 0;
  for (std::size_t j = 0; j < partials_.size(); ++j) {
    double y = partials_[j];
    if (std::abs(x) < std::abs(y)) std::swap(x, y);
    const double hi = x + y;
    const double lo = y - (hi - x);  // the rounding error of hi, exactly
    if (lo != 0) partials_[kept++] = lo;
    x = hi;
  }
  partials_.resize(kept);
  partials_.push_back(x);
}

void AttentionStats::ExactSum::add(const ExactSum& other) {
  for (double p : other.partials_) add(p);
}

double AttentionStats::ExactSum::value() const {
  std::size_t n = partials_.size();
  if (n == 0) return 0;
  double hi = partials_[--n], lo = 0;
  while (n > 0) {
    const double x = hi, y = partials_[--n];
    hi = x + y;
    lo = y - (hi - x);
    if (lo != 0) break;
  }
  // Round half-even on the whole expansion, not just its top two partials:
  // if the next partial pushes the same way, hi + 2 lo is the nearer double.
  if (n > 0 && ((lo < 0 && partials_[n - 1] < 0) || (lo > 0 && partials_[n - 1] > 0))) {
    const double y = lo * 2, x = hi + y;
    if (y == x - hi) hi = x;
  }
  return hi;
}

void AttentionStats::Accumulator::merge(const Accumulator& other) {
  for (int k = 0; k < kSums; ++k) sums[k].add(other.sums[k]);
  max_above_diagonal = std::max(max_above_diagonal, other.max_above_diagonal);
  min_keys = std::min(min_keys, other.min_keys);
  max_keys = std::max(max_keys, other.max_keys);
  rows += other.rows;
  skipped_rows += other.skipped_rows;
}

AttentionStats::AttentionStats(std::size_t heads, std::size_t T, std::size_t S)
    : T_(T), S_(S), heads_(heads) {}

// block (rows, S): row r is query t0 + r. Each row's sums come from
// row_sums; they are added exactly to this block's sums, and the block's to
// the head's under the lock, so the lock is taken once per block.
template <class T>
void AttentionStats::add_rows(std::size_t head, std::size_t t0, std::size_t rows, const T* block,
                              std::size_t keys) {
  if (head >= heads_.size() || t0 > T_ || rows > T_ - t0 || keys > S_)
    fail_runtime("attention stats: rows [" + std::to_string(t0) + ", " + std::to_string(t0 + rows) +
                 ") of " + std::to_string(keys) + " keys of head " + std::to_string(head) +
                 " lie outside maps of shape (heads, T, S) = " +
                 shape_str(std::vector<std::size_t>{heads_.size(), T_, S_}));
  Accumulator local;
  const double log_keys = keys > 1 ? std::log(static_cast<double>(keys)) : 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const T* a = block + r * S_;
    const std::size_t t = t0 + r;
    const RowSums row = row_sums(a, keys, t);
    if (!row.non_negative || !(std::abs(row.sum - 1) <= kSumTolerance)) {
      ++local.skipped_rows;
      continue;
    }
    ++local.rows;
    local.sums[kEntropy].add(row.entropy);
    local.sums[kEntropyFraction].add(keys > 1 ? row.entropy / log_keys : 0.0);
    local.sums[kMaxWeight].add(row.max_weight);
    local.sums[kDistance].add(row.distance);
    local.sums[kDiagonal].add(t < keys ? static_cast<double>(a[t]) : 0.0);
    local.sums[kFirstKey].add(keys > 0 ? static_cast<double>(a[0]) : 0.0);
    local.max_above_diagonal = std::max(local.max_above_diagonal, row.above);
    local.min_keys = std::min(local.min_keys, keys);
    local.max_keys = std::max(local.max_keys, keys);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  heads_[head].merge(local);
}

template void AttentionStats::add_rows<float>(std::size_t, std::size_t, std::size_t, const float*,
                                              std::size_t);
template void AttentionStats::add_rows<double>(std::size_t, std::size_t, std::size_t, const double*,
                                               std::size_t);

HeadStats AttentionStats::finish(const Accumulator& acc) const {
  HeadStats h;
  h.rows = acc.rows;
  h.skipped_rows = acc.skipped_rows;
  h.max_above_diagonal = acc.max_above_diagonal;
  h.causal = acc.max_above_diagonal == 0;
  auto mean = [&](int k) {
    return acc.rows ? acc.sums[k].value() / static_cast<double>(acc.rows) : kNaN;
  };
  h.entropy = mean(kEntropy);
  // Rows of one key count (every row of a map, or of a padded batch row): the mean entropy
  // over log(keys), as before padding was cut; else each row's own fraction, averaged.
  const std::size_t keys = acc.min_keys;
  h.entropy_fraction = !acc.rows                      ? kNaN
                       : acc.min_keys != acc.max_keys ? mean(kEntropyFraction)
                       : keys > 1 ? h.entropy / std::log(static_cast<double>(keys))
                                  : 0;
  h.max_weight = mean(kMaxWeight);
  h.distance = mean(kDistance);
  h.diagonal = mean(kDiagonal);
  h.first_key = mean(kFirstKey);
  return h;
}

HeadStats AttentionStats::head(std::size_t i) const {
  if (i >= heads_.size())
    fail_runtime("attention stats: head " + std::to_string(i) + " of " +
                 std::to_string(heads_.size()));
  std::lock_guard<std::mutex> lock(mutex_);
  return finish(heads_[i]);
}

HeadStats AttentionStats::mean() const {
  HeadStats m;
  m.entropy = m.entropy_fraction = m.max_weight = m.distance = m.diagonal = m.first_key = 0;
  std::size_t counted = 0;
  for (std::size_t i = 0; i < heads(); ++i) {
    const HeadStats h = head(i);
    m.rows += h.rows;
    m.skipped_rows += h.skipped_rows;
    m.causal = m.causal && h.causal;
    if (!h.rows) continue;  // no numbers to average
    ++counted;
    m.entropy += h.entropy;
    m.entropy_fraction += h.entropy_fraction;
    m.max_weight += h.max_weight;
    m.distance += h.distance;
    m.diagonal += h.diagonal;
    m.first_key += h.first_key;
    m.max_above_diagonal += h.max_above_diagonal;
  }
  const double n = counted ? static_cast<double>(counted) : kNaN;
  for (double* x : {&m.entropy, &m.entropy_fraction, &m.max_weight, &m.distance, &m.diagonal,
                    &m.first_key, &m.max_above_diagonal})
    *x /= n;
  return m;
}

nlohmann::json HeadStats::to_json() const {
  return {
      {"entropy", number_or_null(entropy)},
      {"entropy_fraction", number_or_null(entropy_fraction)},
      {"max_weight", number_or_null(max_weight)},
      {"distance", number_or_null(distance)},
      {"diagonal", number_or_null(diagonal)},
      {"first_key", number_or_null(first_key)},
      {"max_above_diagonal", number_or_null(max_above_diagonal)},
      {"causal", causal},
      {"rows", rows},
      {"skipped_rows", skipped_rows},
  };
}

nlohmann::json AttentionStats::to_json() const {
  nlohmann::json heads_json = nlohmann::json::array();
  for (std::size_t i = 0; i < heads(); ++i) heads_json.push_back(head(i).to_json());
  return {{"heads", heads_json}, {"mean", mean().to_json()}};
}

}  // namespace mha
