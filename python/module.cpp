// The Python module `mha` (docs/python.md): the library on NumPy arrays.
//
//   import mha, numpy as np
//   layer = mha.Layer(h=8, d_model=512, causal=True)   # planned, weights converted once
//   out, att = layer(np.random.rand(2, 5, 512).astype("f4"), save_attention=True)
//   out, att = mha.attention(np.random.rand(2, 5, 16).astype("f4"), h=4)  # a one-shot Layer
//
// Every keyword is a config key of `mha run` (docs/config.md), checked by the
// same code with the same messages. Arrays (masks, weights) are handed to the
// plan as in-memory inputs (mha/io/provided_input.hpp); a Layer (mha/run/layer.hpp)
// computes on the caller's arrays in place and fills NumPy arrays allocated
// here, without the GIL and without touching a file. run() is exactly `mha
// run`: plan, load, compute, write. mha::Error becomes ValueError (bad input)
// or OSError (anything else).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/ablation.hpp"
#include "mha/checkpoint/attention_analysis.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/checkpoint/lens.hpp"
#include "mha/checkpoint/seq2seq.hpp"
#include "mha/checkpoint/seq2seq_analysis.hpp"
#include "mha/checkpoint/site_hooks.hpp"
#include "mha/io/image.hpp"
#include "mha/io/json_file.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/model/config.hpp"
#include "mha/model/layer_weights.hpp"
#include "mha/model/memory.hpp"
#include "mha/model/weight_formats.hpp"
#include "mha/model/weights.hpp"
#include "mha/run/analyze.hpp"
#include "mha/run/layer.hpp"
#include "mha/run/model_options.hpp"
#include "mha/run/model_run.hpp"
#include "mha/run/run.hpp"
#include "mha/run/run_json.hpp"
#include "module.hpp"

namespace py = pybind11;
using nlohmann::json;

mha::NpyArray mha_python::to_npy(const py::array& in, const std::string& what) {
  const py::array a = py::array::ensure(in, py::array::c_style);
  if (!a) throw mha::Error(mha::ErrorKind::invalid_input, what + ": expected a NumPy array");
  mha::NpyArray out;
  const char kind = a.dtype().kind();
  const std::size_t item = static_cast<std::size_t>(a.itemsize());
  if (kind == 'f' && item == 2)
    out.dtype = mha::DType::f2;
  else if (kind == 'f' && item == 4)
    out.dtype = mha::DType::f4;
  else if (kind == 'f' && item == 8)
    out.dtype = mha::DType::f8;
  else if (kind == 'b')
    out.dtype = mha::DType::b1;
  else if (kind == 'i' && item == 4)
    out.dtype = mha::DType::i4;
  else if (kind == 'i' && item == 8)
    out.dtype = mha::DType::i8;
  else if (kind == 'u' && item == 1)
    out.dtype = mha::DType::u1;
  else
    throw mha::Error(
        mha::ErrorKind::invalid_input,
        what + ": arrays of dtype " + std::string(py::str(a.dtype())) +
            " are not read; expected float16, float32, float64, bool, int32, int64 or uint8");
  if (a.dtype().byteorder() == '>')
    throw mha::Error(
        mha::ErrorKind::invalid_input,
        what + ": a big-endian array; use array.astype(array.dtype.newbyteorder('='))");
  for (py::ssize_t i = 0; i < a.ndim(); ++i)
    out.shape.push_back(static_cast<std::size_t>(a.shape(i)));
  const auto* p = static_cast<const unsigned char*>(a.data());
  out.data.assign(p, p + static_cast<std::size_t>(a.nbytes()));
  return out;
}

bool mha_python::int_value(py::handle src, std::int64_t& out) {
  // An int or anything with __index__ (a NumPy integer); not a float.
  if (!src || PyFloat_Check(src.ptr()) || !PyIndex_Check(src.ptr())) return false;
  const py::object n = py::reinterpret_steal<py::object>(PyNumber_Index(src.ptr()));
  if (!n) {
    PyErr_Clear();
    return false;
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  out = overflow > 0   ? std::numeric_limits<std::int64_t>::max()
        : overflow < 0 ? std::numeric_limits<std::int64_t>::min()
                       : std::int64_t{v};
  return true;
}

namespace {

using mha_python::to_npy;

py::array to_numpy(const mha::NpyArray& a) {
  std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end());
  const char* format = a.dtype == mha::DType::f2 ? "e" : a.dtype == mha::DType::f8 ? "d" : "f";
  py::array out(py::dtype(format), shape);
  std::memcpy(out.mutable_data(), a.data.data(), a.data.size());
  return out;
}

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

py::object json_to_py(const json& j) {
  return py::module_::import("json").attr("loads")(mha::dump_json(j));
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

// mha.Model: a whole checkpoint (mha/run/model_run.hpp) called on text or ids.
// An encoder-decoder's target: `target_text=` (the CLI's --target_text; a text, texts or ids),
// or its older spelling (`target=` of a call, `labels=` of an analysis); not both.
py::object target_of(const py::object& target_text, const py::object& alias, const char* name) {
  if (!target_text.is_none() && !alias.is_none())
    throw mha::Error(mha::ErrorKind::invalid_input,
                     std::string("target_text and ") + name +
                         " name the same thing (an encoder-decoder's target): give one");
  return target_text.is_none() ? alias : target_text;
}

class PyModel {
 public:
  // max_memory: a number of bytes, read as `--max_memory` reads one.
  PyModel(const std::string& dir, std::optional<mha_python::Int> max_memory,
          const std::string& dtype)
      : model_(dir, mha::parse_model_dtype(dtype)),
        max_memory_(max_memory
                        ? mha::parse_byte_size(std::to_string(max_memory->value), "--max_memory")
                        : mha::default_max_memory()) {}

  // A Python str as UTF-8; a lone surrogate (which UTF-8 cannot hold) is bad input.
  static std::string utf8_text(const py::handle& t, std::size_t i) {
    PyObject* bytes = PyUnicode_AsUTF8String(t.ptr());
    if (!bytes) {
      PyErr_Clear();
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "input: text #" + std::to_string(i + 1) +
                           " is not valid Unicode (it holds a lone surrogate)");
    }
    std::string s(PyBytes_AS_STRING(bytes), static_cast<std::size_t>(PyBytes_GET_SIZE(bytes)));
    Py_DECREF(bytes);
    return s;
  }

  // An image model's input: a path (PNG or JPEG), a uint8 array (H, W, 3), or
  // a list of them, through the CLI's reader and image processor.
  mha::ModelInput images_of(const py::object& input) const {
    const bool many = py::isinstance<py::list>(input) || py::isinstance<py::tuple>(input);
    mha::check_image_batch(model_, many ? py::len(input) : 1, max_memory_);
    std::vector<mha::RgbImage> images;
    std::vector<std::string> names;
    const std::uint64_t limit = mha::image_byte_limit(max_memory_);
    auto one = [&](const py::handle& x) {
      if (py::isinstance<py::str>(x)) {
        names.push_back(x.cast<std::string>());
        images.push_back(mha::read_image(names.back(), limit));
        return;
      }
      const py::array a = py::array::ensure(x);
      if (!a || a.dtype().kind() != 'u' || a.itemsize() != 1 || a.ndim() != 3 || a.shape(2) != 3)
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "input: expected an image as a path (PNG or JPEG) or a uint8 array of "
                         "shape (H, W, 3), or a list of them");
      // The size from the shape, before the C-order copy (a strided view's copy can be the
      // whole size it claims: 4.8 GB for a (40000, 40000, 3) view of one row).
      mha::RgbImage im;
      im.height = static_cast<std::size_t>(a.shape(0));
      im.width = static_cast<std::size_t>(a.shape(1));
      if (im.height == 0 || im.width == 0 || im.height > mha::kMaxImageSide ||
          im.width > mha::kMaxImageSide || im.width * im.height > mha::kMaxImagePixels ||
          im.width * im.height * 3 > limit)
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "input: an image array of " + std::to_string(im.height) + " x " +
                             std::to_string(im.width) + " pixels; expected 1 to " +
                             std::to_string(mha::kMaxImagePixels) + " pixels (at most " +
                             std::to_string(mha::kMaxImageSide) + " a side) within max_memory");
      const auto pixels = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>(a);
      im.format = "array";
      im.rgb.assign(pixels.data(), pixels.data() + pixels.size());
      images.push_back(std::move(im));
      names.emplace_back();
    };
    if (py::isinstance<py::list>(input) || py::isinstance<py::tuple>(input)) {
      for (const py::handle& x : input) one(x);
    } else {
      one(input);
    }
    return model_.encode_images(images, names);
  }

  // Per row, (id, display text or None without a tokenizer, p); an image
  // classifier's (class, label, p). None when empty.
  py::object top_k_list(const std::vector<std::vector<mha::NextToken>>& rows) const {
    if (rows.empty()) return py::none();
    py::list top;
    const mha::ModelConfig& c = model_.config();
    const auto& tok = model_.tokenizer();
    for (const auto& row : rows) {
      py::list l;
      for (const mha::NextToken& t : row) {
        py::object name = py::none();
        if (c.classifier)
          name = py::str(c.labels.at(std::size_t(t.id)));
        else if (tok)
          name = py::str(model_.token_name(t.id));
        l.append(py::make_tuple(t.id, name, t.p));
      }
      top.append(l);
    }
    return top;
  }

  // A text, a list of texts (right-padded) or token ids (T) or (B, T).
  mha::ModelInput input_of(const py::object& input) const {
    mha::ModelInput in;
    if (model_.config().image_input()) return images_of(input);
    if (py::isinstance<py::str>(input)) {
      in = model_.encode({utf8_text(input, 0)});
    } else if (py::isinstance<py::list>(input) || py::isinstance<py::tuple>(input)) {
      std::vector<std::string> texts;
      for (const py::handle& t : input) {
        if (!py::isinstance<py::str>(t))
          throw mha::Error(mha::ErrorKind::invalid_input,
                           "input: expected a text, a list of texts or an array of token ids");
        texts.push_back(utf8_text(t, texts.size()));
      }
      in = model_.encode(texts);
    } else {
      const py::array a = py::array::ensure(input);
      if (!a || a.dtype().kind() != 'i' || (a.ndim() != 1 && a.ndim() != 2))
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "input: expected a text, a list of texts or integer token ids of shape "
                         "(T) or (B, T)");
      if (a.dtype().kind() == 'u' && a.itemsize() == 8)
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "input: expected signed integer token ids, got uint64");
      const auto ids64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>(a);
      const std::vector<std::int64_t> ids(ids64.data(), ids64.data() + ids64.size());
      const std::size_t B = a.ndim() == 1 ? 1 : static_cast<std::size_t>(a.shape(0));
      in = model_.ids(std::move(ids), B, static_cast<std::size_t>(a.shape(a.ndim() - 1)), "input");
    }
    return in;
  }

  // run_with_cache and run_with_hooks (sites.cpp): a plain call with the
  // hook `make` returns added to its pass.
  static py::dict call_with_hook(py::handle self, const py::object& input,
                                 const py::object& target_text, bool attention,
                                 const mha_python::SiteHookMaker& make) {
    const PyModel& m = self.cast<const PyModel&>();
    m.site_hook_ = &make;  // taken by the call below, before anything else
    return m.call(input, attention, false, std::nullopt, std::nullopt, 5, 0, false, py::none(),
                  target_text);
  }

  py::dict call(const py::object& input, bool attention, bool hidden_states,
                const mha_python::Indices& layers, const mha_python::Indices& heads,
                mha_python::Int top_k, mha_python::Int threads, bool qk,
                const py::object& target_alias, const py::object& target_text) const {
    const mha_python::SiteHookMaker* make = site_hook_;
    site_hook_ = nullptr;
    const py::object target = target_of(target_text, target_alias, "target");
    const mha::ModelConfig& c = model_.config();
    if (c.encoder_decoder || !target.is_none())
      return call_seq2seq(input, target, attention, hidden_states, layers, heads, top_k, threads,
                          qk, make);
    // The options first, checked as the CLI checks them (mha::check_model_call).
    const mha::ModelCall options =
        mha::check_model_call(c, {attention, layers, heads, top_k, threads});
    if (qk && !attention)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "qk=True returns the queries and keys of the maps returned: give "
                       "attention=True too");
    mha::ModelInput in = input_of(input);
    const std::size_t B = in.B, T = in.T, d = c.d_model;
    mha::ForwardOptions fo;
    fo.threads = options.threads;
    fo.top_k = options.top_k;
    py::array_t<float> maps, hidden;
    // The arrays returned live in memory: with the forward's own, they must fit max_memory.
    std::uint64_t bytes = mha::forward_memory(c, model_.checkpoint().layer_float32_bytes(), B, T,
                                              mha::resolve_threads(options.threads));
    mha::HookList hooks;
    const std::vector<std::size_t>&map_layers = options.map_layers, &map_heads = options.map_heads;
    if (attention) {
      const std::size_t Ls = map_layers.size(), Hs = map_heads.size();
      bytes += std::uint64_t{4} * Ls * B * Hs * T * T;
    }
    if (hidden_states) bytes += std::uint64_t{4} * (c.num_layers + 1) * B * T * d;
    if (qk) bytes += std::uint64_t{8} * map_layers.size() * B * map_heads.size() * T * c.head_dim;
    if (bytes > max_memory_)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "the call needs about " + mha::format_bytes(double(bytes)) +
                           " (the maps of every chosen layer and head, the hidden states, the "
                           "forward), over max_memory " +
                           mha::format_bytes(double(max_memory_)) +
                           "; choose layer_indices= and head_indices=, or attention=False");
    const std::size_t Hs = map_heads.size();
    float* m = nullptr;
    if (attention) {
      maps = py::array_t<float>(std::vector<py::ssize_t>{py::ssize_t(map_layers.size()),
                                                         py::ssize_t(B), py::ssize_t(Hs),
                                                         py::ssize_t(T), py::ssize_t(T)});
      m = maps.mutable_data();
    }
    mha::MapHook map_hook(
        c.h, map_layers, map_heads,
        [m, B, Hs, T](mha::MapKind, std::size_t slot, std::size_t b, std::size_t head,
                      std::size_t t0, std::size_t rows, const float* block) {
          std::memcpy(m + (((slot * B + b) * Hs + head) * T + t0) * T, block,
                      rows * T * sizeof(float));
        });
    if (attention) hooks.add(&map_hook);
    py::array_t<float> q, k;
    float *qd = nullptr, *kd = nullptr;
    if (qk) {  // (layers, B, heads, T, head_dim) each, as q.npy and k.npy
      const std::vector<py::ssize_t> shape{py::ssize_t(map_layers.size()), py::ssize_t(B),
                                           py::ssize_t(Hs), py::ssize_t(T),
                                           py::ssize_t(c.head_dim)};
      q = py::array_t<float>(shape);
      k = py::array_t<float>(shape);
      qd = q.mutable_data();
      kd = k.mutable_data();
    }
    const std::size_t block = T * c.head_dim;
    mha::QKHook qk_hook(map_layers, [&](std::size_t slot, const float* Q, std::size_t ldq,
                                        const float* K, std::size_t ldk) {
      mha::qk_blocks(model_.config(), map_heads, B, T, slot, Q, ldq, K, ldk,
                     [&](bool key, std::uint64_t first, const float* values) {
                       std::copy_n(values, block, (key ? kd : qd) + first);
                     });
    });
    if (qk) hooks.add(&qk_hook);
    float* h = nullptr;
    if (hidden_states) {
      hidden = py::array_t<float>(std::vector<py::ssize_t>{
          py::ssize_t(c.num_layers + 1), py::ssize_t(B), py::ssize_t(T), py::ssize_t(d)});
      h = hidden.mutable_data();
    }
    mha::HiddenHook hidden_hook(model_.checkpoint(),
                                [h, B, T, d](mha::Stack, std::size_t i, const float* x) {
                                  std::memcpy(h + i * B * T * d, x, B * T * d * sizeof(float));
                                });
    if (hidden_states) hooks.add(&hidden_hook);
    if (make) hooks.add((*make)(c, B, T, 0, max_memory_ - std::min(bytes, max_memory_)));
    fo.hook = hooks.empty() ? nullptr : &hooks;
    mha::ForwardResult r;
    std::vector<float> embeddings;  // an image model's pass starts from its patch embeddings
    {
      py::gil_scoped_release release;  // the forward runs without the GIL
      if (c.image_input()) {
        embeddings.resize(B * T * d);
        model_.checkpoint().embed_patches(in.pixels.data(), B, embeddings.data());
        fo.first_hidden = embeddings.data();
      }
      r = mha::forward(model_.checkpoint(), in.ids.data(), B, T, in.lengths, fo);
      mha::check_finite_output(r, model_.checkpoint().dir());
      if (in.tokens.empty()) model_.name_tokens(in);  // ids given: their strings
    }
    py::array_t<float> output(
        std::vector<py::ssize_t>{py::ssize_t(B), py::ssize_t(T), py::ssize_t(d)});
    std::memcpy(output.mutable_data(), r.output.data(), r.output.size() * sizeof(float));
    py::array_t<std::int32_t> ids(std::vector<py::ssize_t>{py::ssize_t(B), py::ssize_t(T)});
    std::memcpy(ids.mutable_data(), in.ids.data(), in.ids.size() * sizeof(std::int32_t));
    py::dict out;
    out["ids"] = ids;
    out["lengths"] = in.lengths;
    py::list tokens, pieces;  // display texts and tokenizer.json's pieces, padding excluded
    for (std::size_t b = 0; b < B; ++b) {
      const auto end = static_cast<std::ptrdiff_t>(in.lengths[b]);
      tokens.append(std::vector<std::string>(in.tokens[b].begin(), in.tokens[b].begin() + end));
      pieces.append(std::vector<std::string>(in.pieces[b].begin(), in.pieces[b].begin() + end));
    }
    out["tokens"] = tokens;
    out["pieces"] = pieces;
    out["output"] = output;
    if (!in.images.empty()) {  // (B, H, W, 3) uint8: the images as the model sees them
      py::array_t<std::uint8_t> seen(std::vector<py::ssize_t>{
          py::ssize_t(B), py::ssize_t(c.image_height), py::ssize_t(c.image_width), 3});
      std::memcpy(seen.mutable_data(), in.images.data(), in.images.size());
      out["images"] = seen;
      out["patch_grid"] = std::vector<std::size_t>{c.patch_rows(), c.patch_cols()};
    }
    out["attention"] = attention ? py::object(maps) : py::none();
    if (attention) {  // which layers and heads the maps' axes hold, and how q and k give them
      out["layer_indices"] = map_layers;
      out["head_indices"] = map_heads;
      out["attention_info"] = json_to_py(mha::attention_json(c, map_layers, map_heads));
    }
    out["q"] = qk ? py::object(q) : py::none();
    out["k"] = qk ? py::object(k) : py::none();
    out["hidden_states"] = hidden_states ? py::object(hidden) : py::none();
    out["top_k"] = top_k_list(r.top_k);
    return out;
  }

  // An encoder-decoder's call (T5, BART), as `mha run --model --text --target_text`
  // (run/seq2seq_run.cpp): the three kinds of maps, both sides' tokens.
  py::dict call_seq2seq(const py::object& input, const py::object& target, bool attention,
                        bool hidden_states, const mha_python::Indices& layers,
                        const mha_python::Indices& heads, mha_python::Int top_k,
                        mha_python::Int threads, bool qk,
                        const mha_python::SiteHookMaker* make = nullptr) const {
    const mha::ModelConfig& c = model_.config();
    const std::string& dir = model_.checkpoint().dir();
    if (!c.encoder_decoder)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "target_text=: a " + c.model_type + " (" + dir +
                           ") is not an encoder-decoder; a target is for T5 and BART checkpoints");
    if (target.is_none())
      throw mha::Error(
          mha::ErrorKind::invalid_input,
          dir + ": a " + c.model_type +
              " is an encoder-decoder; give the decoder's side as target_text= (a text, "
              "a list of texts or token ids)");
    if (qk)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "qk=True: not supported for encoder-decoder models");
    const mha::ModelCall options =
        mha::check_seq2seq_call(c, {attention, layers, heads, top_k, threads});
    mha::ModelInput in = input_of(input);
    const mha::ModelInput labels = input_of(target);
    if (labels.B != in.B)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "target: " + std::to_string(labels.B) + " target rows for " +
                           std::to_string(in.B) + " source rows; expected one target per source");
    const std::size_t B = in.B, S = in.T, T = labels.T, d = c.d_model;
    mha::ForwardOptions so;
    so.threads = options.threads;
    so.top_k = options.top_k;
    const std::vector<std::size_t>&map_layers = options.map_layers, &map_heads = options.map_heads;
    auto count = [&](std::size_t n) {  // the selected layers a stack of n has
      return static_cast<std::size_t>(std::lower_bound(map_layers.begin(), map_layers.end(), n) -
                                      map_layers.begin());
    };
    const std::size_t Le = count(c.num_layers), Ld = count(c.num_decoder_layers),
                      Hs = map_heads.size();
    mha::HookList hooks;
    std::uint64_t bytes = mha::seq2seq_memory(c, model_.checkpoint().layer_float32_bytes(), B, S, T,
                                              mha::resolve_threads(options.threads));
    if (attention) bytes += std::uint64_t{4} * B * Hs * (Le * S * S + Ld * T * (T + S));
    if (hidden_states)
      bytes +=
          std::uint64_t{4} * B * d *
          ((std::uint64_t{c.num_layers} + 1) * S + (std::uint64_t{c.num_decoder_layers} + 1) * T);
    check_memory(bytes, "the call");
    py::array_t<float> maps[3];
    float* data[3] = {nullptr, nullptr, nullptr};
    if (attention) {
      const std::size_t shapes[3][3] = {{Le, S, S}, {Ld, T, T}, {Ld, T, S}};
      for (int i = 0; i < 3; ++i) {
        maps[i] = py::array_t<float>(
            std::vector<py::ssize_t>{py::ssize_t(shapes[i][0]), py::ssize_t(B), py::ssize_t(Hs),
                                     py::ssize_t(shapes[i][1]), py::ssize_t(shapes[i][2])});
        data[i] = maps[i].mutable_data();
      }
    }
    mha::MapHook map_hook(
        c.h, map_layers, map_heads,
        [&data, B, Hs, S, T](mha::MapKind kind, std::size_t slot, std::size_t b, std::size_t head,
                             std::size_t t0, std::size_t rows, const float* block) {
          const std::size_t queries = kind == mha::MapKind::encoder ? S : T,
                            keys = kind == mha::MapKind::decoder ? T : S;
          std::memcpy(
              data[static_cast<int>(kind)] + (((slot * B + b) * Hs + head) * queries + t0) * keys,
              block, rows * keys * sizeof(float));
        });
    if (attention) hooks.add(&map_hook);
    // Each stack's hidden states (layers + 1, B, L, d): the encoder's, the decoder's.
    py::array_t<float> hidden[2];
    float* states[2] = {nullptr, nullptr};
    if (hidden_states) {
      const std::size_t layers[2] = {c.num_layers, c.num_decoder_layers}, lengths[2] = {S, T};
      for (int i = 0; i < 2; ++i) {
        hidden[i] = py::array_t<float>(std::vector<py::ssize_t>{
            py::ssize_t(layers[i] + 1), py::ssize_t(B), py::ssize_t(lengths[i]), py::ssize_t(d)});
        states[i] = hidden[i].mutable_data();
      }
    }
    mha::HiddenHook hidden_hook(
        model_.checkpoint(),
        [&states, B, S, T, d](mha::Stack stack, std::size_t i, const float* x) {
          const bool decoder = stack == mha::Stack::decoder;
          const std::size_t n = B * (decoder ? T : S) * d;
          std::memcpy(states[decoder ? 1 : 0] + i * n, x, n * sizeof(float));
        });
    if (hidden_states) hooks.add(&hidden_hook);
    if (make) hooks.add((*make)(c, B, S, T, max_memory_ - std::min(bytes, max_memory_)));
    so.hook = hooks.empty() ? nullptr : &hooks;
    mha::ForwardResult r;
    mha::Seq2SeqInput sides;
    {
      py::gil_scoped_release release;
      sides = mha::seq2seq_target(model_, labels);
      r = mha::forward(model_.checkpoint(), in.ids.data(), B, S, in.lengths,
                       mha::DecoderInput{sides.decoder.ids.data(), T, sides.decoder.lengths}, so);
      mha::check_finite_output(r, dir);
      if (in.tokens.empty()) model_.name_tokens(in);
    }
    auto side = [](const mha::ModelInput& x) {
      py::array_t<std::int32_t> ids(std::vector<py::ssize_t>{py::ssize_t(x.B), py::ssize_t(x.T)});
      std::memcpy(ids.mutable_data(), x.ids.data(), x.ids.size() * sizeof(std::int32_t));
      py::list tokens, pieces;
      for (std::size_t b = 0; b < x.B; ++b) {
        const auto end = static_cast<std::ptrdiff_t>(x.lengths[b]);
        tokens.append(std::vector<std::string>(x.tokens[b].begin(), x.tokens[b].begin() + end));
        pieces.append(std::vector<std::string>(x.pieces[b].begin(), x.pieces[b].begin() + end));
      }
      py::dict out;
      out["ids"] = ids;
      out["lengths"] = x.lengths;
      out["tokens"] = tokens;
      out["pieces"] = pieces;
      return out;
    };
    py::dict out = side(in);
    py::dict tgt = side(sides.decoder);
    py::array_t<std::int32_t> label_ids(std::vector<py::ssize_t>{py::ssize_t(B), py::ssize_t(T)});
    std::memcpy(label_ids.mutable_data(), labels.ids.data(),
                labels.ids.size() * sizeof(std::int32_t));
    tgt["labels"] = label_ids;
    out["target"] = tgt;
    py::array_t<float> output(
        std::vector<py::ssize_t>{py::ssize_t(B), py::ssize_t(T), py::ssize_t(d)});
    std::memcpy(output.mutable_data(), r.output.data(), r.output.size() * sizeof(float));
    out["output"] = output;
    out["attention"] = py::none();
    const char* names[3] = {"encoder_attention", "decoder_attention", "cross_attention"};
    for (int i = 0; i < 3; ++i) out[names[i]] = attention ? py::object(maps[i]) : py::none();
    if (attention) {
      out["layer_indices"] = map_layers;
      out["head_indices"] = map_heads;
    }
    for (const char* none : {"hidden_states", "q", "k"}) out[none] = py::none();
    out["encoder_hidden_states"] = hidden_states ? py::object(hidden[0]) : py::none();
    out["decoder_hidden_states"] = hidden_states ? py::object(hidden[1]) : py::none();
    out["top_k"] = top_k_list(r.top_k);
    return out;
  }

  // The analyses of docs/analyses.md, one method each, on the library's cores
  // (mha/checkpoint/lens.hpp, attention_analysis.hpp, ablation.hpp) as `mha
  // analyze` calls them.
  void check_memory(std::uint64_t bytes, const char* what) const {
    if (bytes > max_memory_)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       std::string(what) + ": needs about " + mha::format_bytes(double(bytes)) +
                           ", over max_memory " + mha::format_bytes(double(max_memory_)));
  }

  mha::ModelCall selection(const mha_python::Indices& layers, const mha_python::Indices& heads,
                           mha_python::Int threads) const {
    return mha::check_model_call(model_.config(), {true, layers, heads, 5, threads});
  }

  template <class T>
  static py::array_t<T> array(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
    py::array_t<T> a(shape);
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
  }

  py::dict loss(const py::object& input, mha_python::Int threads, const py::object& labels_alias,
                const py::object& target_text) const {
    const py::object labels = target_of(target_text, labels_alias, "labels");
    if (seq2seq_analysis(labels, "loss", true)) return seq2seq_loss(input, labels, threads);
    const mha::ModelCall call = selection(std::nullopt, std::nullopt, threads);
    const mha::ModelInput in = input_of(input);
    const mha::ModelConfig& c = model_.config();
    if (!c.has_lm_head())
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "loss: a " + c.model_type + " has no LM head");
    mha::TokenLoss l;
    {
      py::gil_scoped_release release;
      mha::ForwardOptions fo;
      fo.threads = call.threads;
      const mha::ForwardResult r =
          mha::forward(model_.checkpoint(), in.ids.data(), in.B, in.T, in.lengths, fo);
      mha::check_finite_output(r, model_.checkpoint().dir());
      l = mha::token_loss(model_.checkpoint(), r.output.data(), in.ids.data(), in.B, in.T,
                          in.lengths, call.threads);
    }
    py::dict out;
    out["loss"] = array(l.loss, {py::ssize_t(in.B), py::ssize_t(in.T)});
    out["mean"] = l.mean_loss;
    out["perplexity"] = l.perplexity;
    out["tokens"] = l.tokens;
    return out;
  }

  py::dict logit_lens(const py::object& input, mha_python::Int top_k,
                      mha_python::Int threads) const {
    seq2seq_analysis(py::none(), "logit_lens", false);
    const mha::ModelCall call = selection(std::nullopt, std::nullopt, threads);
    const mha::ModelInput in = input_of(input);
    const mha::ModelConfig& c = model_.config();
    if (!c.has_lm_head())
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "logit_lens: a " + c.model_type + " has no LM head");
    if (top_k < 1 || std::uint64_t(top_k) > c.vocab_size)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "top_k: expected 1 to the vocabulary's " + std::to_string(c.vocab_size));
    const std::size_t L = c.num_layers, n = in.B * in.T * c.d_model;
    check_memory(std::uint64_t{4} * (L + 1) * n, "logit_lens");
    mha::LogitLens lens;
    {
      py::gil_scoped_release release;
      std::vector<float> hidden((L + 1) * n);
      mha::ForwardOptions fo;
      fo.threads = call.threads;
      mha::HiddenHook states(model_.checkpoint(), [&](mha::Stack, std::size_t i, const float* x) {
        std::copy(x, x + n, hidden.begin() + static_cast<std::ptrdiff_t>(i * n));
      });
      fo.hook = &states;
      mha::check_finite_output(
          mha::forward(model_.checkpoint(), in.ids.data(), in.B, in.T, in.lengths, fo),
          model_.checkpoint().dir());
      lens = mha::logit_lens(model_.checkpoint(), hidden.data(), in.B, in.T, in.ids.data(),
                             in.lengths, std::size_t(top_k), call.threads);
    }
    const py::ssize_t S = py::ssize_t(lens.states), B = py::ssize_t(in.B), T = py::ssize_t(in.T),
                      k = py::ssize_t(lens.k);
    py::dict out;
    out["p_next"] = array(lens.p_next, {S, B, T});
    out["rank"] = array(lens.rank_next, {S, B, T});
    out["top_ids"] = array(lens.top_ids, {S, B, T, k});
    out["top_p"] = array(lens.top_p, {S, B, T, k});
    return out;
  }

  // rollout (layers, B, T, T), norms (layers, B, heads, T, T), head scores.
  py::dict maps_analysis(const py::object& input, bool rollout, bool norms, bool detectors,
                         bool flow, const mha_python::Indices& layers,
                         const mha_python::Indices& heads, mha_python::Int threads) const {
    seq2seq_analysis(py::none(),
                     flow        ? "attention_flow"
                     : detectors ? "head_scores"
                     : rollout   ? "rollout"
                                 : "attention_norms",
                     false);
    const mha::ModelCall call = selection(layers, heads, threads);
    const mha::ModelInput in = input_of(input);
    const mha::ModelConfig& c = model_.config();
    if (detectors && c.image_input())
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "head_scores: an image model has no token ids for the detectors' patterns; "
                       "its analyses are rollout, attention_flow and attention_norms");
    const std::size_t B = in.B, T = in.T, L = c.num_layers, Ls = call.map_layers.size(),
                      Hs = call.map_heads.size();
    check_memory(std::uint64_t{4} * ((rollout ? L * B * T * T : 0) +
                                     (norms ? Ls * B * Hs * T * T : 0) + 2 * B * c.h * T * T),
                 rollout ? "rollout"
                 : norms ? "attention_norms"
                         : "head_scores");
    py::array_t<float> R, N;
    if (rollout)
      R = py::array_t<float>(
          std::vector<py::ssize_t>{py::ssize_t(L), py::ssize_t(B), py::ssize_t(T), py::ssize_t(T)});
    if (norms)
      N = py::array_t<float>(std::vector<py::ssize_t>{
          py::ssize_t(Ls), py::ssize_t(B), py::ssize_t(Hs), py::ssize_t(T), py::ssize_t(T)});
    float* r = rollout ? R.mutable_data() : nullptr;
    float* nm = norms ? N.mutable_data() : nullptr;
    mha::MapAnalysisResult res;
    {
      py::gil_scoped_release release;
      mha::MapAnalysisOptions o;
      o.rollout = rollout, o.norms = norms, o.detectors = detectors, o.flow = flow;
      if (flow && T > mha::kMaxFlowTokens)
        throw mha::Error(mha::ErrorKind::invalid_input, "attention_flow: " + std::to_string(T) +
                                                            " tokens; it is run up to " +
                                                            std::to_string(mha::kMaxFlowTokens));
      o.layers = call.map_layers, o.heads = call.map_heads, o.threads = call.threads;
      // An image model's pass starts from its patch embeddings.
      const std::vector<float> embeddings = mha::input_embeddings(model_.checkpoint(), in);
      if (!embeddings.empty()) o.embeddings = embeddings.data();
      if (r)
        o.rollout_sink = [&](std::size_t l, std::size_t b, const float* v) {
          std::copy_n(v, T * T, r + (l * B + b) * T * T);
        };
      if (nm)
        o.norms_sink = [&](std::size_t slot, std::size_t b, std::size_t hs, const float* v) {
          std::copy_n(v, T * T, nm + ((slot * B + b) * Hs + hs) * T * T);
        };
      res = mha::analyze_maps(model_.checkpoint(), in.ids.data(), B, T, in.lengths, o);
      mha::check_finite_output(res.forward, model_.checkpoint().dir());
    }
    py::dict out;
    if (rollout) out["rollout"] = R;
    if (flow) out["flow"] = array(res.flow, {py::ssize_t(B), py::ssize_t(T), py::ssize_t(T)});
    if (norms) out["attention_norms"] = N;
    if (detectors) {
      py::list names;
      for (mha::Detector d : mha::all_detectors()) names.append(mha::to_string(d));
      out["detectors"] = names;
      out["head_scores"] =
          array(res.head_scores, {py::ssize_t(names.size()), py::ssize_t(Ls), py::ssize_t(Hs)});
    }
    return out;
  }

  // An encoder-decoder's analyses (docs/analyses.md "Encoder-decoders") take
  // its target as labels= (transformers' name for the teacher-forced target);
  // other models refuse labels, and an encoder-decoder refuses every analysis
  // without them, and those it does not have.
  bool seq2seq_analysis(const py::object& labels, const char* method, bool supported) const {
    const mha::ModelConfig& c = model_.config();
    const std::string& dir = model_.checkpoint().dir();
    if (!labels.is_none() && !c.encoder_decoder)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       std::string(method) + ": target_text=: a " + c.model_type + " (" + dir +
                           ") is not an encoder-decoder; a target is for T5 and BART checkpoints");
    if (!c.encoder_decoder) return false;
    if (!supported)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       std::string(method) + ": not for an encoder-decoder (" + c.model_type +
                           "); its analyses are loss, rollout, norms and ablation, "
                           "each with target_text=");
    if (labels.is_none())
      throw mha::Error(
          mha::ErrorKind::invalid_input,
          std::string(method) + ": " + dir + ": a " + c.model_type +
              " is an encoder-decoder; give its target as target_text= (a text, a list "
              "of texts or token ids), as mha analyze --target_text");
    return true;
  }

  // Both sides, held together: the batch's pointers are into source and target.
  struct Seq2SeqSides {
    mha::ModelInput source;
    mha::Seq2SeqInput target;
    mha::Seq2SeqBatch batch() const {
      mha::Seq2SeqBatch b;
      b.source = source.ids.data();
      b.B = source.B, b.S = source.T, b.T = target.labels.T;
      b.source_lengths = source.lengths;
      b.target_lengths = target.decoder.lengths;
      b.decoder_ids = target.decoder.ids.data();
      b.labels = target.labels.ids.data();
      return b;
    }
  };
  std::unique_ptr<Seq2SeqSides> seq2seq_sides(const py::object& input,
                                              const py::object& labels) const {
    auto sides = std::make_unique<Seq2SeqSides>();
    sides->source = input_of(input);
    const mha::ModelInput target = input_of(labels);
    if (target.B != sides->source.B)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "labels: " + std::to_string(target.B) + " target rows for " +
                           std::to_string(sides->source.B) +
                           " source rows; expected one target per source");
    sides->target = mha::seq2seq_target(model_, target);
    return sides;
  }

  // Layer indices name a layer of both stacks, as `mha analyze`'s; unset: every
  // layer of each.
  mha::ModelCall seq2seq_selection(const mha_python::Indices& layers,
                                   const mha_python::Indices& heads,
                                   mha_python::Int threads) const {
    return mha::check_seq2seq_call(model_.config(), {true, layers, heads, 5, threads});
  }

  py::dict seq2seq_loss(const py::object& input, const py::object& labels,
                        mha_python::Int threads) const {
    const mha::ModelCall call = seq2seq_selection(std::nullopt, std::nullopt, threads);
    const auto sides = seq2seq_sides(input, labels);
    const mha::Seq2SeqBatch in = sides->batch();
    std::vector<double> loss;
    {
      py::gil_scoped_release release;
      mha::ForwardOptions so;
      so.threads = call.threads;
      const mha::ForwardResult r =
          mha::forward(model_.checkpoint(), in.source, in.B, in.S, in.source_lengths,
                       mha::DecoderInput{in.decoder_ids, in.T, in.target_lengths}, so);
      mha::check_finite_output(r, model_.checkpoint().dir());
      loss = mha::seq2seq_token_loss(model_.checkpoint(), r.output.data(), in, call.threads);
    }
    double sum = 0;
    std::size_t n = 0;
    for (double v : loss)
      if (!std::isnan(v)) sum += v, ++n;
    py::dict out;
    out["loss"] = array(loss, {py::ssize_t(in.B), py::ssize_t(in.T)});
    out["mean"] = n ? sum / double(n) : std::nan("");
    out["perplexity"] = std::exp(n ? sum / double(n) : std::nan(""));
    out["tokens"] = n;
    return out;
  }

  // {"encoder", "decoder", "cross"}: the rollouts (layers, B, queries, keys), or
  // the norms (layers, B, heads, queries, keys), as `mha analyze` writes them.
  py::dict seq2seq_maps(const py::object& input, const py::object& labels, bool rollout,
                        const mha_python::Indices& layers, const mha_python::Indices& heads,
                        mha_python::Int threads) const {
    const mha::ModelConfig& c = model_.config();
    const mha::ModelCall call = seq2seq_selection(layers, heads, threads);
    const auto sides = seq2seq_sides(input, labels);
    const mha::Seq2SeqBatch in = sides->batch();
    const std::size_t B = in.B, S = in.S, T = in.T, Hs = call.map_heads.size();
    const auto chosen = [&](std::size_t n) {  // the chosen layers a stack of n has
      return std::size_t(std::lower_bound(call.map_layers.begin(), call.map_layers.end(), n) -
                         call.map_layers.begin());
    };
    const std::size_t layers_of[3] = {chosen(c.num_layers), chosen(c.num_decoder_layers),
                                      chosen(c.num_decoder_layers)};
    const std::size_t queries[3] = {S, T, T}, keys[3] = {S, T, S};
    std::uint64_t bytes = mha::seq2seq_memory(c, model_.checkpoint().layer_float32_bytes(), B, S, T,
                                              mha::resolve_threads(call.threads));
    bytes += std::uint64_t{12} * B * c.h * (S * S + T * T + T * S);  // a layer's maps, rollouts
    for (int k = 0; k < 3; ++k)
      bytes += std::uint64_t{4} * layers_of[k] * B * (rollout ? 1 : Hs) * queries[k] * keys[k];
    check_memory(bytes, rollout ? "rollout" : "attention_norms");
    py::array_t<float> maps[3];
    float* data[3];
    for (int k = 0; k < 3; ++k) {
      std::vector<py::ssize_t> shape = {py::ssize_t(layers_of[k]), py::ssize_t(B),
                                        py::ssize_t(queries[k]), py::ssize_t(keys[k])};
      if (!rollout) shape.insert(shape.begin() + 2, py::ssize_t(Hs));
      maps[k] = py::array_t<float>(shape);
      data[k] = maps[k].mutable_data();
    }
    {
      py::gil_scoped_release release;
      mha::Seq2SeqMapOptions o;
      o.rollout = rollout;
      o.norms = !rollout;
      o.layers = call.map_layers;
      o.heads = call.map_heads;
      o.threads = call.threads;
      o.rollout_sink = [&](mha::MapKind k, std::size_t l, std::size_t b, const float* R) {
        const std::size_t n = queries[int(k)] * keys[int(k)];
        std::copy_n(R, n, data[int(k)] + (l * B + b) * n);
      };
      o.norms_sink = [&](mha::MapKind k, std::size_t slot, std::size_t b, std::size_t hs,
                         const float* v) {
        const std::size_t n = queries[int(k)] * keys[int(k)];
        std::copy_n(v, n, data[int(k)] + ((slot * B + b) * Hs + hs) * n);
      };
      mha::ForwardResult finite;
      finite.output = mha::analyze_seq2seq_maps(model_.checkpoint(), in, o).output;
      mha::check_finite_output(finite, model_.checkpoint().dir());
    }
    py::dict out;
    out["encoder"] = maps[0];
    out["decoder"] = maps[1];
    out["cross"] = maps[2];
    return out;
  }

  py::dict seq2seq_ablation(const py::object& input, const py::object& labels,
                            const std::string& kind, const std::string& metric,
                            const std::optional<std::string>& target,
                            const std::optional<std::string>& foil,
                            const mha_python::Indices& layers, const mha_python::Indices& heads,
                            mha_python::Int threads) const {
    const mha::ModelCall call = seq2seq_selection(layers, heads, threads);
    const auto sides = seq2seq_sides(input, labels);
    const mha::Seq2SeqBatch in = sides->batch();
    mha::InterventionOptions io = mha::intervention_options(model_, call, metric, target, foil);
    io.layers = call.map_layers;
    mha::Seq2SeqAblation a;
    {
      py::gil_scoped_release release;
      a = mha::seq2seq_head_ablation(
          model_.checkpoint(), in, kind == "mean" ? mha::Ablation::mean : mha::Ablation::zero, io);
    }
    const mha::ModelConfig& c = model_.config();
    const auto chosen = [&](std::size_t n) {
      return py::ssize_t(std::lower_bound(a.layers.begin(), a.layers.end(), n) - a.layers.begin());
    };
    const py::ssize_t B = py::ssize_t(in.B), H = py::ssize_t(a.heads.size());
    py::dict out;
    out["encoder"] = array(a.encoder, {B, chosen(c.num_layers), H});
    out["decoder"] = array(a.decoder, {B, chosen(c.num_decoder_layers), H});
    out["cross"] = array(a.cross, {B, chosen(c.num_decoder_layers), H});
    out["clean"] = a.clean;
    out["metric"] = mha::to_string(io.metric);
    return out;
  }

  py::dict ablation(const py::object& input, const std::string& kind, const std::string& metric,
                    const std::optional<std::string>& target,
                    const std::optional<std::string>& foil, const mha_python::Indices& layers,
                    const mha_python::Indices& heads, mha_python::Int threads,
                    const py::object& labels_alias, const py::object& target_text) const {
    const py::object labels = target_of(target_text, labels_alias, "labels");
    if (kind != "zero" && kind != "mean")
      throw mha::Error(mha::ErrorKind::invalid_input, "ablation: expected 'zero' or 'mean'");
    if (seq2seq_analysis(labels, "ablation", true))
      return seq2seq_ablation(input, labels, kind, metric, target, foil, layers, heads, threads);
    const mha::ModelCall call = selection(layers, heads, threads);
    const mha::ModelInput in = input_of(input);
    if (model_.config().image_input()) mha::check_intervention_head(model_.checkpoint());
    mha::InterventionOptions io = mha::intervention_options(model_, call, metric, target, foil);
    mha::AblationResult a;
    {
      py::gil_scoped_release release;
      // An image model's passes start from its patch embeddings.
      const std::vector<float> embeddings = mha::input_embeddings(model_.checkpoint(), in);
      if (!embeddings.empty()) io.embeddings = embeddings.data();
      a = mha::head_ablation(model_.checkpoint(), in.ids.data(), in.B, in.T, in.lengths,
                             kind == "mean" ? mha::Ablation::mean : mha::Ablation::zero, io);
    }
    py::dict out;
    out["effect"] = array(
        a.effect, {py::ssize_t(in.B), py::ssize_t(a.layers.size()), py::ssize_t(a.heads.size())});
    out["clean"] = a.clean;
    out["metric"] = mha::to_string(io.metric);
    const mha::ModelConfig& c = model_.config();
    if (c.classifier) {  // the class each row's clean run predicts (the loss metric's class)
      py::list predicted;
      for (const std::int32_t k : a.predicted)
        predicted.append(py::make_tuple(k, c.labels.at(std::size_t(k))));
      out["predicted"] = predicted;
    }
    return out;
  }

  py::dict patching(const std::string& clean, const std::string& corrupt, const std::string& metric,
                    const std::optional<std::string>& target,
                    const std::optional<std::string>& foil, const mha_python::Indices& layers,
                    const mha_python::Indices& heads, mha_python::Int threads) const {
    seq2seq_analysis(py::none(), "patching", false);
    const mha::ModelCall call = selection(layers, heads, threads);
    const mha::ModelInput a = model_.encode({clean}), b = model_.encode({corrupt});
    if (a.T != b.T)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "clean and corrupt: " + std::to_string(a.T) + " and " + std::to_string(b.T) +
                           " tokens; expected texts of equal token length");
    mha::InterventionOptions io = mha::intervention_options(model_, call, metric, target, foil);
    mha::PatchingResult p;
    {
      py::gil_scoped_release release;
      p = mha::activation_patching(model_.checkpoint(), a.ids.data(), b.ids.data(), a.T, io);
    }
    py::dict out;
    out["heads"] =
        array(p.heads_patched, {py::ssize_t(p.layers.size()), py::ssize_t(p.heads.size())});
    out["resid"] = array(p.resid_patched, {py::ssize_t(p.layers.size()), py::ssize_t(a.T)});
    out["clean"] = p.clean;
    out["corrupt"] = p.corrupt;
    out["metric"] = mha::to_string(io.metric);
    return out;
  }

  py::dict config() const {
    const mha::ModelConfig& c = model_.config();
    py::dict d;
    d["model_type"] = c.model_type;
    d["num_layers"] = c.num_layers;
    d["d_model"] = c.d_model;
    d["h"] = c.h;
    d["kv_heads"] = c.kv_heads;
    d["head_dim"] = c.head_dim;
    d["d_ff"] = c.d_ff;
    d["vocab_size"] = c.vocab_size;
    d["max_positions"] = c.max_positions;
    d["dtype"] = mha::to_string(model_.compute());
    if (c.classifier) d["labels"] = c.labels;  // an image classifier's classes, by id
    return d;
  }

 private:
  mha::Model model_;
  std::uint64_t max_memory_;
  // The next call's extra hook (call_with_hook), taken by that call.
  mutable const mha_python::SiteHookMaker* site_hook_ = nullptr;
};

}  // namespace

PYBIND11_MODULE(mha, m) {
  m.doc() =
      "Multi-head attention (Vaswani et al. 2017) on the CPU: the mha tool's library on "
      "NumPy arrays. docs/python.md has the guide.";
  m.attr("__version__") = MHA_VERSION;
  // mha::Error: bad input -> ValueError, anything else -> OSError; one line, the CLI's message.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const mha::Error& e) {
      if (e.kind() == mha::ErrorKind::invalid_input)
        PyErr_SetString(PyExc_ValueError, e.what());
      else
        PyErr_SetString(PyExc_OSError, e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    }
  });
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
  py::class_<PyModel>(
      m, "Model",
      "Model(dir, max_memory=None, dtype=\"float32\")\n\nA whole checkpoint as model hubs "
      "publish it (config.json, model.safetensors or its index, tokenizer.json), or a GGUF file, "
      "of any family docs/models.md lists; the analyses of docs/analyses.md are its methods. "
      "Opening it checks "
      "every file and reads no weights; each call reads them layer by layer. A call whose arrays "
      "and forward would need more than max_memory bytes (default 80% of physical memory) raises "
      "ValueError before computing. dtype=\"bfloat16\" runs every GEMM on bfloat16 operands "
      "summed in float32 (natively with AVX512_BF16), as `mha run --model --dtype bfloat16`.")
      .def(py::init<const std::string&, std::optional<mha_python::Int>, const std::string&>(),
           py::arg("dir"), py::arg("max_memory") = py::none(), py::arg("dtype") = "float32")
      .def("__call__", &PyModel::call, py::arg("input"), py::kw_only(), py::arg("attention") = true,
           py::arg("hidden_states") = false, py::arg("layer_indices") = py::none(),
           py::arg("head_indices") = py::none(), py::arg("top_k") = 5, py::arg("threads") = 0,
           py::arg("qk") = false, py::arg("target") = py::none(),
           py::arg("target_text") = py::none(),
           "model(input, *, attention=True, hidden_states=False, layer_indices=None, "
           "head_indices=None, top_k=5, threads=0, qk=False, target_text=None) -> dict\n\ninput: a "
           "text, a list "
           "of texts "
           "(right-padded) or "
           "token ids (T) or (B, T). Encoder-decoders (T5, BART) take the decoder's side as "
           "target_text= (target= is its older name; the same kinds, one row per input row; "
           "teacher-forced, shifted right after "
           "decoder_start_token_id) and return encoder_attention (layers, B, heads, S, S), "
           "decoder_attention (layers, B, heads, T, T), cross_attention (layers, B, heads, T, "
           "S), with hidden_states=True encoder_hidden_states (encoder layers + 1, B, S, d_model) "
           "and decoder_hidden_states (decoder layers + 1, B, T, d_model), and target (the "
           "decoder's ids, lengths, tokens, pieces, and labels) besides "
           "the source's ids, lengths, tokens, pieces and output (B, T, d_model). Returns ids, "
           "lengths, tokens, output (B, T, d_model), "
           "attention (layers, B, heads, T, T) or None with layer_indices, head_indices and "
           "attention_info (how the weights follow from q and k), hidden_states (num_layers + 1, "
           "B, T, d_model) or None, q and k (layers, B, heads, T, head_dim) with qk=True (the "
           "queries and keys the scores use, after QK-norm and RoPE) or None, and top_k (per "
           "row, (id, token, p)) for causal LMs or None.")
      .def("loss", &PyModel::loss, py::arg("input"), py::kw_only(), py::arg("threads") = 0,
           py::arg("labels") = py::none(), py::arg("target_text") = py::none(),
           "loss(input, target_text=None) -> dict: loss (B, T), each next token's cross-entropy "
           "(NaN where there is none), mean, perplexity, tokens (docs/analyses.md); for an "
           "encoder-decoder, target_text= (labels= is its older name) is its target and "
           "loss[b, t] is target token t's")
      .def("logit_lens", &PyModel::logit_lens, py::arg("input"), py::kw_only(),
           py::arg("top_k") = 5, py::arg("threads") = 0,
           "logit_lens(input, top_k=5) -> dict: p_next and rank (layers + 1, B, T), top_ids and "
           "top_p (layers + 1, B, T, top_k)")
      .def(
          "rollout",
          [](const PyModel& m, const py::object& input, mha_python::Int threads,
             const py::object& labels_alias, const py::object& target_text) {
            const py::object labels = target_of(target_text, labels_alias, "labels");
            if (m.seq2seq_analysis(labels, "rollout", true))
              return py::object(
                  m.seq2seq_maps(input, labels, true, std::nullopt, std::nullopt, threads));
            const py::dict d = m.maps_analysis(input, true, false, false, false, std::nullopt,
                                               std::nullopt, threads);
            return py::object(d["rollout"]);
          },
          py::arg("input"), py::kw_only(), py::arg("threads") = 0, py::arg("labels") = py::none(),
          py::arg("target_text") = py::none(),
          "rollout(input, target_text=None) -> array (layers, B, T, T): attention rollout (Abnar & "
          "Zuidema 2020); for an encoder-decoder with target_text= (its target), a dict of the "
          "encoder's, the decoder's and the cross rollout")
      .def(
          "flow",
          [](const PyModel& m, const py::object& input, mha_python::Int threads) {
            const py::dict d = m.maps_analysis(input, false, false, false, true, std::nullopt,
                                               std::nullopt, threads);
            return py::object(d["flow"]);
          },
          py::arg("input"), py::kw_only(), py::arg("threads") = 0,
          "flow(input) -> array (B, T, T), mha analyze --method flow: attention flow to the last "
          "layer (Abnar & "
          "Zuidema 2020), up to 128 tokens")
      .def(
          "norms",
          [](const PyModel& m, const py::object& input, const mha_python::Indices& layers,
             const mha_python::Indices& heads, mha_python::Int threads,
             const py::object& labels_alias, const py::object& target_text) {
            const py::object labels = target_of(target_text, labels_alias, "labels");
            if (m.seq2seq_analysis(labels, "attention_norms", true))
              return py::object(m.seq2seq_maps(input, labels, false, layers, heads, threads));
            const py::dict d =
                m.maps_analysis(input, false, true, false, false, layers, heads, threads);
            return py::object(d["attention_norms"]);
          },
          py::arg("input"), py::kw_only(), py::arg("layer_indices") = py::none(),
          py::arg("head_indices") = py::none(), py::arg("threads") = 0,
          py::arg("labels") = py::none(), py::arg("target_text") = py::none(),
          "norms(input, target_text=None) -> array (layers, B, heads, T, T): ||a_ij "
          "f_h(x_j)|| (Kobayashi et al. 2020), mha analyze --method norms; for an "
          "encoder-decoder with target_text=, a dict of "
          "the encoder's, the decoder's and the cross-attention's")
      .def(
          "detectors",
          [](const PyModel& m, const py::object& input, const mha_python::Indices& layers,
             const mha_python::Indices& heads, mha_python::Int threads) {
            return m.maps_analysis(input, false, false, true, false, layers, heads, threads);
          },
          py::arg("input"), py::kw_only(), py::arg("layer_indices") = py::none(),
          py::arg("head_indices") = py::none(), py::arg("threads") = 0,
          "detectors(input) -> dict, mha analyze --method detectors: detectors (names), "
          "head_scores (detectors, layers, heads) "
          "as TransformerLens's detect_head")
      .def("ablation", &PyModel::ablation, py::arg("input"), py::kw_only(),
           py::arg("ablation") = "zero", py::arg("metric") = "", py::arg("target") = py::none(),
           py::arg("foil") = py::none(), py::arg("layer_indices") = py::none(),
           py::arg("head_indices") = py::none(), py::arg("threads") = 0,
           py::arg("labels") = py::none(), py::arg("target_text") = py::none(),
           "ablation(input, ablation='zero', metric='', target=None, foil=None, target_text=None) "
           "-> "
           "dict: effect (B, layers, heads), clean, metric; for an image classifier (input: "
           "images), target and foil name classes by label, and predicted lists each row's clean "
           "(id, label); for an encoder-decoder with target_text= (its target), encoder, decoder "
           "and "
           "cross (B, layers, heads) for each kind of attention; labels= is target_text='s older "
           "name")
      .def("patching", &PyModel::patching, py::arg("clean"), py::arg("corrupt"), py::kw_only(),
           py::arg("metric") = "", py::arg("target") = py::none(), py::arg("foil") = py::none(),
           py::arg("layer_indices") = py::none(), py::arg("head_indices") = py::none(),
           py::arg("threads") = 0,
           "patching(clean, corrupt, metric='', target=None, foil=None) -> dict: heads (layers, "
           "heads), resid (layers, T), clean, corrupt, metric")
      .def_property_readonly("config", &PyModel::config, "The model's sizes (a dict).");
  // The analyses are named as `mha analyze --method` names them; their older names stay as
  // aliases (docs/python.md).
  const py::object model_class = m.attr("Model");
  model_class.attr("attention_flow") = model_class.attr("flow");
  model_class.attr("attention_norms") = model_class.attr("norms");
  model_class.attr("head_scores") = model_class.attr("detectors");
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
  mha_python::add_show(m);
  mha_python::add_sites(m.attr("Model"), &PyModel::call_with_hook);
  m.def("convert_weights", &convert_weights, py::arg("weights"), py::arg("to"),
        py::arg("from_") = "auto", py::arg("h") = py::none(),
        "convert_weights(weights, to, from_='auto', h=None) -> dict\n\nThe weights (a dict of "
        "arrays or a path) in another layout: 'native', 'torch' or 'keras' (keras needs h), "
        "exactly, as `mha weights convert`.");
}
