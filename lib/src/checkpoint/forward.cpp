#include "mha/checkpoint/forward.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/transformer.hpp"

namespace mha {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// LM head rows read per piece when scoring the vocabulary.
constexpr std::size_t kHeadRows = 4096;

void check_ids(const ModelConfig& c, const std::int32_t* ids, std::size_t B, std::size_t T,
               const std::vector<std::size_t>& lengths) {
  if (lengths.size() != B) fail_input("forward: expected " + std::to_string(B) + " lengths");
  if (T > c.max_positions)
    fail_input(std::to_string(T) + " tokens are more than the model's " +
               std::to_string(c.max_positions) +
               " positions (config.json max_position_embeddings)");
  for (std::size_t b = 0; b < B; ++b) {
    if (lengths[b] < 1 || lengths[b] > T)
      fail_input("forward: length " + std::to_string(lengths[b]) + " of row " + std::to_string(b) +
                 " is outside [1, " + std::to_string(T) + "]");
    for (std::size_t t = 0; ids && t < T; ++t) {
      const std::int32_t id = ids[b * T + t];
      if (id < 0 || static_cast<std::size_t>(id) >= c.vocab_size)
        fail_input("token id " + std::to_string(id) + " at [" + std::to_string(b) + ", " +
                   std::to_string(t) + "] is outside the vocabulary (vocab_size " +
                   std::to_string(c.vocab_size) + " in config.json)");
    }
  }
}

// Layer l's attention options and mask, from the config's features.
LayerOptions<float> attention_options(const ModelConfig& c, std::size_t l, int threads, bool bf16) {
  LayerOptions<float> o;
  o.bf16_gemm = bf16;
  o.scale = static_cast<float>(c.attn_scale);
  o.softcap = static_cast<float>(c.attn_softcap);
  o.threads = threads;
  if (c.rope) {
    const bool local = c.layer_sliding(l) && c.rope_local_theta > 0;
    o.rope.layout = RopeLayout::half;
    o.rope.dim = c.rotary_dim;
    o.rope.theta = local ? c.rope_local_theta : c.rope_theta;
    o.rope.scaling = local ? 1 : c.rope_scaling;
  }
  o.qk_norm_eps = static_cast<float>(c.norm_eps);
  return o;
}

Mask<float> mask_of(const ModelConfig& c, std::size_t T, const std::vector<std::size_t>& lengths) {
  Mask<float> m;
  if (c.causal) m.causal = Causal::top_left;
  if (std::any_of(lengths.begin(), lengths.end(), [&](std::size_t n) { return n < T; }))
    m.key_lengths.assign(lengths.begin(), lengths.end());
  return m;
}

// The rows of the learned position table each token reads: position t at
// position_offset + t; RoBERTa's count only the tokens that are not padding
// and put a pad token at position_offset - 1 (create_position_ids_from_input_ids).
std::vector<std::size_t> position_rows(const ModelConfig& c, const std::int32_t* ids, std::size_t B,
                                       std::size_t T) {
  std::vector<std::size_t> rows(B * T);
  const std::int64_t pad = c.pad_token_id.value_or(-1);
  for (std::size_t b = 0; b < B; ++b) {
    std::size_t n = 0;
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t i = b * T + t;
      if (c.positions_skip_padding && ids[i] == pad)
        rows[i] = c.position_offset - 1;
      else
        rows[i] = c.position_offset + (c.positions_skip_padding ? n++ : t);
    }
  }
  return rows;
}

// The k most likely next tokens after each row's last token, from the final
// hidden states `last` (B, d_model): the LM head's logits (a GEMM over pieces
// of its rows, read as they are needed), then a softmax in double.
std::vector<std::vector<NextToken>> next_tokens(const Checkpoint& model, const float* last,
                                                std::size_t B, std::size_t k) {
  const ModelConfig& c = model.config();
  const std::size_t d = c.d_model, V = c.vocab_size;
  std::vector<float> logits(V * B);  // (V, B)
  std::vector<float> rows(std::min(V, kHeadRows) * d);
  for (std::size_t v0 = 0; v0 < V; v0 += kHeadRows) {
    const std::size_t n = std::min(kHeadRows, V - v0);
    model.lm_head_rows(v0, n, rows.data());
    // logits[v0:v0+n] (n, B) = rows (n, d) last^T (d, B)
    gemm<float>(false, true, n, B, d, 1.0f, rows.data(), d, last, d, 0.0f, logits.data() + v0 * B,
                B, model.compute() == ComputeType::bfloat16);
  }
  if (c.final_softcap > 0) {  // logits <- cap tanh(logits / cap)
    const float cap = static_cast<float>(c.final_softcap);
    for (float& z : logits) z = cap * std::tanh(z / cap);
  }
  std::vector<std::vector<NextToken>> out(B);
  for (std::size_t b = 0; b < B; ++b) out[b] = top_of(logits.data() + b, B, V, k);
  return out;
}

}  // namespace

std::vector<NextToken> top_of(const float* logits, std::size_t stride, std::size_t n,
                              std::size_t k) {
  std::vector<NextToken> out;
  if (n == 0) return out;
  k = std::min(k, n);
  auto logit = [&](std::int32_t v) { return double(logits[std::size_t(v) * stride]); };
  double top = logit(0);
  for (std::size_t v = 0; v < n; ++v) top = std::max(top, logit(std::int32_t(v)));
  double sum = 0;
  for (std::size_t v = 0; v < n; ++v) sum += std::exp(logit(std::int32_t(v)) - top);
  std::vector<std::int32_t> order(n);
  for (std::size_t v = 0; v < n; ++v) order[v] = static_cast<std::int32_t>(v);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](std::int32_t x, std::int32_t y) {
                      return logit(x) > logit(y) || (logit(x) == logit(y) && x < y);
                    });
  for (std::size_t i = 0; i < k; ++i)
    out.push_back({order[i], std::exp(logit(order[i]) - top) / sum});
  return out;
}

std::vector<float> classifier_logits(const Checkpoint& model, const ClassifierHead& head,
                                     const float* hidden, std::size_t rows, std::size_t ld) {
  const std::size_t d = model.config().d_model, n = head.bias.size();
  // z (rows, n) = hidden (rows, d; stride ld) W^T (d, n), then + b
  auto linear = [&](const float* x, const std::vector<float>& W, const std::vector<float>& b) {
    std::vector<float> z(rows * n);
    if (!rows || !n) return z;
    gemm<float>(false, true, rows, n, d, 1.0f, x, ld, W.data(), d, 0.0f, z.data(), n,
                model.compute() == ComputeType::bfloat16);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < n; ++j) z[r * n + j] += b[j];
    return z;
  };
  std::vector<float> logits = linear(hidden, head.weight, head.bias);
  if (head.distillation_weight.empty()) return logits;
  // DeiT's teacher head on the distillation token (position 1): (cls + distillation) / 2
  const std::vector<float> z = linear(hidden + d, head.distillation_weight, head.distillation_bias);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = (logits[i] + z[i]) / 2.0f;
  return logits;
}

ForwardResult forward(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                      std::size_t T, const std::vector<std::size_t>& lengths,
                      const ForwardOptions& options) {
  const ModelConfig& c = model.config();
  // From a given residual stream the ids are not read (an image model has none).
  check_ids(c, options.first_hidden ? nullptr : ids, B, T, lengths);
  const int threads = resolve_threads(options.threads);
  const std::size_t d = c.d_model, n = B * T * d;
  ForwardResult result;
  double read = 0;
  const auto start = Clock::now();

  // x: the residual stream; y: the next layer's output.
  std::vector<float> x(n), y(n);
  if (options.first_hidden) {  // a later layer's input, from an earlier pass
    std::copy(options.first_hidden, options.first_hidden + n, x.begin());
  } else {
    const std::vector<std::size_t> positions = position_rows(c, ids, B, T);
    const auto t0 = Clock::now();
    model.embed(ids, positions.data(), B * T, x.data());
    const Norm<float> norm = model.embedding_norm();
    read += seconds_since(t0);
    if (!norm.empty()) {
      layer_norm(x.data(), B * T, d, norm, static_cast<float>(c.norm_eps), y.data(), threads);
      std::swap(x, y);
    }
  }

  Dims dims;
  dims.B = B;
  dims.T = dims.S = T;
  dims.h = c.h;
  dims.kv_heads = c.kv_heads == c.h ? 0 : c.kv_heads;
  dims.d_model = dims.kdim = dims.vdim = dims.d_out = d;
  dims.d_k = dims.d_v = c.head_dim;
  StackShape shape;
  shape.kind = LayerKind::encoder;
  shape.num_layers = 1;
  shape.d_ff = c.d_ff;
  shape.self = dims;
  StackOptions<float> so;
  so.activation = c.activation;
  so.norm_first = c.norm_placement != NormPlacement::post;
  so.parallel_residual = c.parallel_residual;
  so.eps = static_cast<float>(c.norm_eps);
  so.threads = threads;
  so.bf16_gemm = model.compute() == ComputeType::bfloat16;
  Mask<float> mask = mask_of(c, T, lengths);

  std::vector<int> head_slot(c.h, -1);
  for (std::size_t i = 0; i < options.map_heads.size(); ++i)
    head_slot.at(options.map_heads[i]) = static_cast<int>(i);
  if (options.map_heads.empty())
    for (std::size_t i = 0; i < c.h; ++i) head_slot[i] = static_cast<int>(i);

  if (options.first_layer > c.num_layers || (options.first_layer && !options.first_hidden))
    fail_input("forward: first_layer " + std::to_string(options.first_layer) +
               " needs its hidden state and at most " + std::to_string(c.num_layers) + " layers");
  std::size_t next_slot = 0;
  while (next_slot < options.map_layers.size() &&
         options.map_layers[next_slot] < options.first_layer)
    ++next_slot;
  StackWeights<float> w;  // one layer's weights at a time, in the same memory
  w.layers.resize(1);
  for (std::size_t l = options.first_layer; l < c.num_layers; ++l) {
    if (options.on_layer) options.on_layer(l);
    if (options.hidden_sink) options.hidden_sink(l, x.data());
    const auto t0 = Clock::now();
    // A resident layer lent to the pass, handed back however the layer ends.
    struct Lend {
      TransformerLayer<float>* from;
      TransformerLayer<float>& to;
      ~Lend() {
        if (from) std::swap(*from, to);
      }
    } lend{options.layers ? &(*options.layers)[l] : nullptr, w.layers[0]};
    if (options.layers)
      std::swap(w.layers[0], (*options.layers)[l]);
    else
      model.layer(l, w.layers[0], threads);
    read += seconds_since(t0);
    so.self_attn = attention_options(c, l, threads, model.compute() == ComputeType::bfloat16);
    if (options.context_hook)
      so.self_attn.context_hook = [&, l](float* context) { options.context_hook(l, context); };
    if (options.values)
      so.self_attn.values_hook = [&, l](const float* V, std::size_t ld) {
        options.values(l, V, ld, w.layers[0]);
      };
    mask.window = c.layer_sliding(l) ? c.sliding_window : 0;
    const bool maps = next_slot < options.map_layers.size() && options.map_layers[next_slot] == l;
    if (maps && options.attention_sink) {
      const std::size_t slot = next_slot;
      so.self_attn.attention = AttentionOutput::per_head;
      so.self_attn.sink = [&, slot](std::size_t b, std::size_t head, std::size_t q0,
                                    std::size_t rows, const float* block) {
        if (head_slot[head] >= 0)
          options.attention_sink(slot, b, static_cast<std::size_t>(head_slot[head]), q0, rows,
                                 block);
      };
    }
    if (maps && options.qk_sink) {
      const std::size_t slot = next_slot;
      so.self_attn.qk_hook = [&, slot](const float* Q, std::size_t ldq, const float* K,
                                       std::size_t ldk) { options.qk_sink(slot, Q, ldq, K, ldk); };
    }
    if (maps) ++next_slot;
    transformer_stack<float>(shape, x.data(), nullptr, w, mask, Mask<float>{}, so, y.data());
    std::swap(x, y);
  }
  const Norm<float> final = model.final_norm();
  if (!final.empty()) {
    layer_norm(x.data(), B * T, d, final, static_cast<float>(c.norm_eps), y.data(), threads);
    std::swap(x, y);
  }
  if (options.hidden_sink) options.hidden_sink(c.num_layers, x.data());
  if (options.top_k && c.has_lm_head()) {
    std::vector<float> last(B * d);  // each row's last real token
    for (std::size_t b = 0; b < B; ++b)
      std::copy_n(x.data() + (b * T + lengths[b] - 1) * d, d, last.data() + b * d);
    result.top_k = next_tokens(model, last.data(), B, options.top_k);
  }
  if (options.top_k && c.classifier) {  // the classes, from each row's CLS token (and DIST)
    const auto t0 = Clock::now();
    const ClassifierHead head = model.classifier();
    read += seconds_since(t0);
    const std::vector<float> z = classifier_logits(model, head, x.data(), B, T * d);
    for (std::size_t b = 0; b < B; ++b)
      result.top_k.push_back(top_of(z.data() + b * c.num_labels, 1, c.num_labels, options.top_k));
  }
  result.output = std::move(x);
  result.seconds_read = read;
  result.seconds_compute = seconds_since(start) - read;
  return result;
}

std::vector<TransformerLayer<float>> read_layers(const Checkpoint& model, int threads) {
  return read_layers(model, threads, Stack::main);
}

std::vector<TransformerLayer<float>> read_layers(const Checkpoint& model, int threads,
                                                 Stack stack) {
  const ModelConfig& c = model.config();
  std::vector<TransformerLayer<float>> layers(stack == Stack::decoder ? c.num_decoder_layers
                                                                      : c.num_layers);
  for (std::size_t l = 0; l < layers.size(); ++l) model.layer(l, layers[l], threads, stack);
  return layers;
}

std::uint64_t forward_memory(const ModelConfig& c, std::uint64_t layer_bytes, std::size_t B,
                             std::size_t T, int threads) {
  // In 128 bits, saturated to 2^64 - 1: sizes from a file cannot wrap the estimate below the
  // limit it is compared with (read_model_config bounds them, this does not rely on it).
  using u128 = unsigned __int128;
  const u128 rows = u128{B} * T, d = c.d_model;
  const u128 q = u128{c.h} * c.head_dim, kv = u128{c.kv_heads} * c.head_dim;
  const u128 largest = std::max({d * q, d * c.d_ff, 3 * d * d});
  u128 bytes = layer_bytes + 4 * largest;                    // the weights, a stored matrix
  bytes += 4 * rows * (2 * d);                               // x and y
  bytes += 4 * rows * (2 * d + 2 * u128{c.d_ff});            // the layer's y, a, f, g
  if (c.parallel_residual) bytes += 4 * rows * d;            // the attention's output beside a
  bytes += 4 * rows * (q + 2 * kv + q);                      // Q, K, V and the heads' outputs
  bytes += 4 * u128(resolve_threads(threads)) * 64 * T * 2;  // attention slabs
  if (c.has_lm_head())
    bytes += 4 * std::min<u128>(c.vocab_size, kHeadRows) * d + 8 * 2 * u128{c.vocab_size};
  if (c.classifier)  // the heads (two with DeiT's distillation head), their logits
    bytes += 4 * u128{c.num_labels} * (d + 1 + u128{B}) * (1 + u128{c.distillation_head}) +
             4 * u128{c.num_labels};
  const u128 most = std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(std::min(bytes, most));
}

}  // namespace mha
