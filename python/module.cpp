// The Python module `mha` (docs/python.md): the library on NumPy arrays.
//
//   import mha, numpy as np
//   layer = mha.Layer(h=8, d_model=512, causal=True)   # planned, weights converted once
//   out, att = layer(np.random.rand(2, 5, 512).astype("f4"), save_attention=True)
//   out, att = mha.attention(np.random.rand(2, 5, 16).astype("f4"), h=4)  # a one-shot Layer
//
// Every keyword is a config key of `mha run` (docs/config.md), checked by the
// same code with the same messages. One file per concept, each registering
// its part from PYBIND11_MODULE below: layer.cpp (mha.Layer, attention, run,
// convert_weights), model.cpp (mha.Model and its analyses, on the registry of
// mha/analysis/), show.cpp (mha.show, mha.View). This file holds what they
// share (NumPy arrays to and from the library's) and the error translation:
// mha::Error becomes ValueError (bad input) or OSError (anything else).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/npy.hpp"
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

py::array mha_python::to_numpy(const mha::NpyArray& a) {
  std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end());
  const char* format = a.dtype == mha::DType::f2   ? "e"
                       : a.dtype == mha::DType::f8 ? "d"
                       : a.dtype == mha::DType::i4 ? "i"
                       : a.dtype == mha::DType::i8 ? "q"
                                                   : "f";
  py::array out(py::dtype(format), shape);
  std::memcpy(out.mutable_data(), a.data.data(), a.data.size());
  return out;
}

py::object mha_python::json_to_py(const json& j) {
  return py::module_::import("json").attr("loads")(mha::dump_json(j));
}

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
  mha_python::add_layer(m);
  mha_python::add_model(m);
  mha_python::add_show(m);
}
