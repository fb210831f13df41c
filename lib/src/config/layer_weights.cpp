#include "mha/config/layer_weights.hpp"

#include <algorithm>
#include <set>

#include "mha/base/error.hpp"
#include "mha/config/config.hpp"
#include "mha/config/rng.hpp"

namespace mha {

namespace {

using Arrays = std::map<std::string, NpyArray>;

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

// "layers.3.rest" -> (3, "rest"); other names -> (npos, name).
std::pair<std::size_t, std::string> split_layer(const std::string& name) {
  if (!starts_with(name, "layers.")) return {std::string::npos, name};
  const std::size_t dot = name.find('.', 7);
  const std::string digits = name.substr(7, dot == std::string::npos ? dot : dot - 7);
  if (dot == std::string::npos || digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return {std::string::npos, name};
  return {std::stoul(digits), name.substr(dot + 1)};
}

// PyTorch's per-layer names (after "layers.N.", or alone for one layer) ->
// native ones; attention blocks are converted by to_native as a whole.
NativeWeights torch_layers_to_native(const Arrays& in, const std::string& path) {
  // A module prefix ("transformer_encoder.") before layers.N. or self_attn.
  std::string prefix;
  for (const auto& [name, a] : in) {
    for (const char* anchor : {"layers.", "self_attn."}) {
      const std::size_t at = name.find(anchor);
      if (at != std::string::npos && (at == 0 || name[at - 1] == '.')) {
        prefix = name.substr(0, at);
        break;
      }
    }
    if (!prefix.empty()) break;
  }
  std::map<std::string, Arrays> attention;  // "layers.0.self_attn." -> its torch tensors
  NativeWeights out;
  out.format = WeightsFormat::torch;
  for (const auto& entry : in) {  // no structured bindings: the lambda below captures them
    const std::string& full = entry.first;
    const NpyArray& array = entry.second;
    if (!starts_with(full, prefix))
      fail_input(path + ": unknown tensor '" + full + "' (the others start with '" + prefix + "')");
    const std::string name = full.substr(prefix.size());
    const std::pair<std::size_t, std::string> split = split_layer(name);
    const std::size_t layer = split.first;
    const std::string& rest = split.second;
    std::string native_layer =
        "layers." + std::to_string(layer == std::string::npos ? 0 : layer) + ".";
    if (layer == std::string::npos && starts_with(name, "norm.")) {  // the stack's final norm
      const std::string part = name.substr(5);
      if (part != "weight" && part != "bias") fail_input(path + ": unknown tensor '" + full + "'");
      out.arrays[std::string("final_norm.") + (part == "weight" ? "gamma" : "beta")] = array;
      continue;
    }
    bool known = false;
    for (const char* block : {"self_attn.", "multihead_attn."}) {
      if (starts_with(rest, block)) {
        const std::string target = native_layer + (block[0] == 's' ? "self_attn." : "cross_attn.");
        attention[target][rest.substr(std::string(block).size())] = array;
        known = true;
      }
    }
    if (known) continue;
    auto linear = [&](const char* torch, const char* W, const char* b) {
      if (rest == std::string(torch) + ".weight") {
        if (array.shape.size() != 2)
          fail_input(path + ": " + full + " has shape " + shape_str(array.shape) +
                     ", expected a matrix");
        out.arrays[native_layer + "ffn." + W] = transpose_2d(array);
        return true;
      }
      if (rest == std::string(torch) + ".bias")
        return out.arrays[native_layer + "ffn." + b] = array, true;
      return false;
    };
    if (linear("linear1", "W_1", "b_1") || linear("linear2", "W_2", "b_2")) continue;
    for (const char* norm : {"norm1", "norm2", "norm3"}) {
      if (rest == std::string(norm) + ".weight")
        out.arrays[native_layer + norm + ".gamma"] = array, known = true;
      if (rest == std::string(norm) + ".bias")
        out.arrays[native_layer + norm + ".beta"] = array, known = true;
    }
    if (!known)
      fail_input(path + ": unknown tensor '" + full +
                 "' in a PyTorch nn.TransformerEncoder/Decoder(Layer) state_dict");
  }
  for (const auto& [target, arrays] : attention) {
    const NativeWeights block =
        to_native(arrays, WeightsFormat::torch, path + ":" + prefix + target);
    for (const auto& [name, array] : block.arrays) out.arrays[target + name] = array;
  }
  return out;
}

bool is_native_layer_name(const std::string& name) {
  static const std::set<std::string> attention = {"W_q", "b_q", "W_k", "b_k",
                                                  "W_v", "b_v", "W_o", "b_o"};
  static const std::set<std::string> other = {
      "ffn.W_1",    "ffn.b_1",     "ffn.W_2",    "ffn.b_2",     "norm1.gamma",
      "norm1.beta", "norm2.gamma", "norm2.beta", "norm3.gamma", "norm3.beta"};
  if (name == "final_norm.gamma" || name == "final_norm.beta") return true;
  const auto [layer, rest] = split_layer(name);
  if (layer == std::string::npos) return false;
  for (const char* block : {"self_attn.", "cross_attn."})
    if (starts_with(rest, block) && attention.count(rest.substr(std::string(block).size())))
      return true;
  return other.count(rest) > 0;
}

template <class T, std::size_t N>
Tensor<T, N> take(const Arrays& a, const std::string& name, const TensorShape<N>& expected,
                  const char* meaning, const std::string& path) {
  auto it = a.find(name);
  if (it == a.end()) fail_input(path + ": missing weight tensor '" + name + "' " + meaning);
  const std::vector<std::size_t> want(expected.begin(), expected.end());
  if (it->second.shape != want)
    fail_input(path + ": " + name + " has shape " + shape_str(it->second.shape) + ", expected " +
               shape_str(want) + " = " + meaning);
  Tensor<T, N> t(expected);
  convert(it->second, t.data(), path + ":" + name);
  return t;
}

template <class T>
Norm<T> take_norm(const Arrays& a, const std::string& prefix, std::size_t d,
                  const std::string& path) {
  return {take<T, 1>(a, prefix + "gamma", {d}, "(d_model,)", path),
          take<T, 1>(a, prefix + "beta", {d}, "(d_model,)", path)};
}

// The native names a stack of `shape` has, in file order.
std::vector<std::string> stack_names(const StackShape& s) {
  std::vector<std::string> names;
  const bool decoder = s.kind == LayerKind::decoder;
  for (std::size_t l = 0; l < s.num_layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    for (const std::string& w : weight_names(true)) names.push_back(L + "self_attn." + w);
    if (decoder)
      for (const std::string& w : weight_names(true)) names.push_back(L + "cross_attn." + w);
    for (const char* f : {"ffn.W_1", "ffn.b_1", "ffn.W_2", "ffn.b_2"}) names.push_back(L + f);
    for (const char* n : {"norm1", "norm2", "norm3"}) {
      if (!decoder && std::string(n) == "norm3") continue;
      names.push_back(L + n + ".gamma");
      names.push_back(L + n + ".beta");
    }
  }
  if (s.final_norm) names.insert(names.end(), {"final_norm.gamma", "final_norm.beta"});
  return names;
}

}  // namespace

bool has_layer_names(const std::vector<std::string>& names) {
  for (const auto& name : names)
    if (split_layer(name).first != std::string::npos ||
        name.find("linear1.") != std::string::npos || starts_with(name, "self_attn.") ||
        name.find("norm1.") != std::string::npos)
      return true;
  return false;
}

bool has_layer_names(const Arrays& arrays) {
  std::vector<std::string> names;
  for (const auto& [name, a] : arrays) names.push_back(name);
  return has_layer_names(names);
}

NativeWeights layer_weights_to_native(const Arrays& arrays, WeightsFormat format,
                                      const std::string& path) {
  // Keras files' encoder blocks (keras_file.hpp): native layer names, each
  // attention in the keras layout, converted here; its kernels give h.
  if (format == WeightsFormat::keras || format == WeightsFormat::auto_detect) {
    Arrays native;
    std::map<std::string, Arrays> attention;  // "layers.0.self_attn." -> query/kernel, ...
    bool keras = false;
    for (const auto& [name, array] : arrays) {
      const auto [layer, rest] = split_layer(name);
      const std::string prefix = "layers." + std::to_string(layer) + ".self_attn.";
      if (layer != std::string::npos && starts_with(rest, "self_attn.") &&
          rest.find('/') != std::string::npos) {
        attention[prefix][rest.substr(10)] = array;
        keras = true;
      } else {
        native[name] = array;
      }
    }
    if (keras) {
      NativeWeights out{{}, WeightsFormat::keras, std::nullopt};
      for (const auto& [prefix, block] : attention) {
        const NativeWeights w = to_native(block, WeightsFormat::keras, path + ":" + prefix);
        if (out.h && w.h && *out.h != *w.h)
          fail_input(path + ":" + prefix + ": query/kernel holds " + std::to_string(*w.h) +
                     " heads and an earlier block's " + std::to_string(*out.h) +
                     "; expected one h for the stack");
        out.h = w.h;
        for (const auto& [n, a] : w.arrays) out.arrays[prefix + n] = a;
      }
      for (const auto& [name, array] : native) {
        if (!is_native_layer_name(name))
          fail_input(
              path + ": unknown weight tensor '" + name +
              "' beside Keras encoder blocks (expected layers.N.ffn.W_1, layers.N.norm1.gamma, "
              "...; docs/layers.md)");
        out.arrays[name] = array;
      }
      return out;
    }
  }
  if (format == WeightsFormat::keras)
    fail_input(path +
               ": Keras Transformer layers are read from Keras' own files (.h5, .weights.h5, "
               ".keras: docs/layers.md); in an .npz use native or torch names");
  if (!has_layer_names(arrays)) {
    std::string names;
    for (const auto& [name, a] : arrays) {
      if (names.size() > 60) {
        names += ", ...";
        break;
      }
      names += (names.empty() ? "" : ", ") + name;
    }
    fail_input(path + ": holds no Transformer layer tensors (" + names +
               "); expected native names such as layers.0.self_attn.W_q or a PyTorch "
               "nn.TransformerEncoder/Decoder(Layer) state_dict (a single attention's weights go "
               "with layer attention)");
  }
  if (format == WeightsFormat::auto_detect) {
    const bool native = std::all_of(arrays.begin(), arrays.end(),
                                    [](const auto& kv) { return is_native_layer_name(kv.first); });
    format = native && !arrays.empty() ? WeightsFormat::native : WeightsFormat::torch;
  }
  if (format == WeightsFormat::torch) return torch_layers_to_native(arrays, path);
  for (const auto& [name, a] : arrays)
    if (!is_native_layer_name(name))
      fail_input(path + ": unknown weight tensor '" + name +
                 "' (expected Transformer layer names such as layers.0.self_attn.W_q, "
                 "layers.0.ffn.W_1, layers.0.norm1.gamma; docs/layers.md)");
  return {arrays, WeightsFormat::native, std::nullopt};
}

std::vector<std::pair<std::string, NpyArray>> layer_weights_from_native(const Arrays& native,
                                                                        WeightsFormat format,
                                                                        const std::string& what) {
  if (format == WeightsFormat::native) return {native.begin(), native.end()};
  if (format != WeightsFormat::torch)
    fail_input(what + ": Transformer layers are written in native or torch names only");
  std::vector<std::pair<std::string, NpyArray>> out;
  std::map<std::string, Arrays> attention;  // "layers.0.self_attn." -> W_q, ...
  for (const auto& [name, array] : native) {
    if (name == "final_norm.gamma") out.emplace_back("norm.weight", array);
    if (name == "final_norm.beta") out.emplace_back("norm.bias", array);
    const auto [layer, rest] = split_layer(name);
    if (layer == std::string::npos) continue;
    const std::string L = "layers." + std::to_string(layer) + ".";
    bool done = false;
    for (const char* block : {"self_attn.", "cross_attn."})
      if (starts_with(rest, block)) {
        attention[L + block][rest.substr(std::string(block).size())] = array;
        done = true;
      }
    if (done) continue;
    if (rest == "ffn.W_1") out.emplace_back(L + "linear1.weight", transpose_2d(array));
    if (rest == "ffn.b_1") out.emplace_back(L + "linear1.bias", array);
    if (rest == "ffn.W_2") out.emplace_back(L + "linear2.weight", transpose_2d(array));
    if (rest == "ffn.b_2") out.emplace_back(L + "linear2.bias", array);
    for (const char* norm : {"norm1", "norm2", "norm3"}) {
      if (rest == std::string(norm) + ".gamma") out.emplace_back(L + norm + ".weight", array);
      if (rest == std::string(norm) + ".beta") out.emplace_back(L + norm + ".bias", array);
    }
  }
  for (const auto& [prefix, arrays] : attention) {
    const bool cross = prefix.find("cross_attn.") != std::string::npos;
    const std::string torch = prefix.substr(0, prefix.find(cross ? "cross_attn." : "self_attn.")) +
                              (cross ? "multihead_attn." : "self_attn.");
    for (auto& [name, array] :
         from_native(arrays, WeightsFormat::torch, std::nullopt, what + ":" + prefix))
      out.emplace_back(torch + name, std::move(array));
  }
  return out;
}

std::size_t layer_count(const Arrays& native) {
  std::size_t n = 0;
  for (const auto& [name, a] : native) {
    const std::size_t l = split_layer(name).first;
    if (l != std::string::npos) n = std::max(n, l + 1);
  }
  return n;
}

template <class T>
StackWeights<T> stack_from_arrays(const Arrays& a, const StackShape& s, const std::string& path) {
  const std::vector<std::string> names = stack_names(s);
  const std::set<std::string> wanted(names.begin(), names.end());
  for (const auto& [name, array] : a)
    if (!wanted.count(name))
      fail_input(path + ": holds '" + name + "', which a " + std::to_string(s.num_layers) +
                 "-layer " + to_string(s.kind) + (s.final_norm ? " with" : " without") +
                 " final_norm does not have (check num_layers, layer and final_norm)");
  const std::size_t d = s.self.d_model;
  StackWeights<T> w;
  for (std::size_t l = 0; l < s.num_layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    TransformerLayer<T> layer;
    layer.self_attn = weights_from_arrays<T>(a, s.self, true, path, L + "self_attn.");
    if (s.kind == LayerKind::decoder)
      layer.cross_attn = weights_from_arrays<T>(a, s.cross, true, path, L + "cross_attn.");
    layer.ffn.W_1 = take<T, 2>(a, L + "ffn.W_1", {d, s.d_ff}, "(d_model, d_ff)", path);
    layer.ffn.b_1 = take<T, 1>(a, L + "ffn.b_1", {s.d_ff}, "(d_ff,)", path);
    layer.ffn.W_2 = take<T, 2>(a, L + "ffn.W_2", {s.d_ff, d}, "(d_ff, d_model)", path);
    layer.ffn.b_2 = take<T, 1>(a, L + "ffn.b_2", {d}, "(d_model,)", path);
    layer.norm1 = take_norm<T>(a, L + "norm1.", d, path);
    layer.norm2 = take_norm<T>(a, L + "norm2.", d, path);
    if (s.kind == LayerKind::decoder) layer.norm3 = take_norm<T>(a, L + "norm3.", d, path);
    w.layers.push_back(std::move(layer));
  }
  if (s.final_norm) w.final_norm = take_norm<T>(a, "final_norm.", d, path);
  return w;
}

template <class T>
StackWeights<T> random_stack(const StackShape& s, std::uint64_t seed, int threads) {
  const std::size_t d = s.self.d_model;
  auto kernel = [&](const std::string& name, std::size_t rows, std::size_t cols) {
    Tensor<T, 2> k({rows, cols});
    const T limit = static_cast<T>(glorot_limit(rows, cols));
    RandomStream(seed, name).fill_uniform<T>(k.data(), k.size(), -limit, limit, threads);
    return k;
  };
  auto norm = [&] { return Norm<T>{Tensor<T, 1>::full({d}, 1), Tensor<T, 1>::full({d}, 0)}; };
  StackWeights<T> w;
  for (std::size_t l = 0; l < s.num_layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    TransformerLayer<T> layer;
    layer.self_attn = random_weights<T>(s.self, true, seed, threads, L + "self_attn.");
    if (s.kind == LayerKind::decoder)
      layer.cross_attn = random_weights<T>(s.cross, true, seed, threads, L + "cross_attn.");
    layer.ffn.W_1 = kernel(L + "ffn.W_1", d, s.d_ff);
    layer.ffn.b_1 = Tensor<T, 1>::full({s.d_ff}, 0);
    layer.ffn.W_2 = kernel(L + "ffn.W_2", s.d_ff, d);
    layer.ffn.b_2 = Tensor<T, 1>::full({d}, 0);
    layer.norm1 = norm();
    layer.norm2 = norm();
    if (s.kind == LayerKind::decoder) layer.norm3 = norm();
    w.layers.push_back(std::move(layer));
  }
  if (s.final_norm) w.final_norm = norm();
  return w;
}

template <class T>
std::vector<std::pair<std::string, NpyArray>> stack_arrays(const StackWeights<T>& w) {
  std::vector<std::pair<std::string, NpyArray>> out;
  auto add = [&](const std::string& name, const auto& t) {
    std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
    out.emplace_back(name, NpyArray::of(t.data(), shape));
  };
  auto add_norm = [&](const std::string& name, const Norm<T>& n) {
    if (n.empty()) return;
    add(name + ".gamma", n.gamma);
    add(name + ".beta", n.beta);
  };
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const TransformerLayer<T>& layer = w.layers[l];
    const std::string L = "layers." + std::to_string(l) + ".";
    for (auto& a : weight_arrays(layer.self_attn, L + "self_attn.")) out.push_back(std::move(a));
    if (layer.cross_attn.W_q.size())
      for (auto& a : weight_arrays(layer.cross_attn, L + "cross_attn."))
        out.push_back(std::move(a));
    add(L + "ffn.W_1", layer.ffn.W_1);
    add(L + "ffn.b_1", layer.ffn.b_1);
    add(L + "ffn.W_2", layer.ffn.W_2);
    add(L + "ffn.b_2", layer.ffn.b_2);
    add_norm(L + "norm1", layer.norm1);
    add_norm(L + "norm2", layer.norm2);
    add_norm(L + "norm3", layer.norm3);
  }
  add_norm("final_norm", w.final_norm);
  return out;
}

#define MHA_INSTANTIATE(T)                                                         \
  template StackWeights<T> stack_from_arrays<T>(const Arrays&, const StackShape&,  \
                                                const std::string&);               \
  template StackWeights<T> random_stack<T>(const StackShape&, std::uint64_t, int); \
  template std::vector<std::pair<std::string, NpyArray>> stack_arrays<T>(const StackWeights<T>&);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
