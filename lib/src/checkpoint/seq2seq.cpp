#include "mha/checkpoint/seq2seq.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/checkpoint/lens.hpp"
#include "mha/kernel/transformer.hpp"

namespace mha {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void check_side(const ModelConfig& c, const std::int32_t* ids, std::size_t B, std::size_t T,
                const std::vector<std::size_t>& lengths, const char* side) {
  if (lengths.size() != B)
    fail_input(std::string("forward_seq2seq: expected ") + std::to_string(B) + " " + side +
               " lengths");
  if (T > c.max_positions)
    fail_input(std::string(side) + ": " + std::to_string(T) + " tokens are more than the model's " +
               std::to_string(c.max_positions) +
               " positions (config.json max_position_embeddings)");
  for (std::size_t b = 0; b < B; ++b) {
    if (lengths[b] < 1 || lengths[b] > T)
      fail_input(std::string("forward_seq2seq: ") + side + " length " + std::to_string(lengths[b]) +
                 " of row " + std::to_string(b) + " is outside [1, " + std::to_string(T) + "]");
    for (std::size_t t = 0; t < T; ++t) {
      const std::int32_t id = ids[b * T + t];
      if (id < 0 || static_cast<std::size_t>(id) >= c.vocab_size)
        fail_input(std::string(side) + ": token id " + std::to_string(id) + " at [" +
                   std::to_string(b) + ", " + std::to_string(t) +
                   "] is outside the vocabulary (vocab_size " + std::to_string(c.vocab_size) +
                   " in config.json)");
    }
  }
}

// position_bias (h, L, L): head h's bias of query t and key s, table[bucket(s - t)][h]
// (compute_bias: values.permute([2, 0, 1])).
std::vector<float> position_bias(const ModelConfig& c, const std::vector<float>& table,
                                 std::size_t L, bool bidirectional) {
  const std::size_t h = c.h;
  std::vector<std::size_t> bucket(2 * L - 1);  // of s - t + L - 1
  for (std::size_t i = 0; i < bucket.size(); ++i)
    bucket[i] =
        relative_position_bucket(static_cast<std::int64_t>(i) - std::int64_t(L - 1), bidirectional,
                                 c.relative_buckets, c.relative_max_distance);
  std::vector<float> bias(h * L * L);
  for (std::size_t head = 0; head < h; ++head)
    for (std::size_t t = 0; t < L; ++t)
      for (std::size_t s = 0; s < L; ++s)
        bias[(head * L + t) * L + s] = table[bucket[s + L - 1 - t] * h + head];
  return bias;
}

Mask<float> mask_of(const std::vector<std::size_t>& lengths, std::size_t keys, bool causal) {
  Mask<float> m;
  if (causal) m.causal = Causal::top_left;
  if (std::any_of(lengths.begin(), lengths.end(), [&](std::size_t n) { return n < keys; }))
    m.key_lengths.assign(lengths.begin(), lengths.end());
  return m;
}

void add_bias(Mask<float>& m, std::vector<float> bias, std::size_t L) {
  if (bias.empty()) return;
  m.position_bias = std::move(bias);  // (1, h, L, L) broadcast over the batch
  m.bias_strides[0] = 0;
  m.bias_strides[1] = L * L;
  m.bias_strides[2] = L;
  m.bias_strides[3] = 1;
}

Dims dims_of(const ModelConfig& c, std::size_t B, std::size_t T, std::size_t S) {
  Dims d;
  d.B = B;
  d.T = T;
  d.S = S;
  d.h = c.h;
  d.kv_heads = c.kv_heads == c.h ? 0 : c.kv_heads;
  d.d_model = d.kdim = d.vdim = d.d_out = c.d_model;
  d.d_k = d.d_v = c.head_dim;
  return d;
}

// Rows of x (B, L, d) through `stack`'s token and position embeddings and
// its embedding norm (BART's layernorm_embedding).
std::vector<float> embed(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                         std::size_t L, Stack stack, int threads) {
  const ModelConfig& c = model.config();
  std::vector<std::size_t> rows(B * L);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = c.position_offset + i % L;
  std::vector<float> x(B * L * c.d_model);
  model.embed(ids, rows.data(), B * L, x.data(), stack);
  const Norm<float> norm = model.embedding_norm(stack);
  if (!norm.empty()) {
    std::vector<float> y(x.size());
    layer_norm(x.data(), B * L, c.d_model, norm, static_cast<float>(c.norm_eps), y.data(), threads);
    x.swap(y);
  }
  return x;
}

}  // namespace

std::size_t relative_position_bucket(std::int64_t relative, bool bidirectional,
                                     std::size_t num_buckets, std::size_t max_distance) {
  std::size_t bucket = 0;
  std::int64_t n = static_cast<std::int64_t>(num_buckets);
  if (bidirectional) {
    n /= 2;
    if (relative > 0) bucket += static_cast<std::size_t>(n);
    relative = relative < 0 ? -relative : relative;
  } else {
    relative = relative < 0 ? -relative : 0;  // -min(relative, 0): keys after the query are 0
  }
  const std::int64_t max_exact = n / 2;
  if (relative < max_exact) return bucket + static_cast<std::size_t>(relative);
  // In float32 as torch computes it: log(relative.float() / max_exact) /
  // math.log(max_distance / max_exact) * (num_buckets - max_exact), truncated.
  const float ratio = static_cast<float>(relative) / static_cast<float>(max_exact);
  const float denominator = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / denominator * static_cast<float>(n - max_exact);
  const std::int64_t large =
      std::min<std::int64_t>(max_exact + static_cast<std::int64_t>(scaled), n - 1);
  return bucket + static_cast<std::size_t>(large);
}

std::vector<std::int32_t> decoder_inputs(const ModelConfig& c, const std::int32_t* target,
                                         std::size_t B, std::size_t T) {
  std::vector<std::int32_t> ids(B * T);
  for (std::size_t b = 0; b < B; ++b) {
    ids[b * T] = static_cast<std::int32_t>(c.decoder_start_token_id);
    std::copy_n(target + b * T, T - 1, ids.begin() + static_cast<std::ptrdiff_t>(b * T + 1));
  }
  return ids;
}

Seq2SeqResult forward_seq2seq(const Checkpoint& model, const std::int32_t* source, std::size_t B,
                              std::size_t S, const std::vector<std::size_t>& source_lengths,
                              const std::int32_t* decoder_ids, std::size_t T,
                              const std::vector<std::size_t>& target_lengths,
                              const Seq2SeqOptions& options) {
  const ModelConfig& c = model.config();
  if (!c.encoder_decoder)
    fail_input(model.dir() + ": a " + c.model_type + " is not an encoder-decoder");
  check_side(c, source, B, S, source_lengths, "source");
  check_side(c, decoder_ids, B, T, target_lengths, "target");
  const int threads = resolve_threads(options.threads);
  const std::size_t d = c.d_model;
  Seq2SeqResult result;
  double read = 0;
  const auto start = Clock::now();

  std::vector<int> head_slot(c.h, -1);
  for (std::size_t i = 0; i < options.map_heads.size(); ++i)
    head_slot.at(options.map_heads[i]) = static_cast<int>(i);
  if (options.map_heads.empty())
    for (std::size_t i = 0; i < c.h; ++i) head_slot[i] = static_cast<int>(i);
  // Layer l's map slot, or -1.
  auto slot_of = [&](std::size_t l) -> long {
    const auto it = std::lower_bound(options.map_layers.begin(), options.map_layers.end(), l);
    return it != options.map_layers.end() && *it == l ? it - options.map_layers.begin() : -1;
  };
  auto sink = [&](MapKind kind, std::size_t slot) {
    return [&, kind, slot](std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
                           const float* block) {
      if (head_slot[head] >= 0)
        options.attention_sink(kind, slot, b, static_cast<std::size_t>(head_slot[head]), t0, rows,
                               block);
    };
  };
  StackOptions<float> so;
  so.activation = c.activation;
  so.norm_first = c.norm_placement != NormPlacement::post;
  so.eps = static_cast<float>(c.norm_eps);
  so.threads = threads;
  so.bf16_gemm = model.compute() == ComputeType::bfloat16;
  LayerOptions<float> attention;
  attention.scale = static_cast<float>(c.attn_scale);
  attention.threads = threads;
  attention.bf16_gemm = model.compute() == ComputeType::bfloat16;
  StackWeights<float> w;  // one layer's weights at a time, in the same memory
  w.layers.resize(1);

  // One stack over x (B, L, d): each layer read, run and its maps handed on.
  auto run_stack = [&](Stack stack, std::size_t first, std::size_t layers, const StackShape& shape,
                       std::vector<float>& x, const float* memory, const Mask<float>& self_mask,
                       const Mask<float>& cross_mask) {
    std::vector<float> y(x.size());
    const bool decoder = stack == Stack::decoder;
    for (std::size_t l = first; l < layers; ++l) {
      if (options.on_layer) options.on_layer(stack, l);
      if (options.hidden_sink) options.hidden_sink(stack, l, x.data());
      const auto t0 = Clock::now();
      // A resident layer lent to the pass, handed back however the layer ends.
      std::vector<TransformerLayer<float>>* resident =
          decoder ? options.decoder_layers : options.encoder_layers;
      struct Lend {
        TransformerLayer<float>* from;
        TransformerLayer<float>& to;
        ~Lend() {
          if (from) std::swap(*from, to);
        }
      } lend{resident ? &(*resident)[l] : nullptr, w.layers[0]};
      if (resident)
        std::swap(w.layers[0], (*resident)[l]);
      else
        model.layer(l, w.layers[0], threads, stack);
      read += seconds_since(t0);
      so.self_attn = so.cross_attn = attention;
      const MapKind self_kind = decoder ? MapKind::decoder : MapKind::encoder;
      if (options.context_hook) {
        so.self_attn.context_hook = [&, l, self_kind](float* context) {
          options.context_hook(self_kind, l, context);
        };
        so.cross_attn.context_hook = [&, l](float* context) {
          options.context_hook(MapKind::cross, l, context);
        };
      }
      if (options.values) {
        so.self_attn.values_hook = [&, l, self_kind](const float* V, std::size_t ld) {
          options.values(self_kind, l, V, ld, w.layers[0].self_attn);
        };
        so.cross_attn.values_hook = [&, l](const float* V, std::size_t ld) {
          options.values(MapKind::cross, l, V, ld, w.layers[0].cross_attn);
        };
      }
      const long slot = options.attention_sink ? slot_of(l) : -1;
      if (slot >= 0) {
        const auto s = static_cast<std::size_t>(slot);
        so.self_attn.attention = AttentionOutput::per_head;
        so.self_attn.sink = sink(decoder ? MapKind::decoder : MapKind::encoder, s);
        if (decoder) {
          so.cross_attn.attention = AttentionOutput::per_head;
          so.cross_attn.sink = sink(MapKind::cross, s);
        }
      }
      transformer_stack<float>(shape, x.data(), memory, w, self_mask, cross_mask, so, y.data());
      std::swap(x, y);
    }
    const Norm<float> final = model.final_norm(stack);  // T5's final_layer_norm
    if (!final.empty()) {
      layer_norm(x.data(), x.size() / d, d, final, static_cast<float>(c.norm_eps), y.data(),
                 threads);
      std::swap(x, y);
    }
    if (options.hidden_sink) options.hidden_sink(stack, layers, x.data());
  };

  // The encoder: (B, S) ids -> memory (B, S, d).
  auto t0 = Clock::now();
  std::vector<float> x, table;
  if (options.encoder_output) {
    if (options.encoder_output->size() != B * S * d)
      fail_input("forward_seq2seq: the encoder output given holds " +
                 std::to_string(options.encoder_output->size()) +
                 " values; expected B * S * d = " + std::to_string(B * S * d));
    result.encoder_output = *options.encoder_output;
  } else {
    x = embed(model, source, B, S, Stack::main, threads);
    if (c.relative_buckets) table = model.relative_bias(Stack::main);
  }
  read += seconds_since(t0);
  if (!options.encoder_output) {
    StackShape shape;
    shape.kind = LayerKind::encoder;
    shape.d_ff = c.d_ff;
    shape.self = dims_of(c, B, S, S);
    Mask<float> mask = mask_of(source_lengths, S, false);
    if (!table.empty()) add_bias(mask, position_bias(c, table, S, true), S);
    run_stack(Stack::main, 0, c.num_layers, shape, x, nullptr, mask, Mask<float>{});
    result.encoder_output = std::move(x);
  }

  // The decoder: (B, T) ids, causal, with the cross-attention over the encoder's (B, S) rows.
  t0 = Clock::now();
  const std::size_t first = options.decoder_first_hidden ? options.decoder_first_layer : 0;
  if (options.decoder_first_hidden) {
    if (!options.encoder_output || first >= c.num_decoder_layers)
      fail_input("forward_seq2seq: a decoder pass from layer " + std::to_string(first) +
                 " needs the encoder's output and a layer under " +
                 std::to_string(c.num_decoder_layers));
    x.assign(options.decoder_first_hidden, options.decoder_first_hidden + B * T * d);
  } else {
    x = embed(model, decoder_ids, B, T, Stack::decoder, threads);
  }
  table = c.relative_buckets ? model.relative_bias(Stack::decoder) : std::vector<float>{};
  read += seconds_since(t0);
  {
    StackShape shape;
    shape.kind = LayerKind::decoder;
    shape.d_ff = c.d_ff;
    shape.self = dims_of(c, B, T, T);
    shape.cross = dims_of(c, B, T, S);
    Mask<float> self_mask = mask_of(target_lengths, T, true);
    if (!table.empty()) add_bias(self_mask, position_bias(c, table, T, false), T);
    const Mask<float> cross_mask = mask_of(source_lengths, S, false);
    run_stack(Stack::decoder, first, c.num_decoder_layers, shape, x, result.encoder_output.data(),
              self_mask, cross_mask);
  }

  if (options.top_k && c.has_lm_head()) {
    std::vector<float> last(B * d);  // each row's last target position
    for (std::size_t b = 0; b < B; ++b)
      std::copy_n(x.data() + (b * T + target_lengths[b] - 1) * d, d, last.data() + b * d);
    const std::size_t V = c.vocab_size, k = std::min(options.top_k, V);
    result.top_k.resize(B);
    std::vector<std::int32_t> order(V);
    seq2seq_logits(
        model, last.data(), B,
        [&](std::size_t r0, std::size_t n, const float* logits) {
          for (std::size_t r = 0; r < n; ++r) {
            const float* row = logits + r * V;
            const Softmax sm = softmax_of(row, V);
            for (std::size_t v = 0; v < V; ++v) order[v] = static_cast<std::int32_t>(v);
            std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k),
                              order.end(), [&](std::int32_t a, std::int32_t b) {
                                return row[a] > row[b] || (row[a] == row[b] && a < b);
                              });
            for (std::size_t i = 0; i < k; ++i)
              result.top_k[r0 + r].push_back({order[i], sm.p(row[order[i]])});
          }
        },
        threads);
  }
  result.output = std::move(x);
  result.seconds_read = read;
  result.seconds_compute = seconds_since(start) - read;
  return result;
}

void seq2seq_logits(
    const Checkpoint& model, const float* hidden, std::size_t rows,
    const std::function<void(std::size_t r0, std::size_t n, const float* logits)>& fn,
    int threads) {
  const ModelConfig& c = model.config();
  const std::size_t d = c.d_model, V = c.vocab_size;
  std::vector<float> scaled;  // T5's sequence_output * d_model**-0.5, in float32
  if (c.lm_head_scale != 1) {
    const float scale = static_cast<float>(c.lm_head_scale);
    scaled.assign(hidden, hidden + rows * d);
    for (float& v : scaled) v *= scale;
    hidden = scaled.data();
  }
  const std::vector<float> bias = c.logits_bias ? model.logits_bias() : std::vector<float>{};
  std::vector<float> block;
  lm_logits(
      model, hidden, rows,
      [&](std::size_t r0, std::size_t n, const float* logits) {
        if (bias.empty()) return fn(r0, n, logits);
        block.assign(logits, logits + n * V);
        for (std::size_t r = 0; r < n; ++r)
          for (std::size_t v = 0; v < V; ++v) block[r * V + v] += bias[v];
        fn(r0, n, block.data());
      },
      threads);
}

std::uint64_t seq2seq_memory(const ModelConfig& c, std::uint64_t layer_bytes, std::size_t B,
                             std::size_t S, std::size_t T, int threads) {
  using u128 = unsigned __int128;
  const u128 d = c.d_model, q = u128{c.h} * c.head_dim;
  u128 bytes = forward_memory(c, layer_bytes, B, std::max(S, T), threads);
  bytes += 4 * u128{B} * S * d;      // the encoder's output, kept for the decoder
  bytes += 4 * u128{B} * S * 2 * q;  // the cross-attention's keys and values
  bytes += 4 * u128(resolve_threads(threads)) * 64 * S;  // cross-attention slabs
  if (c.relative_buckets)  // the position biases (h, S, S) and (h, T, T)
    bytes += 4 * u128{c.h} * (u128{S} * S + u128{T} * T);
  const u128 most = std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(std::min(bytes, most));
}

}  // namespace mha
