// What the Python module's files (module.cpp, layer.cpp, model.cpp, show.cpp) share.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/checkpoint/model_config.hpp"
#include "mha/io/npy.hpp"
#include "mha/kernel/site.hpp"

namespace mha_python {

// A NumPy array (or anything np.asarray takes) as an NpyArray: C order,
// native byte order; float16/32/64, bool, int32/64 and uint8 as the CLI reads them
// from files. Throws mha::Error (invalid_input) naming `what` otherwise.
mha::NpyArray to_npy(const pybind11::array& in, const std::string& what);

// An NpyArray (float16/32/64, int32/64) as a new NumPy array.
pybind11::array to_numpy(const mha::NpyArray& a);
// JSON as Python objects (dicts, lists, numbers, strings).
pybind11::object json_to_py(const nlohmann::json& j);

// Each file's part of the module, called from PYBIND11_MODULE (module.cpp):
void add_layer(pybind11::module_& m);  // mha.Layer, attention, run, convert_weights (layer.cpp)
void add_model(pybind11::module_& m);  // mha.Model and its analyses (model.cpp)
void add_show(pybind11::module_& m);   // mha.show and mha.View (show.cpp)

// Model.run_with_cache and Model.run_with_hooks (sites.cpp), over `call`: a
// plain call of the model `self` (Model.__call__'s with its defaults but
// `attention`, returning its dict) whose pass also shows its sites to the hook
// `make` returns. `make` is called once
// the input is read (B rows of T tokens; an encoder-decoder's T_dec target
// tokens) and before the pass, with the bytes max_memory leaves beside it.
using SiteHookMaker =
    std::function<mha::SiteHook<float>*(const mha::ModelConfig& c, std::size_t B, std::size_t T,
                                        std::size_t T_dec, std::uint64_t room)>;
using HookedCall = std::function<pybind11::dict(
    pybind11::handle self, const pybind11::object& input, const pybind11::object& target_text,
    bool attention, const SiteHookMaker& make)>;
void add_sites(pybind11::handle model_class, const HookedCall& call);

// An integer argument (top_k, threads, an index, a size) as the CLI reads an
// integer flag: any Python int or NumPy integer, one beyond 64 bits saturated
// to the nearest 64-bit value, so that the library's range check refuses it
// with the CLI's message (`--top_k 2**70` reads as 2^63 - 1 there too)
// instead of pybind11's signature dump. Indices: None or a list of them.
struct Int {
  std::int64_t value = 0;
  Int() = default;
  Int(std::int64_t v) : value(v) {}  // NOLINT: a default argument, an internal call
  operator std::int64_t() const { return value; }
};
struct Indices {
  std::optional<std::vector<std::int64_t>> value;
  Indices() = default;
  Indices(std::nullopt_t) {}  // NOLINT: "every layer", as None
  operator const std::optional<std::vector<std::int64_t>>&() const { return value; }
};
bool int_value(pybind11::handle src, std::int64_t& out);  // false: not an integer

}  // namespace mha_python

namespace pybind11::detail {

template <>
struct type_caster<mha_python::Int> {
  PYBIND11_TYPE_CASTER(mha_python::Int, const_name("int"));
  bool load(handle src, bool) { return mha_python::int_value(src, value.value); }
  static handle cast(const mha_python::Int& v, return_value_policy, handle) {
    return PyLong_FromLongLong(v.value);
  }
};

template <>
struct type_caster<mha_python::Indices> {
  PYBIND11_TYPE_CASTER(mha_python::Indices, const_name("Optional[List[int]]"));
  bool load(handle src, bool) {
    if (src.is_none()) {
      value.value.reset();
      return true;
    }
    if (!isinstance<sequence>(src) || isinstance<str>(src) || isinstance<bytes>(src)) return false;
    std::vector<std::int64_t> out;
    for (const handle item : reinterpret_borrow<sequence>(src)) {
      std::int64_t v = 0;
      if (!mha_python::int_value(item, v)) return false;
      out.push_back(v);
    }
    value.value = std::move(out);
    return true;
  }
  static handle cast(const mha_python::Indices& v, return_value_policy p, handle parent) {
    return make_caster<std::optional<std::vector<std::int64_t>>>::cast(v.value, p, parent);
  }
};

}  // namespace pybind11::detail
