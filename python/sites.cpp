// mha.Model.run_with_cache and run_with_hooks: a model's activation sites
// (kernel/site.hpp, docs/models.md) read into NumPy arrays, or edited by
// Python functions as the pass computes them (TransformerLens's
// interventions: zeroing a head's hook_z, patching hook_resid_pre).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/config/memory.hpp"
#include "mha/run/site_files.hpp"
#include "module.hpp"

namespace py = pybind11;

namespace mha_python {
namespace {

std::vector<py::ssize_t> py_shape(const std::vector<std::size_t>& shape) {
  return std::vector<py::ssize_t>(shape.begin(), shape.end());
}

std::string shape_text(const std::vector<py::ssize_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The sites `names` chooses: a list of names or patterns (as --save_sites),
// a callable filter f(name) -> bool, or None (every site).
std::vector<mha::SiteShape> chosen_sites(const std::vector<mha::SiteShape>& sites,
                                         const py::object& names) {
  if (names.is_none()) return sites;
  if (py::isinstance<py::str>(names))
    return mha::select_sites(sites, mha::split_site_patterns(names.cast<std::string>()), "names");
  if (PyCallable_Check(names.ptr())) {
    std::vector<mha::SiteShape> out;
    for (const mha::SiteShape& s : sites)
      if (py::bool_(names(s.name))) out.push_back(s);
    return out;
  }
  std::vector<std::string> patterns;
  for (const py::handle& n : names) {
    if (!py::isinstance<py::str>(n))
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "names: expected site names or patterns (str), a callable filter or "
                       "None, got an item of type " +
                           std::string(py::str(py::type::of(n).attr("__name__"))));
    patterns.push_back(n.cast<std::string>());
  }
  return mha::select_sites(sites, patterns, "names");
}

// Reads every chosen site into a preallocated float32 array of its shape.
class CacheHook : public mha::SiteHook<float> {
 public:
  explicit CacheHook(std::vector<mha::SiteShape> sites)
      : sites_(std::move(sites)), written_(new std::atomic<std::size_t>[sites_.size()]) {
    for (std::size_t i = 0; i < sites_.size(); ++i) written_[i] = 0;
    for (const mha::SiteShape& s : sites_) {
      arrays_.emplace_back(py_shape(s.shape));
      data_.push_back(arrays_.back().mutable_data());
    }
  }
  bool wants(const mha::Site& site) const override { return index(site) >= 0; }
  void tensor(const mha::Site& site, float* data, std::size_t rows, std::size_t cols,
              std::size_t ld) override {
    const long i = index(site);
    if (i < 0) return;
    check(i, rows * cols);
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(data_[i] + r * cols, data + r * ld, cols * sizeof(float));
    written_[i] += rows * cols;
  }
  void block(const mha::Site& site, std::size_t b, std::size_t head, std::size_t t0,
             std::size_t rows, float* data, std::size_t ld) override {
    const long i = index(site);
    if (i < 0) return;
    const std::vector<std::size_t>& s = sites_[i].shape;  // (B, h, T, S)
    float* to = data_[i] + ((b * s[1] + head) * s[2] + t0) * s[3];
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(to + r * s[3], data + r * ld, s[3] * sizeof(float));
    written_[i] += rows * s[3];
  }
  // The arrays, once every site was shown whole (as SiteFiles::check_complete).
  py::dict result() const {
    for (std::size_t i = 0; i < sites_.size(); ++i)
      if (written_[i] != sites_[i].elements())
        throw mha::Error(mha::ErrorKind::runtime,
                         sites_[i].name + ": the pass computed " + std::to_string(written_[i]) +
                             " of its " + std::to_string(sites_[i].elements()) + " values");
    py::dict out;
    for (std::size_t i = 0; i < sites_.size(); ++i) out[py::str(sites_[i].name)] = arrays_[i];
    return out;
  }

 private:
  long index(const mha::Site& site) const {
    for (std::size_t i = 0; i < sites_.size(); ++i)
      if (sites_[i].site == site) return static_cast<long>(i);
    return -1;
  }
  void check(long i, std::size_t n) const {
    if (n != sites_[i].elements())
      throw mha::Error(mha::ErrorKind::runtime, sites_[i].name + ": the pass gave " +
                                                    std::to_string(n) + " values, expected " +
                                                    std::to_string(sites_[i].elements()));
  }
  std::vector<mha::SiteShape> sites_;
  std::unique_ptr<std::atomic<std::size_t>[]> written_;  // values shown, per site
  std::vector<py::array_t<float>> arrays_;
  std::vector<float*> data_;
};

// A Python function's failure, carried out of the pass (the Python error is
// set again on the calling thread's indicator).
struct HookFailed {};

// Calls fn(array, name) at each chosen site, on the pass's thread with the
// GIL; what the array holds afterwards (or what fn returns, of the same shape)
// is what the pass goes on with.
class EditHook : public mha::SiteHook<float> {
 public:
  EditHook(std::vector<mha::SiteShape> sites, std::vector<py::object> fns)
      : sites_(std::move(sites)), fns_(std::move(fns)) {}
  bool wants(const mha::Site& site) const override { return index(site) >= 0; }
  void tensor(const mha::Site& site, float* data, std::size_t rows, std::size_t cols,
              std::size_t ld) override {
    const long i = index(site);
    if (i < 0) return;
    py::gil_scoped_acquire gil;
    try {
      edit(sites_[i], fns_[i], data, rows, cols, ld);
    } catch (py::error_already_set& e) {
      e.restore();
      throw HookFailed{};
    }
  }

 private:
  static void edit(const mha::SiteShape& s, const py::object& fn, float* data, std::size_t rows,
                   std::size_t cols, std::size_t ld) {
    const std::vector<py::ssize_t> shape = py_shape(s.shape);
    if (rows * cols != s.elements())
      throw mha::Error(mha::ErrorKind::runtime, s.name + ": the pass gave an unexpected shape");
    py::array_t<float> a(shape);
    float* p = a.mutable_data();
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(p + r * cols, data + r * ld, cols * 4);
    py::object got = fn(a, s.name);
    py::array_t<float, py::array::c_style | py::array::forcecast> back = a;
    if (!got.is_none()) {
      const py::array given = py::array::ensure(got);
      if (!given)
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "run_with_hooks: the hook of '" + s.name +
                             "' returned something that is not an array; expected None (an "
                             "edit in place) or an array of shape " +
                             shape_text(shape));
      const std::vector<py::ssize_t> gs(given.shape(), given.shape() + given.ndim());
      if (gs != shape)
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "run_with_hooks: the hook of '" + s.name + "' returned shape " +
                             shape_text(gs) + "; expected the site's shape " + shape_text(shape));
      back = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(given);
    }
    const float* q = back.data();
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(data + r * ld, q + r * cols, cols * 4);
  }
  long index(const mha::Site& site) const {
    for (std::size_t i = 0; i < sites_.size(); ++i)
      if (sites_[i].site == site) return static_cast<long>(i);
    return -1;
  }
  std::vector<mha::SiteShape> sites_;
  std::vector<py::object> fns_;
};

// hooks={name or pattern: fn}: each site a key matches, with its function (a
// site two keys match: an error, as the order of two edits would be a guess).
std::pair<std::vector<mha::SiteShape>, std::vector<py::object>> hooked_sites(
    const std::vector<mha::SiteShape>& sites, const py::dict& hooks) {
  std::vector<mha::SiteShape> chosen;
  std::vector<py::object> fns;
  if (hooks.empty())
    throw mha::Error(mha::ErrorKind::invalid_input,
                     "run_with_hooks: hooks= is empty; expected {site name or pattern: fn}");
  for (const auto& [key, fn] : hooks) {
    if (!py::isinstance<py::str>(key) || !PyCallable_Check(fn.ptr()))
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "run_with_hooks: hooks= maps site names or patterns (str) to functions "
                       "fn(array, name)");
    const std::string pattern = key.cast<std::string>();
    for (const mha::SiteShape& s : mha::select_sites(sites, {pattern}, "run_with_hooks")) {
      if (mha::blockwise(s.site.kind))
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "run_with_hooks: '" + s.name +
                             "' arrives in blocks from the pass's worker threads and cannot be "
                             "edited from Python; edit hook_z, hook_q/k/v or the residual "
                             "stream, or read it with run_with_cache");
      for (const mha::SiteShape& c : chosen)
        if (c.site == s.site)
          throw mha::Error(mha::ErrorKind::invalid_input,
                           "run_with_hooks: '" + s.name + "' is matched by two keys of hooks=");
      chosen.push_back(s);
      fns.push_back(py::reinterpret_borrow<py::object>(fn));
    }
  }
  return {chosen, fns};
}

std::uint64_t cache_bytes(const std::vector<mha::SiteShape>& sites) {
  std::uint64_t n = 0;
  for (const mha::SiteShape& s : sites) n += std::uint64_t{4} * s.elements();
  return n;
}

}  // namespace

void add_sites(py::handle model_class, const HookedCall& call) {
  py::object cls = py::reinterpret_borrow<py::object>(model_class);
  cls.attr("run_with_cache") = py::cpp_function(
      [call](py::handle self, const py::object& input, const py::object& names,
             const py::object& target_text) {
        std::unique_ptr<CacheHook> hook;
        call(self, input, target_text, false,  // the maps only as sites
             [&](const mha::ModelConfig& c, std::size_t B, std::size_t T, std::size_t T_dec,
                 std::uint64_t room) -> mha::SiteHook<float>* {
               std::vector<mha::SiteShape> sites =
                   chosen_sites(mha::model_sites(c, B, T, T_dec), names);
               const std::uint64_t bytes = cache_bytes(sites);
               if (bytes > room)
                 throw mha::Error(mha::ErrorKind::invalid_input,
                                  "run_with_cache: the sites chosen need " +
                                      mha::format_bytes(double(bytes)) +
                                      " beside the pass, over max_memory; "
                                      "choose fewer with names=");
               hook = std::make_unique<CacheHook>(std::move(sites));
               return hook.get();
             });
        return hook ? hook->result() : py::dict();
      },
      py::is_method(cls), py::name("run_with_cache"), py::arg("input"), py::kw_only(),
      py::arg("names") = py::none(), py::arg("target_text") = py::none(),
      "run_with_cache(input, *, names=None, target_text=None) -> dict\n\n"
      "The activations at the model's sites (docs/models.md), {name: float32 array} in the "
      "sites' shapes: names= a list of site names or patterns ('blocks.*.attn.hook_z', "
      "'hook_resid_post': every layer's), a callable filter f(name) -> bool, or None (every "
      "site). input and target_text= as model(...).");
  cls.attr("run_with_hooks") = py::cpp_function(
      [call](py::handle self, const py::object& input, const py::dict& hooks,
             const py::object& target_text) {
        std::unique_ptr<EditHook> hook;
        try {
          return call(self, input, target_text, true,  // model(input)'s result
                      [&](const mha::ModelConfig& c, std::size_t B, std::size_t T,
                          std::size_t T_dec, std::uint64_t) -> mha::SiteHook<float>* {
                        auto [sites, fns] = hooked_sites(mha::model_sites(c, B, T, T_dec), hooks);
                        hook = std::make_unique<EditHook>(std::move(sites), std::move(fns));
                        return hook.get();
                      });
        } catch (const HookFailed&) {
          throw py::error_already_set();
        }
      },
      py::is_method(cls), py::name("run_with_hooks"), py::arg("input"), py::kw_only(),
      py::arg("hooks"), py::arg("target_text") = py::none(),
      "run_with_hooks(input, *, hooks, target_text=None) -> dict\n\n"
      "model(input) with hooks={site name or pattern: fn}: fn(array, name) sees each matching "
      "site's activation (float32, the site's shape) as the pass computes it and may edit the "
      "array in place or return a replacement of the same shape, which the pass goes on with "
      "(zeroing a head's hook_z, patching hook_resid_pre). Returns what model(input) returns.");
}

}  // namespace mha_python
