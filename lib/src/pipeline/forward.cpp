#include "mha/pipeline/forward.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/transformer.hpp"
#include "mha/pipeline/lens.hpp"
#include "mha/pipeline/seq2seq.hpp"

namespace mha {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// LM head rows read per piece when scoring the vocabulary.
constexpr std::size_t kHeadRows = 4096;

// `side`: "" for a one-stack model, "source: " or "target: " for an encoder-decoder's.
void check_ids(const ModelConfig& c, const std::int32_t* ids, std::size_t B, std::size_t T,
               const std::vector<std::size_t>& lengths, const std::string& side) {
  if (lengths.size() != B) fail_input("forward: expected " + std::to_string(B) + " lengths");
  if (T > c.max_positions)
    fail_input(side + std::to_string(T) + " tokens are more than the model's " +
               std::to_string(c.max_positions) +
               " positions (config.json max_position_embeddings)");
  for (std::size_t b = 0; b < B; ++b) {
    if (lengths[b] < 1 || lengths[b] > T)
      fail_input("forward: " + side + "length " + std::to_string(lengths[b]) + " of row " +
                 std::to_string(b) + " is outside [1, " + std::to_string(T) + "]");
    for (std::size_t t = 0; ids && t < T; ++t) {
      const std::int32_t id = ids[b * T + t];
      if (id < 0 || static_cast<std::size_t>(id) >= c.vocab_size)
        fail_input(side + "token id " + std::to_string(id) + " at [" + std::to_string(b) + ", " +
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

Mask<float> mask_of(bool causal, std::size_t T, const std::vector<std::size_t>& lengths) {
  Mask<float> m;
  if (causal) m.causal = Causal::top_left;
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

namespace {

// One stack's part of a pass: which layers run, their shape and masks, and
// where their weights come from.
struct StackRun {
  Stack stack = Stack::main;
  std::size_t first = 0, layers = 0;  // layers [first, layers) run
  StackShape shape;                   // one layer's: kind, d_ff, the attentions' dims
  Mask<float> self_mask, cross_mask;
  const float* memory = nullptr;  // a decoder's: the encoder's output (B, S, d_model)
  std::vector<TransformerLayer<float>>* resident = nullptr;
};

// x (B, L, d_model) <- the embeddings of ids (B, L) in `stack`, after its
// embedding norm (hook_embed and hook_pos_embed shown on the way). Returns
// the seconds spent reading.
double embed_stack(const Checkpoint& model, const std::int32_t* ids, std::size_t B, std::size_t L,
                   Stack stack, SiteHook<float>* hook, int threads, std::vector<float>& x) {
  const ModelConfig& c = model.config();
  const auto t0 = Clock::now();
  const std::vector<std::size_t> positions = position_rows(c, ids, B, L);
  x.resize(B * L * c.d_model);
  model.embed(ids, positions.data(), B * L, x.data(), stack, hook);
  const Norm<float> norm = model.embedding_norm(stack);
  const double read = seconds_since(t0);
  if (!norm.empty()) {
    std::vector<float> y(x.size());
    layer_norm(x.data(), B * L, c.d_model, norm, static_cast<float>(c.norm_eps), y.data(), threads);
    x.swap(y);
  }
  return read;
}

// x (B, L, d_model) through the layers of `run` and the stack's final norm
// (ln_final), in place. Returns the seconds spent reading weights.
double run_stack(const Checkpoint& model, StackRun& run, std::vector<float>& x,
                 const ForwardOptions& options, int threads) {
  const ModelConfig& c = model.config();
  const std::size_t d = c.d_model, rows = x.size() / d;
  StackOptions<float> so;
  so.kind = run.shape.kind;
  so.activation = c.activation;
  so.norm_first = c.norm_placement != NormPlacement::post;
  so.parallel_residual = c.parallel_residual;
  so.eps = static_cast<float>(c.norm_eps);
  so.threads = threads;
  so.bf16_gemm = model.compute() == ComputeType::bfloat16;
  so.hook = options.hook;
  so.stack = run.stack;
  StackWeights<float> w;  // one layer's weights at a time, in the same memory
  w.layers.resize(1);
  std::vector<float> y(x.size());
  double read = 0;
  for (std::size_t l = run.first; l < run.layers; ++l) {
    const auto t0 = Clock::now();
    // A resident layer lent to the pass, handed back however the layer ends.
    struct Lend {
      TransformerLayer<float>* from;
      TransformerLayer<float>& to;
      ~Lend() {
        if (from) std::swap(*from, to);
      }
    } lend{run.resident ? &(*run.resident)[l] : nullptr, w.layers[0]};
    if (run.resident)
      std::swap(w.layers[0], (*run.resident)[l]);
    else
      model.layer(l, w.layers[0], threads, run.stack);
    read += seconds_since(t0);
    if (options.on_layer) options.on_layer(run.stack, l, w.layers[0]);
    so.self_attn = so.cross_attn =
        attention_options(c, l, threads, model.compute() == ComputeType::bfloat16);
    so.first_layer = l;
    run.self_mask.window = c.layer_sliding(l) ? c.sliding_window : 0;
    transformer_stack<float>(run.shape, x.data(), run.memory, w, run.self_mask, run.cross_mask, so,
                             y.data());
    std::swap(x, y);
  }
  const auto t0 = Clock::now();
  const Norm<float> final = model.final_norm(run.stack);  // T5's final_layer_norm
  read += seconds_since(t0);
  if (!final.empty()) {
    layer_norm(x.data(), rows, d, final, static_cast<float>(c.norm_eps), y.data(), threads);
    std::swap(x, y);
    const Site site{SiteKind::ln_final, run.stack, 0};
    if (options.hook && options.hook->wants(site)) options.hook->tensor(site, x.data(), rows, d, d);
  }
  return read;
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

// T5's relative position bias (1, h, L, L) on a stack's self-attention mask.
void add_position_bias(const Checkpoint& model, Stack stack, std::size_t L, Mask<float>& m) {
  const ModelConfig& c = model.config();
  if (!c.relative_buckets) return;
  m.position_bias = relative_bias(c, model.relative_bias(stack), L, stack == Stack::main);
  m.bias_strides[0] = 0;  // broadcast over the batch
  m.bias_strides[1] = L * L;
  m.bias_strides[2] = L;
  m.bias_strides[3] = 1;
}

// An encoder-decoder's k most likely next tokens after each row's last target
// position, from the decoder's output `last` (B, d_model) (seq2seq_logits).
std::vector<std::vector<NextToken>> seq2seq_next_tokens(const Checkpoint& model, const float* last,
                                                        std::size_t B, std::size_t k, int threads) {
  const std::size_t V = model.config().vocab_size;
  k = std::min(k, V);
  std::vector<std::vector<NextToken>> out(B);
  std::vector<std::int32_t> order(V);
  seq2seq_logits(
      model, last, B,
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
            out[r0 + r].push_back({order[i], sm.p(row[order[i]])});
        }
      },
      threads);
  return out;
}

// The pass of both forms of forward(): `decoder` null for a one-stack model.
ForwardResult run_pass(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                       std::size_t T, const std::vector<std::size_t>& lengths,
                       const DecoderInput* decoder, const ForwardOptions& options) {
  const ModelConfig& c = model.config();
  const int threads = resolve_threads(options.threads);
  const std::size_t d = c.d_model;
  ForwardResult result;
  double read = 0;
  const auto start = Clock::now();
  // The last stack's start: a layer's input of an earlier pass, or its embeddings.
  if (options.first_layer > (decoder ? c.num_decoder_layers : c.num_layers) ||
      (options.first_layer && !options.first_hidden))
    fail_input("forward: first_layer " + std::to_string(options.first_layer) +
               " needs its hidden state and at most " +
               std::to_string(decoder ? c.num_decoder_layers : c.num_layers) + " layers");

  // The encoder of an encoder-decoder, or the one stack: (B, T) ids -> x (B, T, d).
  std::vector<float> x;
  StackRun main;
  main.layers = c.num_layers;
  main.shape.kind = LayerKind::encoder;
  main.shape.d_ff = c.d_ff;
  main.shape.self = dims_of(c, B, T, T);
  main.self_mask = mask_of(!decoder && c.causal, T, lengths);
  main.resident = options.layers;
  if (decoder && options.encoder_output) {
    if (options.encoder_output->size() != B * T * d)
      fail_input("forward: the encoder output given holds " +
                 std::to_string(options.encoder_output->size()) +
                 " values; expected B * S * d = " + std::to_string(B * T * d));
    result.encoder_output = *options.encoder_output;
  } else {
    if (!decoder && options.first_hidden) {  // a later layer's input, from an earlier pass
      x.assign(options.first_hidden, options.first_hidden + B * T * d);
      main.first = options.first_layer;
    } else {
      read += embed_stack(model, ids, B, T, Stack::main, options.hook, threads, x);
    }
    const auto t0 = Clock::now();
    add_position_bias(model, Stack::main, T, main.self_mask);
    read += seconds_since(t0);
    read += run_stack(model, main, x, options, threads);
    if (decoder) result.encoder_output = std::move(x);
  }
  std::size_t T_out = T;
  const std::vector<std::size_t>* out_lengths = &lengths;
  if (decoder) {  // (B, T_dec) ids, causal, with the cross-attention over the encoder's rows
    const std::size_t Td = decoder->T;
    StackRun run;
    run.stack = Stack::decoder;
    run.layers = c.num_decoder_layers;
    run.shape.kind = LayerKind::decoder;
    run.shape.d_ff = c.d_ff;
    run.shape.self = dims_of(c, B, Td, Td);
    run.shape.cross = dims_of(c, B, Td, T);
    run.self_mask = mask_of(true, Td, decoder->lengths);
    run.cross_mask = mask_of(false, T, lengths);
    run.memory = result.encoder_output.data();
    run.resident = options.decoder_layers;
    if (options.first_hidden) {
      x.assign(options.first_hidden, options.first_hidden + B * Td * d);
      run.first = options.first_layer;
    } else {
      read += embed_stack(model, decoder->ids, B, Td, Stack::decoder, options.hook, threads, x);
    }
    const auto t0 = Clock::now();
    add_position_bias(model, Stack::decoder, Td, run.self_mask);
    read += seconds_since(t0);
    read += run_stack(model, run, x, options, threads);
    T_out = Td;
    out_lengths = &decoder->lengths;
  }
  if (options.top_k && c.has_lm_head()) {
    std::vector<float> last(B * d);  // each row's last real token
    for (std::size_t b = 0; b < B; ++b)
      std::copy_n(x.data() + (b * T_out + (*out_lengths)[b] - 1) * d, d, last.data() + b * d);
    result.top_k = decoder ? seq2seq_next_tokens(model, last.data(), B, options.top_k, threads)
                           : next_tokens(model, last.data(), B, options.top_k);
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

}  // namespace

ForwardResult forward(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                      std::size_t T, const std::vector<std::size_t>& lengths,
                      const ForwardOptions& options) {
  const ModelConfig& c = model.config();
  if (c.encoder_decoder)
    fail_input(model.dir() + ": a " + c.model_type +
               " is an encoder-decoder: its pass needs the decoder's ids too");
  // From a given residual stream the ids are not read (an image model has none).
  check_ids(c, options.first_hidden ? nullptr : ids, B, T, lengths, "");
  return run_pass(model, ids, B, T, lengths, nullptr, options);
}

ForwardResult forward(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                      std::size_t T, const std::vector<std::size_t>& lengths,
                      const DecoderInput& decoder, const ForwardOptions& options) {
  const ModelConfig& c = model.config();
  if (!c.encoder_decoder)
    fail_input(model.dir() + ": a " + c.model_type + " is not an encoder-decoder");
  if (options.first_hidden && !options.encoder_output)
    fail_input("forward: a decoder pass from layer " + std::to_string(options.first_layer) +
               " needs the encoder's output");
  check_ids(c, options.encoder_output ? nullptr : ids, B, T, lengths, "source: ");
  check_ids(c, options.first_hidden ? nullptr : decoder.ids, B, decoder.T, decoder.lengths,
            "target: ");
  return run_pass(model, ids, B, T, lengths, &decoder, options);
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
