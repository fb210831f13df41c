// Per-head statistics of attention maps A_i = softmax(scale * Q_i K_i^T + M),
// each of shape (T, S) (T = seq_len queries, S = kv_seq_len keys): how spread
// out each head's attention is, how far it looks and whether it ever looks
// ahead. For a query row t of head i with
// weights a[0..S), the statistics are means over the counted rows of every
// batch of:
//   entropy            -sum_s a[s] log a[s], in nats (0 log 0 = 0)
//   entropy_fraction   entropy / log S (0 when S = 1): 1 is uniform attention
//   max_weight         max_s a[s]
//   distance           sum_s a[s] |t - s|: the mean attended distance
//   diagonal           a[t] when t < S, else 0
//   first_key          a[0]
// and, not a mean but a max over the counted rows,
//   max_above_diagonal max_{s > t} a[s]; the head is `causal` when it is 0.
// A row is counted when its weights are finite, non-negative and sum to 1
// within 1e-3; the others (a fully masked row under masked_rows zero sums to
// 0, under nan is NaN) are only counted as skipped_rows.
//
// Blocks of rows arrive from any thread, for any head, in any order. Every
// sum is exact (kept as a list of non-overlapping doubles, as Python's
// math.fsum does) and rounded once at the end, so the numbers depend only on
// the rows fed, not on how they were split into blocks or in which order the
// blocks came: the kernel's sink and a tool re-reading attention.npy get the
// same bits, on any machine.
//
//   mha::AttentionStats stats(h, T, S);
//   // attention (B, h, T, S), C order, float or double:
//   for (std::size_t b = 0; b < B; ++b)
//     for (std::size_t i = 0; i < h; ++i)
//       stats.add_rows(i, 0, T, attention + (b * h + i) * T * S);
//   // (the mean over heads (B, T, S) is one head: AttentionStats(1, T, S))
//   nlohmann::json j = stats.to_json();  // {"heads": [...], "mean": {...}}
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mha {

// The statistics of one head (or their summary over heads, see mean()). The
// means are NaN when no row was counted.
struct HeadStats {
  double entropy = 0, entropy_fraction = 0, max_weight = 0, distance = 0, diagonal = 0,
         first_key = 0;
  double max_above_diagonal = 0;
  bool causal = true;              // max_above_diagonal == 0
  std::uint64_t rows = 0;          // counted rows, over all batches
  std::uint64_t skipped_rows = 0;  // rows that are not a distribution

  nlohmann::json to_json() const;  // the fields by name; NaN as null
};

class AttentionStats {
 public:
  // Maps of shape (T, S), `heads` of them (1 for attention averaged over heads).
  AttentionStats(std::size_t heads, std::size_t T, std::size_t S);
  AttentionStats(const AttentionStats&) = delete;
  AttentionStats& operator=(const AttentionStats&) = delete;

  // Rows [t0, t0 + rows) of head `head`, of any batch: a C-order (rows, S)
  // block of float or double. Thread-safe: the block is summed locally, then
  // merged under a lock. Throws mha::Error (runtime) when the block lies
  // outside (heads, T, S).
  template <class T>
  void add_rows(std::size_t head, std::size_t t0, std::size_t rows, const T* block) {
    add_rows(head, t0, rows, block, S_);
  }
  // The same rows of a padded batch row: only the first `keys` <= S weights of each row are
  // its keys (the rest, padding, are left out), so the row counts as in a (T, keys) map:
  // entropy_fraction is entropy / log(keys). A head whose rows have different key counts
  // averages each row's entropy / log(keys).
  template <class T>
  void add_rows(std::size_t head, std::size_t t0, std::size_t rows, const T* block,
                std::size_t keys);

  std::size_t heads() const { return heads_.size(); }
  HeadStats head(std::size_t i) const;
  // The per-head numbers averaged over the heads with counted rows; causal
  // when every head is; rows and skipped_rows are totals over heads.
  HeadStats mean() const;

  // {"heads": [HeadStats per head], "mean": mean()}, with the keys entropy,
  // entropy_fraction, max_weight, distance, diagonal, first_key,
  // max_above_diagonal, causal, rows, skipped_rows.
  nlohmann::json to_json() const;

  // An exact sum of doubles: non-overlapping partials, rounded once by value().
  class ExactSum {
   public:
    void add(double x);
    void add(const ExactSum& other);
    double value() const;  // the exact sum, correctly rounded

   private:
    std::vector<double> partials_;  // increasing magnitude
  };

 private:
  enum { kEntropy, kEntropyFraction, kMaxWeight, kDistance, kDiagonal, kFirstKey, kSums };
  struct Accumulator {
    ExactSum sums[kSums];
    double max_above_diagonal = 0;
    std::uint64_t rows = 0, skipped_rows = 0;
    std::size_t min_keys = SIZE_MAX, max_keys = 0;  // of the counted rows
    void merge(const Accumulator& other);
  };
  HeadStats finish(const Accumulator& acc) const;

  std::size_t T_, S_;
  mutable std::mutex mutex_;
  std::vector<Accumulator> heads_;
};

}  // namespace mha
