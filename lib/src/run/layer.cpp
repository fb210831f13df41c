#include "mha/run/layer.hpp"

#include <algorithm>
#include <cstring>
#include <variant>

#include "mha/base/error.hpp"
#include "mha/config/attention_axes.hpp"
#include "mha/config/inputs.hpp"
#include "mha/io/float16.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/run/plan.hpp"
#include "typed_layer.hpp"

namespace mha {

struct Layer::Impl {
  std::variant<TypedLayer<float>, TypedLayer<double>> typed;
  AttentionAxes axes;
  Dims dims;  // as planned
  std::optional<StackShape> stack;

  template <class T>
  Impl(const RunPlan& plan, const Warn& warn, bool sized, T*)
      : typed(std::in_place_type<TypedLayer<T>>, plan, warn, sized),
        axes(plan.axes),
        dims(plan.dims),
        stack(plan.stack) {}
  const Config& config() const {
    return std::visit([](const auto& t) -> const Config& { return t.config(); }, typed);
  }
};

namespace {

std::unique_ptr<Layer::Impl> build(const Config& config, const Warn& warn, bool sized) {
  // A layer built without its calls' sizes is planned for sizes that fit
  // its keys (one query row, as many as its key lengths need): the plan
  // checks everything else (weights, keys, variants) the same way.
  Config sizes = config;
  if (!sized && !sizes.query) {
    auto longest = [](const std::optional<std::vector<std::int64_t>>& lengths) {
      std::int64_t n = 1;
      if (lengths)
        for (std::int64_t x : *lengths) n = std::max(n, x);
      return n;
    };
    if (!sizes.seq_len) sizes.seq_len = longest(sizes.key_lengths);
    if (!sizes.kv_seq_len && sizes.memory_key_lengths)
      sizes.kv_seq_len = longest(sizes.memory_key_lengths);
    if (!sizes.batch && (sizes.key_lengths || sizes.memory_key_lengths))
      sizes.batch = static_cast<std::int64_t>(
          (sizes.key_lengths ? *sizes.key_lengths : *sizes.memory_key_lengths).size());
  }
  PlanFiles files;
  const RunPlan plan = plan_run(sizes, files);
  if (config.average_heads && !config.save_attention && !config.plot && warn)
    warn("average_heads has no effect without save_attention or plot");
  auto impl = config.dtype == ComputeType::float64
                  ? std::make_unique<Layer::Impl>(plan, warn, sized, static_cast<double*>(nullptr))
                  : std::make_unique<Layer::Impl>(plan, warn, sized, static_cast<float*>(nullptr));
  blas_load();  // OpenBLAS ready before the first call
  return impl;
}

std::string expected(const char* what, std::size_t features) {
  return std::string(what) + ": expected shape (B, L, " + std::to_string(features) + ") or (L, " +
         std::to_string(features) + ")";
}

// An array's (B, L) as a (B, L, features) or (L, features) tensor.
std::pair<std::size_t, std::size_t> batch_and_length(const NpyView& a, const char* what,
                                                     std::size_t features) {
  if (!a.data && Layer::size(a.shape) != 0) fail_input(std::string(what) + ": no data");
  if (a.shape.size() == 3 && a.shape[2] == features) return {a.shape[0], a.shape[1]};
  if (a.shape.size() == 2 && a.shape[1] == features) return {1, a.shape[0]};
  fail_input(expected(what, features) + ", got " + shape_str(a.shape));
}

// The sizes of a call: the planned ones with B, T and S from its arrays.
Dims call_dims(const Layer::Impl& L, const Layer::Call& call) {
  Dims d = L.dims;
  if (L.axes.active()) {
    if (call.query.shape != L.axes.query_shape(d.d_model) || call.key || call.value || call.memory)
      fail_input("query: a layer with attention_axes is called on the shape it was planned for, " +
                 shape_str(L.axes.query_shape(d.d_model)) + ", got " + shape_str(call.query.shape));
    return d;
  }
  const auto [B, T] = batch_and_length(call.query, "query", d.d_model);
  if (B == 0 || T == 0)
    fail_input("query: expected at least one row, got shape " + shape_str(call.query.shape));
  d.B = B, d.T = T;
  if (L.stack) {
    d.S = T;
    if (L.stack->kind == LayerKind::decoder && !call.memory)
      fail_input("memory: a decoder layer attends to memory (B, S, d_model); give it");
    if (call.key || call.value) fail_input("key: a stack of layers takes query (and memory) only");
    return d;
  }
  const NpyView* key = call.key ? call.key : call.value;
  d.key_is_query = key == nullptr;
  d.value_is_key = call.value == nullptr || call.value == call.key;
  if (d.key_is_query) {
    if (d.kdim != d.d_model || d.vdim != d.d_model)
      fail_input("key: this layer's kdim and vdim (" + std::to_string(d.kdim) + ", " +
                 std::to_string(d.vdim) + ") are not d_model (" + std::to_string(d.d_model) +
                 "); give key and value");
    d.S = T;
    return d;
  }
  const auto [kB, S] =
      batch_and_length(*key, call.key ? "key" : "value", call.key ? d.kdim : d.vdim);
  if (kB != B)
    fail_input("key: batch " + std::to_string(kB) + " is not the query's " + std::to_string(B));
  if (S == 0) fail_input("key: expected at least one key, got shape " + shape_str(key->shape));
  d.S = S;
  if (!d.value_is_key) {
    const auto [vB, vS] = batch_and_length(*call.value, "value", d.vdim);
    if (vB != B || vS != S)
      fail_input("value: expected shape " + shape_str(std::vector<std::size_t>{B, S, d.vdim}) +
                 " as the key's, got " + shape_str(call.value->shape));
  } else if (call.key && d.vdim != d.kdim) {
    fail_input("value: this layer's vdim (" + std::to_string(d.vdim) + ") is not its kdim (" +
               std::to_string(d.kdim) + "); give value");
  }
  return d;
}

template <class T>
const T* data_of(const NpyView& a, const char* what, const Config& c) {
  if (a.dtype != npy_dtype<T>())
    fail_input(std::string(what) + ": expected " + (sizeof(T) == 4 ? "float32" : "float64") +
               " data (the layer's compute dtype)");
  const T* p = static_cast<const T*>(a.data);
  if (!c.allow_nonfinite) check_finite(p, Layer::size(a.shape), a.shape, what);
  return p;
}

template <class T>
void call_attention(const Layer::Impl& L, const TypedLayer<T>& layer, const Layer::Call& call,
                    const Config& c, const Dims& d, T* output, T* attention, const Warn& warn) {
  LayerOptions<T> options = layer.attention_options(c);
  if (c.save_attention && attention) {
    options.attention =
        c.average_heads ? AttentionOutput::mean_over_heads : AttentionOutput::per_head;
    options.attention_buffer = attention;
  }
  const auto mask = layer.mask(c, d, warn);
  if (L.axes.active()) {  // N-D: gathered to (B', L, F) and scattered back
    NpyArray q;
    q.dtype = call.query.dtype;
    q.shape = call.query.shape;
    const auto* bytes = static_cast<const unsigned char*>(call.query.data);
    q.data.assign(bytes, bytes + call.query.bytes());
    const NpyArray flat = L.axes.gather(std::move(q));
    const T* x = data_of<T>(NpyView{flat.data.data(), flat.dtype, flat.shape}, "query", c);
    std::vector<T> out(d.B * d.T * d.d_out);
    layer.attend(d, x, x, x, *mask, options, out.data());
    layer.check_output(c, out.data(), out.size());
    L.axes.scatter(out.data(), L.axes.query_shape(d.d_out), output);
    return;
  }
  const T* q = data_of<T>(call.query, "query", c);
  const T* k = d.key_is_query
                   ? q
                   : data_of<T>(call.key ? *call.key : *call.value, call.key ? "key" : "value", c);
  const T* v = d.value_is_key ? k : data_of<T>(*call.value, "value", c);
  layer.attend(d, q, k, v, *mask, options, output);
  layer.check_output(c, output, d.B * d.T * d.d_out);
}

template <class T>
void call_stack(const TypedLayer<T>& layer, const Layer::Call& call, const Config& c, const Dims& d,
                T* output, T* attention, T* cross_attention, const Warn& warn) {
  StackShape s = *layer.stack();
  s.self.B = s.cross.B = d.B;
  s.self.T = s.self.S = s.cross.T = d.T;
  const T* memory = nullptr;
  if (s.kind == LayerKind::decoder) {
    const auto [mB, S] = batch_and_length(*call.memory, "memory", s.cross.kdim);
    if (mB != d.B)
      fail_input("memory: batch " + std::to_string(mB) + " is not the query's " +
                 std::to_string(d.B));
    s.cross.S = S;
    memory = data_of<T>(*call.memory, "memory", c);
  }
  StackOptions<T> options = layer.stack_options(c);
  if (c.save_attention) {
    const AttentionOutput kind =
        c.average_heads ? AttentionOutput::mean_over_heads : AttentionOutput::per_head;
    const std::size_t heads = c.average_heads ? 1 : d.h;
    const std::size_t self_size = d.B * heads * d.T * d.T,
                      cross_size = d.B * heads * d.T * s.cross.S;
    if (attention) options.self_attn.attention = kind;
    if (cross_attention) options.cross_attn.attention = kind;
    options.before_layer = [=](std::size_t l, LayerOptions<T>& self, LayerOptions<T>& cross) {
      if (attention) self.attention_buffer = attention + l * self_size;
      if (cross_attention) cross.attention_buffer = cross_attention + l * cross_size;
    };
  }
  const auto mask = layer.mask(c, s.self, warn);
  layer.run_stack(s, data_of<T>(call.query, "query", c), memory, *mask, layer.cross_mask(c),
                  options, output);
  layer.check_output(c, output, d.B * d.T * d.d_model);
}

}  // namespace

Layer::Layer(const Config& config, const Warn& warn, bool sized)
    : impl_(build(config, warn, sized)) {}

const Config& Layer::config() const {
  return impl_->config();
}

DType Layer::dtype() const {
  return std::holds_alternative<TypedLayer<double>>(impl_->typed) ? DType::f8 : DType::f4;
}

std::size_t Layer::d_model() const {
  return impl_->dims.d_model;
}
std::size_t Layer::kdim() const {
  return impl_->dims.kdim;
}
std::size_t Layer::vdim() const {
  return impl_->dims.vdim;
}

std::size_t Layer::size(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t x : shape) n *= x;
  return n;
}

namespace {

template <class T>
NpyView draw(std::vector<unsigned char>& bytes, const char* name, std::size_t B, std::size_t L,
             std::size_t F, const Config& c) {
  const Tensor<T, 3> t = make_input<T>(std::nullopt, "", name, B, L, F, c.seed, c.threads);
  const auto* p = reinterpret_cast<const unsigned char*>(t.data());
  bytes.assign(p, p + t.size() * sizeof(T));
  return NpyView{bytes.data(), npy_dtype<T>(), {B, L, F}};
}

}  // namespace

std::unique_ptr<Layer::Drawn> Layer::draw_inputs() const {
  const Impl& L = *impl_;
  const Config& c = L.config();
  const Dims& d = L.dims;
  auto drawn = std::make_unique<Drawn>();
  auto fill = [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    drawn->call.query = draw<T>(drawn->query_bytes, "query", d.B, d.T, d.d_model, c);
    if (L.axes.active())
      fail_input("query: a layer with attention_axes draws no inputs; give query");
    if (L.stack) {
      if (L.stack->kind == LayerKind::decoder) {
        drawn->memory = draw<T>(drawn->memory_bytes, "memory", d.B, L.stack->cross.S, d.d_model, c);
        drawn->call.memory = &drawn->memory;
      }
      return;
    }
    if (!d.key_is_query) {
      drawn->key = draw<T>(drawn->key_bytes, "key", d.B, d.S, d.kdim, c);
      drawn->call.key = &drawn->key;
    }
    if (!d.value_is_key) {
      drawn->value = draw<T>(drawn->value_bytes, "value", d.B, d.S, d.vdim, c);
      drawn->call.value = &drawn->value;
    }
  };
  if (dtype() == DType::f8)
    fill(static_cast<double*>(nullptr));
  else
    fill(static_cast<float*>(nullptr));
  return drawn;
}

Layer::Shapes Layer::shapes(const Call& call) const {
  const Impl& L = *impl_;
  const Config& c = call.config ? *call.config : L.config();
  const Dims d = call_dims(L, call);
  Shapes s;
  const std::size_t L_layers = L.stack ? L.stack->num_layers : 0;
  if (L.axes.active()) {
    s.output = L.axes.query_shape(d.d_out);
    if (c.save_attention) s.attention = L.axes.attention_shape(d, c.average_heads);
    return s;
  }
  s.output = {d.B, d.T, L.stack ? d.d_model : d.d_out};
  if (!c.save_attention) return s;
  auto maps = [&](std::size_t S) {
    std::vector<std::size_t> shape;
    if (L.stack) shape.push_back(L_layers);
    shape.push_back(d.B);
    if (!c.average_heads) shape.push_back(d.h);
    shape.insert(shape.end(), {d.T, S});
    return shape;
  };
  s.attention = maps(d.S);
  if (L.stack && L.stack->kind == LayerKind::decoder)
    s.cross_attention = maps(batch_and_length(*call.memory, "memory", d.d_model).second);
  return s;
}

void Layer::operator()(const Call& call, void* output, void* attention, void* cross_attention,
                       const Warn& warn) const {
  const Impl& L = *impl_;
  const Config& c = call.config ? *call.config : L.config();
  const Dims d = call_dims(L, call);
  std::visit(
      [&](const auto& layer) {
        using T =
            std::remove_const_t<std::remove_reference_t<decltype(layer.weights().W_q.data()[0])>>;
        if (L.stack)
          call_stack<T>(layer, call, c, d, static_cast<T*>(output), static_cast<T*>(attention),
                        static_cast<T*>(cross_attention), warn);
        else
          call_attention<T>(L, layer, call, c, d, static_cast<T*>(output),
                            static_cast<T*>(attention), warn);
      },
      L.typed);
}

}  // namespace mha
