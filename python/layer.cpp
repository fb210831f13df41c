// mha.Layer, mha.attention, mha.run and mha.convert_weights (docs/python.md):
// one attention layer (or Transformer layers) planned from `mha run`'s config
// keys, called on NumPy arrays or PyTorch tensors. Arrays (masks, weights)
// are handed to the plan as in-memory inputs (mha/io/provided_input.hpp); a
// Layer (mha/run/layer.hpp) computes on the caller's arrays in place and
// fills NumPy arrays allocated here, without the GIL and without touching a
// file. run() is exactly `mha run`: plan, load, compute, write.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/config/config.hpp"
#include "mha/config/layer_weights.hpp"
#include "mha/config/weight_formats.hpp"
#include "mha/config/weights.hpp"
#include "mha/io/json_file.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/run/layer.hpp"
#include "mha/run/run.hpp"
#include "mha/run/run_json.hpp"
#include "module.hpp"

namespace py = pybind11;
using nlohmann::json;

namespace {

using mha_python::json_to_py;
using mha_python::to_npy;
using mha_python::to_numpy;

using mha_python::to_npy;

// A dict, or anything with keys() and [] (numpy's NpzFile, a state_dict).
bool is_mapping(const py::handle& v) {
  return !py::isinstance<py::str>(v) && py::hasattr(v, "keys") && py::hasattr(v, "__getitem__");
}

std::map<std::string, mha::NpyArray> arrays_of(const py::handle& mapping) {
  std::map<std::string, mha::NpyArray> arrays;
  for (const auto& k : mapping.attr("keys")()) {
    const std::string name = py::str(k);
    py::object v = mapping.attr("__getitem__")(k);
    if (py::hasattr(v, "detach")) v = v.attr("detach")().attr("cpu")().attr("numpy")();  // torch
    arrays[name] = to_npy(py::array::ensure(v), "weights['" + name + "']");
  }
  return arrays;
}

// Registered in-memory inputs, released when the call ends.
struct Provided {
  std::vector<std::string> paths;
  std::vector<py::object> lent;  // arrays whose buffers a run uses in place
  std::vector<std::string> weight_paths;
  ~Provided() {
    for (const auto& p : paths) mha::release_provided(p);
  }
  // A built layer holds its weights converted: the dicts' copies can go.
  void release_weights() {
    for (const auto& w : weight_paths) {
      mha::release_provided(w);
      paths.erase(std::find(paths.begin(), paths.end(), w));
    }
    weight_paths.clear();
  }
  std::string npy(const py::array& a, const std::string& what) {
    paths.push_back(mha::provide_npy(to_npy(a, what)));
    return paths.back();
  }
  // The query, key or value: a C-contiguous float32/float64 array in native
  // order is lent to the run without a copy (it uses it in place when the
  // dtype is the compute type); anything else is copied as a file would be.
  std::string input(const py::handle& v, const std::string& what) {
    py::object obj = py::reinterpret_borrow<py::object>(v);
    if (py::hasattr(obj, "detach")) obj = obj.attr("detach")().attr("cpu")().attr("numpy")();
    if (py::isinstance<py::array>(obj)) {
      const py::array a = py::reinterpret_borrow<py::array>(obj);
      const char kind = a.dtype().kind();
      const bool native = a.dtype().byteorder() != '>';
      const bool contiguous = (a.flags() & py::array::c_style) != 0;
      if (kind == 'f' && (a.itemsize() == 4 || a.itemsize() == 8) && native && contiguous) {
        mha::NpyView view;
        view.data = a.data();
        view.dtype = a.itemsize() == 4 ? mha::DType::f4 : mha::DType::f8;
        for (py::ssize_t i = 0; i < a.ndim(); ++i)
          view.shape.push_back(static_cast<std::size_t>(a.shape(i)));
        lent.push_back(obj);
        paths.push_back(mha::provide_view(std::move(view)));
        return paths.back();
      }
    }
    return npy(py::array::ensure(obj), what);
  }
  std::string weights(const py::handle& mapping) {
    paths.push_back(mha::provide_weights(arrays_of(mapping)));
    weight_paths.push_back(paths.back());
    return paths.back();
  }
};

// A keyword's Python value as the JSON a config file would hold; arrays and
// weight dicts become in-memory inputs.
json to_json(const std::string& key, const py::handle& v, Provided& provided, int depth = 0) {
  if (v.is_none()) return nullptr;
  // As deep as a JSON file may be (mha/io/json_file.hpp): a list nested without
  // end, or containing itself, is refused instead of recursed into.
  if (depth > mha::json_kind::python_value.max_depth)
    throw mha::Error(mha::ErrorKind::invalid_input,
                     key + ": a value nested more than " +
                         std::to_string(mha::json_kind::python_value.max_depth) + " levels deep");
  if ((key == "query" || key == "key" || key == "value") &&
      (py::isinstance<py::array>(v) || py::hasattr(v, "detach")))
    return provided.input(v, key);
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) {
    // Beyond 64 bits, a number as a config file's parser reads one (a double),
    // which the key's range check refuses with the CLI's message.
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (!overflow) return std::int64_t{i};
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
      if (!PyErr_Occurred()) return std::uint64_t{u};
      PyErr_Clear();
    }
    const double d = PyLong_AsDouble(v.ptr());
    if (PyErr_Occurred()) PyErr_Clear();  // past double's range: its largest
    return std::isfinite(d) ? d : overflow * std::numeric_limits<double>::max();
  }
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::array>(v)) return provided.npy(py::reinterpret_borrow<py::array>(v), key);
  if (key == "weights" && is_mapping(v)) return provided.weights(v);
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    json list = json::array();
    for (const auto& item : v) list.push_back(to_json(key, item, provided, depth + 1));
    return list;
  }
  if (py::hasattr(v, "detach"))  // a torch tensor
    return provided.npy(py::array::ensure(v.attr("detach")().attr("cpu")().attr("numpy")()), key);
  if (py::hasattr(v, "__array__")) return provided.npy(py::array::ensure(v), key);
  throw mha::Error(mha::ErrorKind::invalid_input,
                   key + ": a " + std::string(py::str(v.get_type().attr("__name__"))) +
                       " cannot be a config value");
}

mha::Config make_config(const py::dict& kwargs, Provided& provided, const char* source) {
  json object = json::object();
  for (const auto& [k, v] : kwargs) {
    const std::string key = py::str(k);
    object[key] = to_json(key, v, provided);
  }
  mha::Config c;
  c.apply(object, source);
  return c;
}

mha::RunResult run_released(const mha::Config& c, std::vector<std::string>& warnings) {
  py::gil_scoped_release release;  // the compute runs without the GIL
  return mha::run(c, [&](const std::string& w) { warnings.push_back(w); });
}

void warn_all(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings) PyErr_WarnEx(PyExc_UserWarning, w.c_str(), 1);
}

bool is_torch(const py::handle& v) {
  return py::hasattr(v, "detach") && py::hasattr(v, "numpy");
}

// A call's query, key, value or memory as an array of the layer's dtype in C
// order: the caller's own buffer when it already is one (a CPU PyTorch tensor
// through .numpy() shares its memory), else converted once. `seq_first`
// reads a (T, B, F) array as (B, T, F) (a PyTorch module with batch_first False).
struct CallArray {
  py::array array;  // holds the buffer for the call
  mha::NpyView view;

  CallArray(const py::handle& v, const std::string& what, mha::DType dtype, bool seq_first) {
    py::object obj = py::reinterpret_borrow<py::object>(v);
    if (is_torch(obj)) obj = obj.attr("detach")().attr("cpu")().attr("numpy")();
    py::array a = py::array::ensure(obj);
    if (!a) throw mha::Error(mha::ErrorKind::invalid_input, what + ": expected a NumPy array");
    const char kind = a.dtype().kind();
    if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b')
      throw mha::Error(mha::ErrorKind::invalid_input,
                       what + ": arrays of dtype " + std::string(py::str(a.dtype())) +
                           " are not read; expected float16, float32, float64, bool, int32 or "
                           "int64");
    if (seq_first && a.ndim() == 3) a = a.attr("swapaxes")(0, 1);
    constexpr int flags = py::array::c_style | py::array::forcecast;
    array = dtype == mha::DType::f8 ? py::array(py::array_t<double, flags>::ensure(a))
                                    : py::array(py::array_t<float, flags>::ensure(a));
    view.data = array.data();
    view.dtype = dtype;
    for (py::ssize_t i = 0; i < array.ndim(); ++i)
      view.shape.push_back(static_cast<std::size_t>(array.shape(i)));
  }
};

// Keys a call may change: what the mask, the rotary positions and the maps
// depend on. Everything else (sizes, weights, dtype, ...) is the layer's own.
const std::set<std::string>& per_call_keys() {
  static const std::set<std::string> keys = {"mask",
                                             "mask_true_means",
                                             "key_padding_mask",
                                             "key_lengths",
                                             "key_lengths_file",
                                             "causal",
                                             "memory_key_lengths",
                                             "window",
                                             "alibi",
                                             "bias",
                                             "softcap",
                                             "masked_rows",
                                             "position_offset",
                                             "save_attention",
                                             "average_heads",
                                             "allow_nonfinite",
                                             "threads"};
  return keys;
}

py::array new_array(mha::DType dtype, const std::vector<std::size_t>& shape) {
  std::vector<py::ssize_t> s(shape.begin(), shape.end());
  return py::array(py::dtype(dtype == mha::DType::f8 ? "d" : "f"), s);
}

// mha.Layer: a mha::Layer and the in-memory inputs its config names (masks,
// weights), which live as long as it does.
class PyLayer {
 public:
  explicit PyLayer(py::dict config, bool seq_first = false, const char* source = "mha.Layer")
      : provided_(std::make_unique<Provided>()), seq_first_(seq_first) {
    for (const char* reserved : {"query", "key", "value", "memory", "out_dir", "repeat"})
      if (config.contains(reserved))
        throw mha::Error(
            mha::ErrorKind::invalid_input,
            std::string(reserved) + ": " +
                (std::string(reserved) == "out_dir" ? "a Layer writes no files (mha.run does)"
                 : std::string(reserved) == "repeat"
                     ? "a Layer times nothing (mha.run does; time the calls in Python)"
                     : "give it to the call, layer(query, key, value, memory=...)"));
    const mha::Config c = make_config(config, *provided_, source);
    // Sized when the config names the calls' sizes; else each call makes its mask.
    build(c, c.seq_len.has_value());
  }
  // attention(): a Layer planned on the call's own arrays.
  PyLayer(const mha::Config& c, std::unique_ptr<Provided> provided)
      : provided_(std::move(provided)) {
    build(c, true);
  }

  // (output, attention), and a decoder's cross-attention maps third when
  // `with_cross`.
  py::tuple call(const py::object& query, const py::object& key, const py::object& value,
                 const py::dict& per_call, bool with_cross = true) const {
    const mha::DType dtype = layer_->dtype();
    Provided provided;  // the call's own mask arrays
    std::optional<mha::Config> config;
    py::object memory = py::none();
    json changes = json::object();
    for (const auto& [k, v] : per_call) {
      const std::string name = py::str(k);
      if (name == "memory") {
        memory = py::reinterpret_borrow<py::object>(v);
        continue;
      }
      if (!per_call_keys().count(name))
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "layer call: key '" + name +
                             "' is the layer's own; build another mha.Layer to change it (a "
                             "call may change mask keys, position_offset, save_attention, "
                             "average_heads, allow_nonfinite and threads)");
      changes[name] = to_json(name, v, provided);
    }
    if (!changes.empty()) {
      config = layer_->config();
      config->apply(changes, "layer call");
    }
    std::optional<CallArray> q, k, v, m;
    std::unique_ptr<mha::Layer::Drawn> drawn;
    mha::Layer::Call call;
    if (query.is_none()) {
      drawn = layer_->draw_inputs();
      call = drawn->call;
    } else {
      q.emplace(query, "query", dtype, seq_first_);
      call.query = q->view;
    }
    if (!key.is_none()) k.emplace(key, "key", dtype, seq_first_), call.key = &k->view;
    if (!value.is_none() && value.is(key)) {
      call.value = call.key;
    } else if (!value.is_none()) {
      v.emplace(value, "value", dtype, seq_first_);
      call.value = &v->view;
    }
    if (!memory.is_none()) m.emplace(memory, "memory", dtype, seq_first_), call.memory = &m->view;
    call.config = config ? &*config : nullptr;
    const mha::Layer::Shapes shapes = layer_->shapes(call);
    py::array out = new_array(dtype, shapes.output);
    // An array for each map the call fills (none when its shape is empty), and its buffer. A
    // decoder's cross-attention maps are computed whenever its self-attention's are, as `mha
    // run` does (the exact path's output bits are then the run's).
    auto maps_for = [&](const std::vector<std::size_t>& shape, void*& buffer) -> py::object {
      if (shape.empty()) return py::none();
      py::array a = new_array(dtype, shape);
      buffer = a.mutable_data();
      return std::move(a);
    };
    void *attention = nullptr, *cross = nullptr;
    py::object maps = maps_for(shapes.attention, attention);
    py::object cross_maps = maps_for(shapes.cross_attention, cross);
    void* output = out.mutable_data();
    std::vector<std::string> warnings;
    {
      py::gil_scoped_release release;  // the compute runs without the GIL
      (*layer_)(call, output, attention, cross,
                [&](const std::string& w) { warnings.push_back(w); });
    }
    warn_all(warnings);
    const mha::Config& c = config ? *config : layer_->config();
    py::object result = out;
    if (c.output_dtype && *c.output_dtype != (dtype == mha::DType::f8 ? mha::OutputType::float64
                                                                      : mha::OutputType::float32)) {
      const char* name = *c.output_dtype == mha::OutputType::float16   ? "float16"
                         : *c.output_dtype == mha::OutputType::float32 ? "float32"
                                                                       : "float64";
      result = result.attr("astype")(name);
      if (!maps.is_none()) maps = maps.attr("astype")(name);
      if (!cross_maps.is_none()) cross_maps = cross_maps.attr("astype")(name);
    }
    if (seq_first_ && !layer_->config().attention_axes) result = result.attr("swapaxes")(0, 1);
    if (is_torch(query)) {
      py::object from_numpy = py::module_::import("torch").attr("from_numpy");
      result = from_numpy(result);
      if (!maps.is_none()) maps = from_numpy(maps);
      if (!cross_maps.is_none()) cross_maps = from_numpy(cross_maps);
    }
    if (layer_->config().layer == mha::LayerKind::decoder && with_cross)
      return py::make_tuple(result, maps, cross_maps);
    return py::make_tuple(result, maps);
  }

  py::dict config() const { return json_to_py(layer_->config().to_json()); }

 private:
  void build(const mha::Config& c, bool sized) {
    std::vector<std::string> warnings;
    {
      py::gil_scoped_release release;  // weights are converted without the GIL
      layer_ = std::make_shared<const mha::Layer>(
          c, [&](const std::string& w) { warnings.push_back(w); }, sized);
    }
    provided_->release_weights();
    warn_all(warnings);
  }

  std::unique_ptr<Provided> provided_;
  std::shared_ptr<const mha::Layer> layer_;
  bool seq_first_ = false;
};

// mha.Layer.from_torch(module): the config and weights of a PyTorch
// nn.MultiheadAttention, nn.TransformerEncoderLayer or
// nn.TransformerDecoderLayer, read off the module as it is (eval mode is
// assumed: dropout is not applied). Keywords override or add config keys.
PyLayer from_torch(const py::object& module, const py::kwargs& kwargs) {
  const py::module_ nn = py::module_::import("torch.nn");
  const py::module_ F = py::module_::import("torch.nn.functional");
  const py::module_ torch = py::module_::import("torch");
  auto fail = [](const std::string& message) {
    throw mha::Error(mha::ErrorKind::invalid_input, "mha.Layer.from_torch: " + message);
  };
  auto isinstance = [&](const py::handle& o, const char* name) {
    return py::isinstance(o, nn.attr(name));
  };
  py::dict config;
  py::object attn;
  if (isinstance(module, "MultiheadAttention")) {
    attn = module;
  } else if (isinstance(module, "TransformerEncoderLayer") ||
             isinstance(module, "TransformerDecoderLayer")) {
    const bool decoder = isinstance(module, "TransformerDecoderLayer");
    attn = module.attr("self_attn");
    config["layer"] = decoder ? "decoder" : "encoder";
    config["d_ff"] = module.attr("linear1").attr("out_features");
    config["norm_first"] = module.attr("norm_first");
    config["layer_norm_eps"] = module.attr("norm1").attr("eps");
    const py::object act = module.attr("activation");
    if (act.is(F.attr("relu")) || isinstance(act, "ReLU"))
      config["activation"] = "relu";
    else if (act.is(F.attr("gelu")) ||
             (isinstance(act, "GELU") &&
              py::str(act.attr("approximate")).cast<std::string>() == "none"))
      config["activation"] = "gelu";
    else if (isinstance(act, "GELU"))
      config["activation"] = "gelu_tanh";
    else
      fail("activation " + std::string(py::repr(act)) + " is not relu or gelu");
    // PyTorch's layer masks nothing unless a tgt_mask is given to the call.
    if (decoder) config["causal"] = false;
  } else {
    fail(
        "expected nn.MultiheadAttention, nn.TransformerEncoderLayer or "
        "nn.TransformerDecoderLayer, got " +
        std::string(py::str(module.get_type().attr("__name__"))));
  }
  if (!attn.attr("bias_k").is_none()) fail("add_bias_kv=True is not supported");
  if (attn.attr("add_zero_attn").cast<bool>()) fail("add_zero_attn=True is not supported");
  config["h"] = attn.attr("num_heads");
  config["d_model"] = attn.attr("embed_dim");
  if (!config.contains("layer")) {
    config["kdim"] = attn.attr("kdim");
    config["vdim"] = attn.attr("vdim");
  }
  config["weights"] = module.attr("state_dict")();
  for (const auto& p : module.attr("parameters")()) {
    if (p.attr("dtype").is(torch.attr("float64"))) config["dtype"] = "float64";
    break;
  }
  for (const auto& [k, v] : kwargs) config[k] = v;
  return PyLayer(config, !attn.attr("batch_first").cast<bool>(), "mha.Layer.from_torch");
}

// mha.attention's last layer, reused by the next call when that call has the
// same keywords, the same input shapes and dtypes, and weights that are the
// same PyTorch tensors' memory, unmodified: their version counters, which
// every in-place PyTorch operation raises (an optimizer step included), are
// unchanged. The entry holds the tensors, so their memory cannot be freed and
// reused by others while it stands. Converting a state_dict again would cost
// about as much as the call itself on small inputs. Anything else (NumPy
// weights, which have no version counter; mask arrays) builds a new layer.
struct AttentionCache {
  std::mutex mutex;
  std::string key;
  py::list held;  // the weight tensors of `key`
  std::shared_ptr<const PyLayer> layer;
};

AttentionCache& attention_cache() {
  static auto* cache = new AttentionCache;  // never destroyed: it holds Python objects
  return *cache;
}

// The cache key of a call, or nothing when it may not be cached; `held`
// gets the tensors the key names.
std::optional<std::string> attention_key(const py::dict& config,
                                         const std::vector<const CallArray*>& inputs,
                                         bool value_is_key, py::list& held) {
  std::string key = value_is_key ? "value_is_key|" : "|";
  auto scalar = [](const py::handle& v) {
    return v.is_none() || py::isinstance<py::bool_>(v) || py::isinstance<py::int_>(v) ||
           py::isinstance<py::float_>(v) || py::isinstance<py::str>(v);
  };
  for (const auto& [k, v] : config) {
    const std::string name = py::str(k);
    key += name + "=";
    if (scalar(v)) {
      key += std::string(py::repr(v));
    } else if ((py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v))) {
      for (const auto& item : v) {
        if (!scalar(item)) return std::nullopt;
        key += std::string(py::repr(item)) + ",";
      }
    } else if (name == "weights" && is_mapping(v)) {
      for (const auto& n : v.attr("keys")()) {
        const py::object t = v.attr("__getitem__")(n);
        if (!is_torch(t) || !py::hasattr(t, "_version")) return std::nullopt;
        held.append(t);
        key += std::string(py::str(n)) + ":" + std::string(py::str(t.attr("data_ptr")())) + ":" +
               std::string(py::str(t.attr("_version"))) + ":" +
               std::string(py::str(t.attr("dtype"))) + ":" +
               std::string(py::str(py::tuple(t.attr("shape")))) + ":" +
               std::string(py::str(t.attr("stride")())) + ";";
      }
    } else {
      return std::nullopt;
    }
    key += "|";
  }
  for (const CallArray* in : inputs) {
    key += "input:";
    if (in)
      for (std::size_t n : in->view.shape) key += std::to_string(n) + ",";
  }
  return key;
}

py::tuple attention(const py::object& query, const py::object& key, const py::object& value,
                    py::kwargs kwargs) {
  py::dict config;
  for (const auto& [k, v] : kwargs) config[k] = v;
  for (const char* reserved : {"query", "key", "value", "out_dir", "repeat"})
    if (config.contains(reserved))
      throw mha::Error(mha::ErrorKind::invalid_input,
                       std::string(reserved) + ": give it as " +
                           (std::string(reserved) == "out_dir" || std::string(reserved) == "repeat"
                                ? "mha.run's config (attention() writes no files and times nothing)"
                                : "a positional argument"));
  // The inputs in the compute dtype, planned as they will be called.
  mha::DType dtype = mha::DType::f4;
  if (config.contains("dtype") && py::isinstance<py::str>(config["dtype"]) &&
      py::str(config["dtype"]).cast<std::string>() == "float64")
    dtype = mha::DType::f8;
  const bool value_is_key = !value.is_none() && value.is(key);
  std::optional<CallArray> q, k, v;
  if (!query.is_none()) q.emplace(query, "query", dtype, false);
  if (!key.is_none()) k.emplace(key, "key", dtype, false);
  if (!value.is_none() && !value_is_key) v.emplace(value, "value", dtype, false);
  py::dict per_call;
  if (config.contains("memory") && !config["memory"].is_none())
    per_call["memory"] = config["memory"];
  // The arrays the plan saw; inputs it drew from the seed are drawn again
  // (the same bits) for the call.
  auto call = [&](const PyLayer& layer) {
    return layer.call(q ? py::object(q->array) : py::none(), k ? py::object(k->array) : py::none(),
                      value_is_key ? (k ? py::object(k->array) : py::none())
                                   : (v ? py::object(v->array) : py::none()),
                      per_call, /*with_cross=*/false);
  };
  py::list held;
  const std::optional<std::string> cache_key = attention_key(
      config, {q ? &*q : nullptr, k ? &*k : nullptr, v ? &*v : nullptr}, value_is_key, held);
  AttentionCache& cache = attention_cache();
  if (cache_key) {
    std::shared_ptr<const PyLayer> layer;
    {
      std::lock_guard<std::mutex> lock(cache.mutex);
      if (cache.layer && cache.key == *cache_key) layer = cache.layer;
    }
    if (layer) return call(*layer);
  }
  // The inputs are registered for the plan only: the built layer does not read them.
  Provided inputs;
  if (q) config["query"] = inputs.input(q->array, "query");
  if (k) config["key"] = inputs.input(k->array, "key");
  if (value_is_key) config["value"] = config["key"];
  if (v) config["value"] = inputs.input(v->array, "value");
  auto provided = std::make_unique<Provided>();
  const mha::Config c = make_config(config, *provided, "mha.attention");
  auto layer = std::make_shared<const PyLayer>(c, std::move(provided));
  if (cache_key) {
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.key = *cache_key;
    cache.held = held;
    cache.layer = layer;
  }
  return call(*layer);
}

py::object run(const py::dict& config) {
  Provided provided;
  const mha::Config c = make_config(config, provided, "mha.run");
  std::vector<std::string> warnings;
  mha::RunResult r = run_released(c, warnings);
  warn_all(warnings);
  return json_to_py(mha::to_json(r.report));  // the dict of run.json
}

mha::WeightsFormat layout(const std::string& name) {
  if (name == "native") return mha::WeightsFormat::native;
  if (name == "torch") return mha::WeightsFormat::torch;
  if (name == "keras") return mha::WeightsFormat::keras;
  if (name == "auto") return mha::WeightsFormat::auto_detect;
  throw mha::Error(mha::ErrorKind::invalid_input,
                   "to: expected 'native', 'torch' or 'keras', got '" + name + "'");
}

py::dict convert_weights(const py::object& weights, const std::string& to, const std::string& from,
                         std::optional<mha_python::Int> given_h) {
  // As `mha weights convert --h` takes it (its flag's range, checked by CLI11 there).
  if (given_h && (*given_h < 1 || *given_h > 1073741824))
    throw mha::Error(mha::ErrorKind::invalid_input, "--h: Value " + std::to_string(given_h->value) +
                                                        " not in range 1 to 1073741824");
  const std::optional<std::size_t> h =
      given_h ? std::optional<std::size_t>(static_cast<std::size_t>(given_h->value)) : std::nullopt;
  const bool mapping = is_mapping(weights);
  const std::map<std::string, mha::NpyArray> arrays =
      mapping ? arrays_of(weights) : mha::read_weight_arrays(py::str(weights));
  const std::string what = mapping ? "weights" : std::string(py::str(weights));
  const bool layers = mha::has_layer_names(arrays);
  const mha::NativeWeights native = layers
                                        ? mha::layer_weights_to_native(arrays, layout(from), what)
                                        : mha::to_native(arrays, layout(from), what);
  const auto out = layers ? mha::layer_weights_from_native(native.arrays, layout(to), what)
                          : mha::from_native(native.arrays, layout(to), h ? h : native.h, what);
  py::dict result;
  for (const auto& [name, array] : out) result[py::str(name)] = to_numpy(array);
  return result;
}

}  // namespace

void mha_python::add_layer(py::module_& m) {
  py::class_<PyLayer>(m, "Layer",
                      "Layer(**config)\n\nMulti-head attention (or Transformer layers, with "
                      "layer='encoder'/'decoder') built once: every keyword is a config key of "
                      "`mha run` (docs/config.md); weights= a dict of arrays (native, PyTorch or "
                      "Keras names), a path, or omitted for seeded weights. Call it on arrays.")
      .def(py::init([](py::kwargs kwargs) { return PyLayer(py::dict(kwargs)); }))
      .def(
          "__call__",
          [](const PyLayer& self, const py::object& query, const py::object& key,
             const py::object& value,
             py::kwargs per_call) { return self.call(query, key, value, per_call); },
          py::arg("query") = py::none(), py::arg("key") = py::none(), py::arg("value") = py::none(),
          "layer(query, key=None, value=None, *, memory=None, **per_call) -> (output, "
          "attention), or (output, attention, cross_attention) for a decoder\n\nRuns the layer on "
          "(B, T, d_model) arrays (NumPy or PyTorch, "
          "used in place when C-contiguous in the layer's dtype) and returns the output and, "
          "with save_attention, the maps as new arrays the library filled (PyTorch tensors "
          "for a tensor query). Keywords may change mask keys, position_offset, "
          "save_attention, average_heads, allow_nonfinite and threads for this call.")
      .def_property_readonly("config", &PyLayer::config, "The config as planned (a dict).")
      .def_static("from_torch", &from_torch, py::arg("module"),
                  "Layer.from_torch(module, **config) -> Layer\n\nThe layer of a PyTorch "
                  "nn.MultiheadAttention, nn.TransformerEncoderLayer or "
                  "nn.TransformerDecoderLayer, with its weights; it takes inputs in the "
                  "module's own layout (batch_first or not).");
  m.def("attention", &attention, py::arg("query") = py::none(), py::arg("key") = py::none(),
        py::arg("value") = py::none(),
        "attention(query=None, key=None, value=None, *, h, weights=None, **config)\n\n"
        "One call of a Layer built for these arrays (no file is touched). Runs multi-head "
        "attention (or Transformer layers, with layer='encoder'/'decoder') on "
        "NumPy arrays and returns (output, attention): attention is the maps when "
        "save_attention=True, else None. Every keyword is a config key of `mha run` "
        "(docs/config.md); arrays may stand for any file key (mask, bias, memory, ...), and "
        "weights may be a dict of arrays in native, PyTorch or Keras names, or a path. Raises "
        "ValueError with the CLI's message on bad input.");
  m.def("run", &run, py::arg("config"),
        "run(config: dict) -> dict\n\nExactly `mha run`: writes output.npy, run.json and the "
        "rest into config['out_dir'] (default 'out') and returns run.json as a dict. Arrays "
        "may stand for file keys.");
  m.def("convert_weights", &convert_weights, py::arg("weights"), py::arg("to"),
        py::arg("from_") = "auto", py::arg("h") = py::none(),
        "convert_weights(weights, to, from_='auto', h=None) -> dict\n\nThe weights (a dict of "
        "arrays or a path) in another layout: 'native', 'torch' or 'keras' (keras needs h), "
        "exactly, as `mha weights convert`.");
}
