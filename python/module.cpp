// The Python module `mha` (docs/python.md): the library on NumPy arrays.
//
//   import mha, numpy as np
//   out, att = mha.attention(np.random.rand(2, 5, 16).astype("f4"), h=4, save_attention=True)
//
// Every keyword is a config key of `mha run` (docs/config.md), checked by the
// same code with the same messages. Arrays (inputs, masks, weights) are handed
// to the run as in-memory inputs (mha/io/provided_input.hpp), so the run is
// exactly `mha run`'s: plan, load, compute, write. attention() writes into a
// temporary directory it reads back and removes; run() writes where the config
// says. mha::Error becomes ValueError (bad input) or OSError (anything else).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/model/config.hpp"
#include "mha/model/layer_weights.hpp"
#include "mha/model/weight_formats.hpp"
#include "mha/model/weights.hpp"
#include "mha/run/run.hpp"

namespace py = pybind11;
using nlohmann::json;

namespace {

// A NumPy array as an NpyArray (C order, native byte order; float16/32/64,
// bool and integer arrays as the CLI reads them from files).
mha::NpyArray to_npy(const py::array& in, const std::string& what) {
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
  else
    throw mha::Error(mha::ErrorKind::invalid_input,
                     what + ": arrays of dtype " + std::string(py::str(a.dtype())) +
                         " are not read; expected float16, float32, float64, bool, int32 or int64");
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
  ~Provided() {
    for (const auto& p : paths) mha::release_provided(p);
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
    return paths.back();
  }
};

// A keyword's Python value as the JSON a config file would hold; arrays and
// weight dicts become in-memory inputs.
json to_json(const std::string& key, const py::handle& v, Provided& provided) {
  if (v.is_none()) return nullptr;
  if ((key == "query" || key == "key" || key == "value") &&
      (py::isinstance<py::array>(v) || py::hasattr(v, "detach")))
    return provided.input(v, key);
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) {
    try {
      return v.cast<std::int64_t>();
    } catch (const py::cast_error&) {
      return v.cast<std::uint64_t>();
    }
  }
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::array>(v)) return provided.npy(py::reinterpret_borrow<py::array>(v), key);
  if (key == "weights" && is_mapping(v)) return provided.weights(v);
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    json list = json::array();
    for (const auto& item : v) list.push_back(to_json(key, item, provided));
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

// A temporary out_dir for attention(), removed when the call ends.
struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "mha_python_XXXXXX").string();
    if (!::mkdtemp(pattern.data()))
      throw mha::Error(mha::ErrorKind::runtime,
                       "cannot create a temporary directory in " +
                           std::filesystem::temp_directory_path().string());
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

py::tuple attention(const py::object& query, const py::object& key, const py::object& value,
                    py::kwargs kwargs) {
  Provided provided;
  py::dict config;
  for (const auto& [k, v] : kwargs) config[k] = v;
  for (const char* reserved : {"query", "key", "value", "out_dir"})
    if (config.contains(reserved))
      throw mha::Error(
          mha::ErrorKind::invalid_input,
          std::string(reserved) + ": give it as " +
              (std::string(reserved) == "out_dir" ? "mha.run's config (attention() writes no files)"
                                                  : "a positional argument"));
  if (!query.is_none()) config["query"] = query;
  if (!key.is_none()) config["key"] = key;
  if (!value.is_none()) config["value"] = value;
  mha::Config c = make_config(config, provided, "mha.attention");
  TempDir dir;
  c.out_dir = dir.path;
  std::vector<std::string> warnings;
  mha::RunResult r = run_released(c, warnings);
  warn_all(warnings);
  py::array output = to_numpy(mha::read_npy(dir.path + "/output.npy"));
  py::object maps = py::none();
  if (c.save_attention) {
    const char* name =
        c.layer == mha::LayerKind::attention ? "/attention.npy" : "/self_attention.npy";
    maps = to_numpy(mha::read_npy(dir.path + name));
  }
  return py::make_tuple(output, maps);
}

py::object json_to_py(const json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

py::object run(const py::dict& config) {
  Provided provided;
  const mha::Config c = make_config(config, provided, "mha.run");
  std::vector<std::string> warnings;
  mha::RunResult r = run_released(c, warnings);
  warn_all(warnings);
  return json_to_py(r.report);
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
                         std::optional<std::size_t> h) {
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
  m.def("attention", &attention, py::arg("query") = py::none(), py::arg("key") = py::none(),
        py::arg("value") = py::none(),
        "attention(query=None, key=None, value=None, *, h, weights=None, **config)\n\n"
        "Runs multi-head attention (or Transformer layers, with layer='encoder'/'decoder') on "
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
