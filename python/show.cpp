// mha.show (docs/python.md, "In a notebook"): the page `mha view` writes, for
// a result held in memory or for a run's directory, as an object a notebook
// displays in the cell (_repr_html_).
//
//   model = mha.Model("gpt2")
//   mha.show(model("The cat sat on the mat."))   # the last line of a cell
//
// The page goes into an <iframe srcdoc>: its own document and window, so
// several views on one notebook page share no element id or global, and the
// notebook's styles do not reach it. The maps are read by the viewer's own
// code (view/attention_view.hpp) from arrays provided in memory
// (io/provided_input.hpp), with the checks and limits of `mha view`.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/config/memory.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/run/view_run.hpp"
#include "mha/view/attention_view.hpp"
#include "module.hpp"

namespace py = pybind11;

namespace {

// The page is held in the notebook's .ipynb and in the browser's memory for
// every view shown: above this a view is refused unless max_mb says more.
constexpr double kDefaultMaxMb = 20;

struct PyView {
  std::string html;   // the whole page
  std::string title;  // what it shows
  int height = 760;   // of the frame in a cell, CSS pixels

  // The page as an <iframe srcdoc="..."> attribute: '&' and '"' escaped are
  // enough inside a double-quoted attribute.
  std::string repr_html() const {
    std::string doc;
    doc.reserve(html.size() + html.size() / 16);
    for (char c : html) {
      if (c == '&')
        doc += "&amp;";
      else if (c == '"')
        doc += "&quot;";
      else
        doc += c;
    }
    return "<iframe class=\"mha-view\" title=\"mha view\" style=\"width: 100%; height: " +
           std::to_string(height) + "px; border: 1px solid #d0d7de; resize: vertical;\" srcdoc=\"" +
           doc + "\"></iframe>";
  }
};

// Provided arrays, released when the call ends.
struct Provided {
  std::vector<std::string> paths;
  ~Provided() {
    for (const auto& p : paths) mha::release_provided(p);
  }
  std::string add(const py::handle& v, const std::string& what) {
    py::object obj = py::reinterpret_borrow<py::object>(v);
    if (py::hasattr(obj, "detach")) obj = obj.attr("detach")().attr("cpu")().attr("numpy")();
    paths.push_back(mha::provide_npy(mha_python::to_npy(py::array::ensure(obj), what)));
    return paths.back();
  }
};

bool is_array(const py::handle& v) {
  return py::isinstance<py::array>(v) || py::hasattr(v, "detach") || py::hasattr(v, "__array__");
}

// How an array named `name` is read: the maps of a run's file of that stem.
mha::MapsToView maps_named(const std::string& name, const std::string& path,
                           const py::handle& array) {
  mha::MapsToView m;
  m.name = name;
  m.path = path;
  const py::array a = py::array::ensure(array);
  std::vector<std::size_t> shape;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) shape.push_back(static_cast<std::size_t>(a.shape(i)));
  if (name == "rollout") {  // (layers, B, T, T): the heads' mean, one map per layer
    if (shape.size() != 4)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "mha.show: rollout of shape " + mha::shape_str(shape) +
                           "; expected (layers, B, T, T), as Model.rollout returns");
    m.as_shape = {shape[0], shape[1], 1, shape[2], shape[3]};
    m.head_axis = false;
  } else if (name == "flow") {  // (B, T, T): one map to the last layer
    if (shape.size() != 3)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "mha.show: flow of shape " + mha::shape_str(shape) +
                           "; expected (B, T, T), as Model.attention_flow returns");
    m.as_shape = {1, shape[0], 1, shape[1], shape[2]};
    m.head_axis = false;
  } else if (name == "attention_norms") {
    m.weights = false;  // norms of weighted vectors, not weights in [0, 1]
  } else if (name != "attention" && name != "self_attention" && name != "cross_attention" &&
             name != "encoder_attention" && name != "decoder_attention") {
    throw mha::Error(mha::ErrorKind::invalid_input,
                     "mha.show: name '" + name +
                         "'; expected attention, self_attention, encoder_attention, "
                         "decoder_attention, cross_attention, rollout, flow or attention_norms");
  }
  return m;
}

// Token labels: a list of strings (one sequence) or a list of such lists.
std::vector<std::vector<std::string>> token_lists(const py::handle& v, const char* what) {
  std::vector<std::vector<std::string>> rows;
  if (v.is_none()) return rows;
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v))
    throw mha::Error(mha::ErrorKind::invalid_input,
                     std::string("mha.show: ") + what +
                         ": expected a list of strings, or one list per batch row");
  const py::list list = py::list(py::reinterpret_borrow<py::object>(v));
  const bool nested = list.size() > 0 && !py::isinstance<py::str>(list[0]);
  auto row = [&](const py::handle& r) {
    std::vector<std::string> out;
    if (!py::isinstance<py::list>(r) && !py::isinstance<py::tuple>(r))
      throw mha::Error(mha::ErrorKind::invalid_input,
                       std::string("mha.show: ") + what +
                           ": expected a list of strings, or one list per batch row");
    for (const py::handle& t : r) {
      if (!py::isinstance<py::str>(t))
        throw mha::Error(mha::ErrorKind::invalid_input,
                         std::string("mha.show: ") + what +
                             ": expected a list of strings, or one list per batch row");
      out.push_back(t.cast<std::string>());
    }
    return out;
  };
  if (nested)
    for (const py::handle& r : list) rows.push_back(row(r));
  else
    rows.push_back(row(list));
  return rows;
}

// The message of an error about a provided array names the array, not its
// "<memory:N>" path.
[[noreturn]] void rethrow_named(const mha::Error& e, const Provided& provided,
                                const std::vector<std::string>& names) {
  std::string message = e.what();
  for (std::size_t i = 0; i < provided.paths.size() && i < names.size(); ++i)
    for (std::size_t at; (at = message.find(provided.paths[i])) != std::string::npos;)
      message.replace(at, provided.paths[i].size(), "mha.show: " + names[i]);
  throw mha::Error(e.kind(), message);
}

PyView show(const py::object& result, const std::optional<std::string>& name,
            const py::object& tokens, std::optional<mha_python::Int> batch_index,
            mha_python::Int height, double max_mb) {
  if (height < 100 || height > 20000)
    throw mha::Error(
        mha::ErrorKind::invalid_input,
        "mha.show: height " + std::to_string(height.value) + "; expected 100 to 20000 pixels");
  if (!(max_mb > 0) || !std::isfinite(max_mb))
    throw mha::Error(mha::ErrorKind::invalid_input,
                     "mha.show: max_mb must be a positive number of megabytes");
  mha::ViewOptions options;
  // As `mha view --batch_index` reads it: a negative index wraps (and is refused by the range).
  if (batch_index) options.batch_index = static_cast<std::size_t>(batch_index->value);
  PyView view;
  view.height = static_cast<int>(height.value);
  const py::module_ os = py::module_::import("os");
  if (py::isinstance<py::str>(result) || py::isinstance(result, os.attr("PathLike"))) {
    if (name || !tokens.is_none())
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "mha.show: name= and tokens= are for arrays; a run directory's maps and "
                       "tokens are its own");
    view.title = py::str(os.attr("fspath")(result));
    py::gil_scoped_release release;
    view.html = mha::run_attention_page(view.title, options);
  } else {
    // The maps in the result, named as a run's files: a Model call's dict, a
    // dict of such arrays, a Layer call's (output, attention[, cross]) tuple,
    // or one array (`name`, default attention).
    std::vector<std::pair<std::string, py::object>> arrays;
    py::object token_rows = tokens, piece_rows = py::none();
    if (py::isinstance<py::dict>(result)) {
      const py::dict d = py::reinterpret_borrow<py::dict>(result);
      for (const char* key :
           {"attention", "self_attention", "encoder_attention", "decoder_attention",
            "cross_attention", "rollout", "flow", "attention_norms"})
        if (d.contains(key) && !d[key].is_none())
          arrays.emplace_back(key, py::reinterpret_borrow<py::object>(d[key]));
      if (token_rows.is_none() && d.contains("tokens")) token_rows = d["tokens"];
      if (d.contains("pieces")) piece_rows = d["pieces"];
      view.title = d.contains("ids") && d.contains("output") ? "mha.show: a Model call"
                                                             : "mha.show: a dict of maps";
      if (arrays.empty())
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "mha.show: the dict holds no attention maps (keys attention, "
                         "self_attention, cross_attention, rollout, flow, attention_norms); a "
                         "Model call gives them unless attention=False");
    } else if (py::isinstance<py::tuple>(result)) {  // (output, attention[, cross])
      const py::tuple t = py::reinterpret_borrow<py::tuple>(result);
      if (t.size() >= 2 && !t[1].is_none()) {
        const py::array a = py::array::ensure(t[1]);
        arrays.emplace_back(a && a.ndim() == 5 ? "self_attention" : "attention", t[1]);
      }
      if (t.size() >= 3 && !t[2].is_none()) arrays.emplace_back("cross_attention", t[2]);
      view.title = "mha.show: a Layer call";
      if (arrays.empty())
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "mha.show: the tuple holds no attention maps; expected a Layer call's "
                         "(output, attention[, cross_attention]) made with save_attention=True");
    } else if (is_array(result)) {
      arrays.emplace_back(name.value_or("attention"), result);
      view.title = "mha.show: " + name.value_or("attention");
    } else {
      throw mha::Error(mha::ErrorKind::invalid_input,
                       "mha.show: a " + std::string(py::str(result.get_type().attr("__name__"))) +
                           "; expected a Model or Layer call's result, an array of maps, or a "
                           "run's out_dir");
    }
    Provided provided;
    std::vector<std::string> names;
    std::vector<mha::MapsToView> maps;
    for (const auto& [n, a] : arrays) {
      maps.push_back(maps_named(n, provided.add(a, "mha.show: " + n), a));
      names.push_back(n);
    }
    mha::ViewedRun run;
    run.token_labels = token_lists(token_rows, "tokens");
    run.token_pieces = token_lists(piece_rows, "pieces");
    // A Model call's padded batch: each row's real tokens (its "lengths").
    const auto lengths = [](const py::dict& d) {
      return d.contains("lengths") && !d["lengths"].is_none()
                 ? d["lengths"].cast<std::vector<std::size_t>>()
                 : std::vector<std::size_t>{};
    };
    nlohmann::json page = {{"mode", "python"}, {"source", view.title}};
    mha::ExtrasToView extras;
    if (py::isinstance<py::dict>(result)) {
      const py::dict d = py::reinterpret_borrow<py::dict>(result);
      // An encoder-decoder call: the target's tokens label the decoder's queries.
      if (d.contains("target") && py::isinstance<py::dict>(d["target"])) {
        const py::dict target = d["target"];
        if (target.contains("tokens")) run.target_labels = token_lists(target["tokens"], "tokens");
        if (target.contains("pieces")) run.target_pieces = token_lists(target["pieces"], "pieces");
        run.target_lengths = lengths(target);
      }
      run.lengths = lengths(d);
      // A vision model's call: the images it saw, on its patch grid.
      if (d.contains("images") && !d["images"].is_none() && d.contains("patch_grid")) {
        extras.images = provided.add(d["images"], "mha.show: images");
        names.push_back("images");
        page["input"] = {{"patch_grid", d["patch_grid"].cast<std::vector<std::size_t>>()}};
      }
      // A Model call's layers and heads and how q and k give the weights, as run.json's
      // "attention" holds them; its q and k (qk=True) for the neuron view.
      if (d.contains("attention_info") && py::isinstance<py::dict>(d["attention_info"]))
        page["attention"] = nlohmann::json::parse(
            py::module_::import("json").attr("dumps")(d["attention_info"]).cast<std::string>());
      if (d.contains("q") && d.contains("k") && !d["q"].is_none() && !d["k"].is_none()) {
        extras.q = provided.add(d["q"], "mha.show: q");
        extras.k = provided.add(d["k"], "mha.show: k");
        names.insert(names.end(), {"q", "k"});
      }
    }
    run.page = std::move(page);
    try {
      py::gil_scoped_release release;
      view.html = mha::attention_page(
          mha::attention_view_of(view.title, maps, std::move(run), options, extras));
    } catch (const mha::Error& e) {
      rethrow_named(e, provided, names);
    }
  }
  const double bytes = static_cast<double>(view.html.size());
  if (bytes > max_mb * 1e6)
    throw mha::Error(mha::ErrorKind::invalid_input,
                     "mha.show: the view's page is " + mha::format_bytes(bytes) +
                         ", above max_mb=" + py::str(py::float_(max_mb)).cast<std::string>() +
                         " (a notebook keeps it in its .ipynb); show fewer maps (the call's "
                         "layer_indices= and head_indices=, or batch_index= here) or raise "
                         "max_mb");
  return view;
}

}  // namespace

namespace mha_python {

void add_show(py::module_& m) {
  py::class_<PyView>(m, "View",
                     "The attention page of mha.show: displayed inline by Jupyter "
                     "(_repr_html_); `html` is the whole page, as `mha view` writes it.")
      .def_readonly("html", &PyView::html, "the page: HTML, script and data inline")
      .def_readonly("title", &PyView::title)
      .def_readwrite("height", &PyView::height, "the frame's height in a cell, CSS pixels")
      .def("_repr_html_", &PyView::repr_html)
      .def("__repr__", [](const PyView& v) {
        return "<mha.View " + v.title + ", " +
               mha::format_bytes(static_cast<double>(v.html.size())) + ">";
      });
  m.def("show", &show, py::arg("result"), py::kw_only(), py::arg("name") = py::none(),
        py::arg("tokens") = py::none(), py::arg("batch_index") = py::none(),
        py::arg("height") = 760, py::arg("max_mb") = kDefaultMaxMb,
        "show(result, *, name=None, tokens=None, batch_index=None, height=760, max_mb=20) -> "
        "View\n\nThe interactive page of `mha view`, shown in a notebook cell. result: a "
        "Model call's dict (its maps and tokens), a Layer call's (output, attention[, cross]), "
        "an array of maps (name= attention, self_attention, cross_attention, rollout, flow or "
        "attention_norms, read as the run's file of that name; tokens= labels it), or a run's "
        "or analysis's out_dir. batch_index keeps one batch row. A page over max_mb "
        "megabytes raises ValueError.");
}

}  // namespace mha_python
