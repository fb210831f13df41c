// mha.Model (docs/python.md): a whole checkpoint (mha/run/model_run.hpp)
// called on text, token ids or images, and its analysis methods: thin calls
// into the analyses' registry (mha/analysis/analyze.hpp), as `mha analyze`
// runs them, with the same checks and messages.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/analysis/analysis.hpp"
#include "mha/analysis/analyze.hpp"
#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/config/memory.hpp"
#include "mha/io/image.hpp"
#include "mha/pipeline/seq2seq.hpp"
#include "mha/pipeline/site_hooks.hpp"
#include "mha/run/model_options.hpp"
#include "mha/run/model_run.hpp"
#include "mha/run/run_json.hpp"
#include "module.hpp"

namespace py = pybind11;
using nlohmann::json;

namespace {

using mha_python::json_to_py;

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

  // The analyses of docs/analyses.md, one method each: the registry's entries
  // (mha/analysis/analysis.hpp) as `mha analyze --method NAME` runs them,
  // with the same checks and messages, the arrays kept in memory.
  void check_memory(std::uint64_t bytes, const char* what) const {
    if (bytes > max_memory_)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       std::string(what) + ": needs about " + mha::format_bytes(double(bytes)) +
                           ", over max_memory " + mha::format_bytes(double(max_memory_)));
  }

  // An analysis's options as `mha analyze` takes them, for the one method.
  mha::AnalyzeConfig analysis(const char* method, const mha_python::Indices& layers,
                              const mha_python::Indices& heads, mha_python::Int threads) const {
    mha::AnalyzeConfig c;
    c.model = model_.checkpoint().dir();
    c.dtype = model_.compute();
    c.methods = {method};
    c.layers = layers;
    c.heads = heads;
    c.threads = threads;
    return c;
  }

  // The method run on `input` (and an encoder-decoder's target, `labels`):
  // its arrays by file name and its summary.
  mha::AnalysisResult analyze(const mha::AnalyzeConfig& c, const py::object& input,
                              const py::object& labels) const {
    if (seq2seq_analysis(labels, c.methods[0].c_str())) {
      mha::Seq2SeqSides sides;
      sides.source = input_of(input);
      const mha::ModelInput target = input_of(labels);
      if (target.B != sides.source.B)
        throw mha::Error(mha::ErrorKind::invalid_input,
                         "labels: " + std::to_string(target.B) + " target rows for " +
                             std::to_string(sides.source.B) +
                             " source rows; expected one target per source");
      py::gil_scoped_release release;  // the passes run without the GIL
      sides.target = mha::seq2seq_target(model_, target);
      return mha::analyze_seq2seq_input(model_, c, std::move(sides), max_memory_);
    }
    mha::ModelInput in = input.is_none() ? mha::ModelInput{} : input_of(input);
    py::gil_scoped_release release;
    return mha::analyze_input(model_, c, std::move(in), max_memory_);
  }

  // An encoder-decoder's analyses (docs/analyses.md "Encoder-decoders") take
  // its target as target_text= (labels=, transformers' name for the
  // teacher-forced target, is its older name); other models refuse one, and
  // an encoder-decoder refuses every analysis without it, and those it does
  // not have (the registry's Analysis::encoder_decoder).
  bool seq2seq_analysis(const py::object& labels, const char* method) const {
    const mha::ModelConfig& c = model_.config();
    const std::string& dir = model_.checkpoint().dir();
    if (!labels.is_none() && !c.encoder_decoder)
      throw mha::Error(mha::ErrorKind::invalid_input,
                       std::string(method) + ": target_text=: a " + c.model_type + " (" + dir +
                           ") is not an encoder-decoder; a target is for T5 and BART checkpoints");
    if (!c.encoder_decoder) return false;
    const mha::Analysis* a = mha::find_analysis(method);
    if (!a || !a->encoder_decoder)
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

  // The array written to `name`, as NumPy; logit_lens_rank.npy's ranks as int64.
  static py::array array(mha::AnalysisResult& r, const std::string& name) {
    return mha_python::to_numpy(r.arrays.at(name));
  }
  // {"encoder", "decoder", "cross"}: an encoder-decoder's arrays of each kind of map.
  static py::dict kinds(mha::AnalysisResult& r, const std::string& suffix) {
    py::dict out;
    for (const char* kind : {"encoder", "decoder", "cross"})
      out[kind] = array(r, std::string(kind) + suffix);
    return out;
  }

  py::dict loss(const py::object& input, mha_python::Int threads, const py::object& labels_alias,
                const py::object& target_text) const {
    const py::object labels = target_of(target_text, labels_alias, "labels");
    mha::AnalysisResult r =
        analyze(analysis("loss", std::nullopt, std::nullopt, threads), input, labels);
    py::dict out;
    out["loss"] = array(r, "loss.npy");
    out["mean"] = r.summary["loss"]["mean"].get<double>();
    out["perplexity"] = r.summary["loss"]["perplexity"].get<double>();
    out["tokens"] = r.summary["loss"]["tokens"].get<std::size_t>();
    return out;
  }

  py::dict logit_lens(const py::object& input, mha_python::Int top_k,
                      mha_python::Int threads) const {
    mha::AnalyzeConfig c = analysis("logit_lens", std::nullopt, std::nullopt, threads);
    c.top_k = top_k;
    mha::AnalysisResult r = analyze(c, input, py::none());
    py::dict out;
    out["p_next"] = array(r, "logit_lens_p_next.npy");
    out["rank"] = array(r, "logit_lens_rank.npy").attr("astype")("int64");
    out["top_ids"] = array(r, "logit_lens_top_ids.npy");
    out["top_p"] = array(r, "logit_lens_top_p.npy");
    return out;
  }

  py::object rollout(const py::object& input, mha_python::Int threads,
                     const py::object& labels_alias, const py::object& target_text) const {
    const py::object labels = target_of(target_text, labels_alias, "labels");
    mha::AnalysisResult r =
        analyze(analysis("rollout", std::nullopt, std::nullopt, threads), input, labels);
    if (!labels.is_none()) return kinds(r, "_rollout.npy");
    return array(r, "rollout.npy");
  }

  py::object flow(const py::object& input, mha_python::Int threads) const {
    mha::AnalysisResult r =
        analyze(analysis("flow", std::nullopt, std::nullopt, threads), input, py::none());
    return array(r, "flow.npy");
  }

  py::object norms(const py::object& input, const mha_python::Indices& layers,
                   const mha_python::Indices& heads, mha_python::Int threads,
                   const py::object& labels_alias, const py::object& target_text) const {
    const py::object labels = target_of(target_text, labels_alias, "labels");
    mha::AnalysisResult r = analyze(analysis("norms", layers, heads, threads), input, labels);
    if (!labels.is_none()) return kinds(r, "_attention_norms.npy");
    return array(r, "attention_norms.npy");
  }

  py::dict detectors(const py::object& input, const mha_python::Indices& layers,
                     const mha_python::Indices& heads, mha_python::Int threads) const {
    mha::AnalysisResult r =
        analyze(analysis("detectors", layers, heads, threads), input, py::none());
    py::dict out;
    out["detectors"] = r.summary["detectors"].get<std::vector<std::string>>();
    out["head_scores"] = array(r, "head_scores.npy");
    return out;
  }

  py::dict ablation(const py::object& input, const std::string& kind, const std::string& metric,
                    const std::optional<std::string>& target,
                    const std::optional<std::string>& foil, const mha_python::Indices& layers,
                    const mha_python::Indices& heads, mha_python::Int threads,
                    const py::object& labels_alias, const py::object& target_text) const {
    const py::object labels = target_of(target_text, labels_alias, "labels");
    mha::AnalyzeConfig c = analysis("ablation", layers, heads, threads);
    c.ablation = kind, c.metric = metric, c.target = target, c.foil = foil;
    mha::AnalysisResult r = analyze(c, input, labels);
    const nlohmann::json& s = r.summary["ablation"];
    py::dict out;
    if (!labels.is_none()) {
      out = kinds(r, "_ablation.npy");
    } else {
      out["effect"] = array(r, "ablation.npy");
    }
    out["clean"] = s["clean"].get<std::vector<double>>();
    out["metric"] = s["metric"].get<std::string>();
    if (s.contains("predicted")) {  // the class each row's clean run predicts (loss's class)
      py::list predicted;
      for (const nlohmann::json& p : s["predicted"])
        predicted.append(
            py::make_tuple(p["id"].get<std::int32_t>(), p["label"].get<std::string>()));
      out["predicted"] = predicted;
    }
    return out;
  }

  py::dict patching(const std::string& clean, const std::string& corrupt, const std::string& metric,
                    const std::optional<std::string>& target,
                    const std::optional<std::string>& foil, const mha_python::Indices& layers,
                    const mha_python::Indices& heads, mha_python::Int threads) const {
    mha::AnalyzeConfig c = analysis("patching", layers, heads, threads);
    c.clean = clean, c.corrupt = corrupt, c.metric = metric, c.target = target, c.foil = foil;
    mha::AnalysisResult r = analyze(c, py::none(), py::none());
    const nlohmann::json& s = r.summary["patching"];
    py::dict out;
    out["heads"] = array(r, "patch_heads.npy");
    out["resid"] = array(r, "patch_resid.npy");
    out["clean"] = s["clean"].get<double>();
    out["corrupt"] = s["corrupt"].get<double>();
    out["metric"] = s["metric"].get<std::string>();
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

void mha_python::add_model(py::module_& m) {
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
          "rollout", &PyModel::rollout, py::arg("input"), py::kw_only(), py::arg("threads") = 0,
          py::arg("labels") = py::none(), py::arg("target_text") = py::none(),
          "rollout(input, target_text=None) -> array (layers, B, T, T): attention rollout (Abnar & "
          "Zuidema 2020); for an encoder-decoder with target_text= (its target), a dict of the "
          "encoder's, the decoder's and the cross rollout")
      .def("flow", &PyModel::flow, py::arg("input"), py::kw_only(), py::arg("threads") = 0,
           "flow(input) -> array (B, T, T), mha analyze --method flow: attention flow to the last "
           "layer (Abnar & "
           "Zuidema 2020), up to 128 tokens")
      .def("norms", &PyModel::norms, py::arg("input"), py::kw_only(),
           py::arg("layer_indices") = py::none(), py::arg("head_indices") = py::none(),
           py::arg("threads") = 0, py::arg("labels") = py::none(),
           py::arg("target_text") = py::none(),
           "norms(input, target_text=None) -> array (layers, B, heads, T, T): ||a_ij "
           "f_h(x_j)|| (Kobayashi et al. 2020), mha analyze --method norms; for an "
           "encoder-decoder with target_text=, a dict of "
           "the encoder's, the decoder's and the cross-attention's")
      .def("detectors", &PyModel::detectors, py::arg("input"), py::kw_only(),
           py::arg("layer_indices") = py::none(), py::arg("head_indices") = py::none(),
           py::arg("threads") = 0,
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
  mha_python::add_sites(model_class, &PyModel::call_with_hook);  // run_with_cache, run_with_hooks
}
