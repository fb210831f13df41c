#include "mha/config/keras_file.hpp"

#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/config/layer_weights.hpp"
#include "mha/config/memory.hpp"
#include "mha/config/weight_formats.hpp"
#include "mha/io/file_kind.hpp"
#include "mha/io/hdf5.hpp"
#include "mha/io/zip_member.hpp"

namespace mha {

namespace {

// The keras-layout names of one MultiHeadAttention (weight_formats.hpp).
const char* const kRoles[] = {"query", "key", "value", "attention_output"};

// One MultiHeadAttention or encoder block found in the file.
struct Found {
  std::string id;                           // listed in messages: a group path or a layer name
  std::string label;                        // the Keras layer name, when the file says it
  std::set<std::string> aliases;            // what `layer` may name it by
  std::map<std::string, std::string> mha;   // "query/kernel" -> dataset path
  std::map<std::string, std::string> rest;  // blocks: "ffn.W_1", "norm1.gamma", ... -> dataset path
  std::string refused;                      // why it cannot be read, when it cannot
};

std::string last_part(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Keras names siblings of one class "dense", "dense_1", ..., "dense_10": in
// that order, not the string order HDF5 lists them in.
bool natural_less(const std::string& a, const std::string& b) {
  const auto split = [](const std::string& s) {
    const std::size_t us = s.rfind('_');
    if (us != std::string::npos && us + 1 < s.size() && s.size() - us <= 9 &&
        s.find_first_not_of("0123456789", us + 1) == std::string::npos)
      return std::make_pair(s.substr(0, us), std::stol(s.substr(us + 1)));
    return std::make_pair(s, 0L);
  };
  return split(a) < split(b);
}

std::vector<std::string> sorted_children(const Hdf5File& f, const std::string& group) {
  std::vector<std::string> c = f.children(group);
  std::stable_sort(c.begin(), c.end(), natural_less);
  return c;
}

std::string at(const std::string& group, const std::string& name) {
  return group.empty() ? name : group + "/" + name;
}

// ---- Keras 3: objects by attribute path, variables under vars/ ----

// The child of `group` among `names` that holds vars/<index...>, or "".
std::string child_with_vars(const Hdf5File& f, const std::string& group,
                            std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const std::string g = at(group, n);
    if (f.is_group(g) && f.is_dataset(g + "/vars/0")) return g;
  }
  return "";
}

// The Keras layer name Keras 3.6+ stores on an object's vars group.
std::string layer_name(const Hdf5File& f, const std::string& group) {
  const auto name = f.strings(at(group, "vars"), "name");
  return name && name->size() == 1 ? name->front() : "";
}

// Fills `m.mha` when `group` is a MultiHeadAttention; false otherwise.
bool keras3_attention(const Hdf5File& f, const std::string& group, Found& m) {
  const std::string dense[] = {child_with_vars(f, group, {"query_dense", "_query_dense"}),
                               child_with_vars(f, group, {"key_dense", "_key_dense"}),
                               child_with_vars(f, group, {"value_dense", "_value_dense"}),
                               child_with_vars(f, group, {"output_dense", "_output_dense"})};
  for (const std::string& d : dense)
    if (d.empty()) return false;
  for (int i = 0; i < 4; ++i) {
    const std::string vars = dense[i] + "/vars";
    for (const std::string& v : f.children(vars))
      if (v != "0" && v != "1")
        m.refused = "its " + last_part(dense[i]) + " holds variable " + echo(v) +
                    " besides kernel and bias (a quantized layer?)";
    m.mha[std::string(kRoles[i]) + "/kernel"] = vars + "/0";
    if (f.is_dataset(vars + "/1")) m.mha[std::string(kRoles[i]) + "/bias"] = vars + "/1";
  }
  if (!child_with_vars(f, group, {"gate_dense", "_gate_dense"}).empty())
    m.refused = "it is gated (use_gate=True), which this tool does not compute";
  return true;
}

void name_it(const Hdf5File& f, const std::string& group, Found& found) {
  found.id = group;
  found.label = layer_name(f, group);
  found.aliases = {group, last_part(group)};
  if (!found.label.empty()) found.aliases.insert(found.label);
}

// Fills `b.rest` (and b.mha) when `group` is an encoder block; false otherwise.
bool keras3_block(const Hdf5File& f, const std::string& group, Found& b, Found& inner) {
  std::string attention;
  for (const char* n : {"mha", "att"})
    if (f.is_group(at(group, n)) && keras3_attention(f, at(group, n), inner)) attention = n;
  const std::string ffn = at(group, "ffn/layers");
  if (attention.empty() || !f.is_group(ffn)) return false;
  std::vector<std::string> dense;
  for (const std::string& c : sorted_children(f, ffn))
    if (f.is_dataset(at(ffn, c) + "/vars/0")) dense.push_back(at(ffn, c));
  if (dense.size() != 2) return false;
  const std::string n1 = at(group, "layernorm1/vars"), n2 = at(group, "layernorm2/vars");
  for (const std::string& v :
       {n1 + "/0", n1 + "/1", n2 + "/0", n2 + "/1", dense[0] + "/vars/1", dense[1] + "/vars/1"})
    if (!f.is_dataset(v)) return false;
  b.mha = inner.mha;
  b.refused = inner.refused;
  b.rest = {{"ffn.W_1", dense[0] + "/vars/0"}, {"ffn.b_1", dense[0] + "/vars/1"},
            {"ffn.W_2", dense[1] + "/vars/0"}, {"ffn.b_2", dense[1] + "/vars/1"},
            {"norm1.gamma", n1 + "/0"},        {"norm1.beta", n1 + "/1"},
            {"norm2.gamma", n2 + "/0"},        {"norm2.beta", n2 + "/1"}};
  name_it(f, at(group, attention), inner);
  return true;
}

void find_keras3(const Hdf5File& f, const std::string& group, std::vector<Found>& attentions,
                 std::vector<Found>& blocks, std::vector<Found>& inner) {
  Found b, in;
  if (keras3_block(f, group, b, in)) {
    name_it(f, group, b);
    blocks.push_back(std::move(b));
    inner.push_back(std::move(in));
    return;
  }
  Found m;
  if (keras3_attention(f, group, m)) {
    name_it(f, group, m);
    attentions.push_back(std::move(m));
    return;
  }
  for (const std::string& c : sorted_children(f, group))
    if (f.is_group(at(group, c))) find_keras3(f, at(group, c), attentions, blocks, inner);
}

// ---- tf.keras 2 / legacy .h5: layer_names, weight_names ----

// An attribute HDF5 cannot hold in one object header is split by Keras into
// NAME0, NAME1, ... (save_attributes_to_hdf5_group).
std::optional<std::vector<std::string>> keras_list(const Hdf5File& f, const std::string& path,
                                                   const std::string& name) {
  if (auto whole = f.strings(path, name)) return whole;
  std::optional<std::vector<std::string>> out;
  for (int chunk = 0;; ++chunk) {
    auto part = f.strings(path, name + std::to_string(chunk));
    if (!part) return out;
    if (!out) out.emplace();
    out->insert(out->end(), part->begin(), part->end());
  }
}

// "mha/query/kernel:0" -> ("mha", "query/kernel"); role "" when not an attention weight.
std::pair<std::string, std::string> legacy_role(std::string name) {
  const std::size_t colon = name.rfind(':');
  if (colon != std::string::npos &&
      name.find_first_not_of("0123456789", colon + 1) == std::string::npos)
    name.resize(colon);
  for (const char* role : kRoles)
    for (const char* kind : {"kernel", "bias"}) {
      const std::string suffix = std::string(role) + "/" + kind;
      if (name == suffix) return {"", suffix};
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size() - 1, suffix.size() + 1, "/" + suffix) == 0)
        return {name.substr(0, name.size() - suffix.size() - 1), suffix};
    }
  return {name, ""};
}

bool ends_with(const std::string& s, const std::string& suffix) {
  std::string t = s;
  const std::size_t colon = t.rfind(':');
  if (colon != std::string::npos) t.resize(colon);
  return t == suffix ||
         (t.size() > suffix.size() &&
          t.compare(t.size() - suffix.size() - 1, suffix.size() + 1, "/" + suffix) == 0);
}

void find_legacy(const Hdf5File& f, const std::string& root,
                 const std::vector<std::string>& layer_names, std::vector<Found>& attentions,
                 std::vector<Found>& blocks, std::vector<Found>& inner) {
  for (const std::string& layer : layer_names) {
    const std::string group = at(root, layer);
    if (!f.is_group(group))
      fail_input(f.name() + ": layer_names lists " + echo(layer) + ", which has no group " +
                 echo("/" + group));
    const auto weights = keras_list(f, group, "weight_names");
    if (!weights) continue;
    std::map<std::string, Found> by_prefix;  // one MultiHeadAttention per prefix
    std::vector<std::string> prefixes;
    std::vector<std::string> others;  // the layer's other weights, in order
    for (const std::string& w : *weights) {
      const std::string path = at(group, w);
      if (!f.is_dataset(path))
        fail_input(f.name() + ": weight_names of layer " + echo(layer) + " lists " + echo(w) +
                   ", which is not a dataset in the file");
      const auto [prefix, role] = legacy_role(w);
      if (role.empty()) {
        others.push_back(path);
        continue;
      }
      if (!by_prefix.count(prefix)) prefixes.push_back(prefix);
      by_prefix[prefix].mha[role] = path;
    }
    for (const std::string& p : prefixes) {
      Found& m = by_prefix[p];
      m.id = prefixes.size() == 1 ? layer : layer + "/" + p;
      m.label = layer;
      m.aliases = {layer, m.id};
      if (!p.empty()) m.aliases.insert({p, last_part(p)});
    }
    // An encoder block: one attention, then kernel, bias, kernel, bias, gamma,
    // beta, gamma, beta, as layer.weights lists them.
    const char* const block_order[] = {"kernel", "bias", "kernel", "bias",
                                       "gamma",  "beta", "gamma",  "beta"};
    bool block = prefixes.size() == 1 && others.size() == 8;
    for (std::size_t i = 0; block && i < 8; ++i) block = ends_with(others[i], block_order[i]);
    if (block) {
      Found b;
      b.id = layer;
      b.label = layer;
      b.aliases = {layer};
      b.mha = by_prefix.begin()->second.mha;
      const char* const names[] = {"ffn.W_1",     "ffn.b_1",    "ffn.W_2",     "ffn.b_2",
                                   "norm1.gamma", "norm1.beta", "norm2.gamma", "norm2.beta"};
      for (std::size_t i = 0; i < 8; ++i) b.rest[names[i]] = others[i];
      Found in = by_prefix.begin()->second;
      in.id = layer + "/" + (prefixes[0].empty() ? "attention" : last_part(prefixes[0]));
      in.aliases.erase(layer);
      in.aliases.insert(in.id);
      blocks.push_back(std::move(b));
      inner.push_back(std::move(in));
      continue;
    }
    for (const std::string& p : prefixes) attentions.push_back(by_prefix[p]);
  }
}

// "layers/mha ("cross")": how a found layer is listed.
std::string listed(const Found& x) {
  return x.label.empty() || x.label == x.id ? x.id : x.id + " (" + echo(x.label) + ")";
}

std::string list(const std::vector<const Found*>& xs) {
  std::string s;
  for (const Found* x : xs) s += (s.empty() ? "" : ", ") + listed(*x);
  return s;
}

// The header of a dataset to read, with read()'s dtype refusal up front.
NpyHeaderInfo header_of(const Hdf5File& f, const std::string& path) {
  const Hdf5Dataset& d = f.dataset(path);
  if (!d.dtype)
    fail_input(f.name() + ": dataset " + echo("/" + path) + " has dtype " + d.type +
               "; expected float16, float32 or float64");
  // A kernel of shape (0, 2, 4) would make d_model 0, which no layer has.
  if (std::find(d.shape.begin(), d.shape.end(), std::size_t{0}) != d.shape.end())
    fail_input(f.name() + ": dataset " + echo("/" + path) + " has shape " + shape_str(d.shape) +
               "; expected weights without an empty dimension");
  NpyHeaderInfo h;
  h.dtype = *d.dtype;
  h.shape = d.shape;
  h.data_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(d.bytes, SIZE_MAX));
  return h;
}

}  // namespace

std::map<std::string, NpyArray> read_keras_weights(const std::string& path,
                                                   const std::optional<std::string>& layer,
                                                   std::optional<std::uint64_t> max_bytes,
                                                   const KerasCheck& check) {
  std::unique_ptr<Hdf5File> file;
  std::string name = path;
  if (file_kind(path) == FileKind::keras) {
    // A .keras zip: its model.weights.h5, held in memory and opened in place.
    const std::vector<std::string> members = zip_member_names(path);
    if (std::find(members.begin(), members.end(), "model.weights.h5") == members.end()) {
      std::string held;
      for (const std::string& m : members) held += (held.empty() ? "" : ", ") + echo(m, 30);
      fail_input(path + ": holds no model.weights.h5 (members: " + (held.empty() ? "none" : held) +
                 "); expected a .keras file as Keras 3 saves it, weights in HDF5");
    }
    const std::uint64_t cap = std::min(Hdf5File::kMaxDatasetBytes, max_bytes.value_or(UINT64_MAX));
    const std::string limit = cap == Hdf5File::kMaxDatasetBytes
                                  ? "the limit of 4 GiB for a .keras file's weights"
                                  : "max_memory " + format_bytes(static_cast<double>(cap)) +
                                        " (raise max_memory, or unzip model.weights.h5 and read "
                                        "that: only the chosen layer is read from it)";
    name = path + ":model.weights.h5";
    // HDF5's signature is the member's first 8 bytes: checked before the rest is inflated.
    auto bytes = std::make_shared<const std::string>(
        read_zip_member(path, "model.weights.h5", cap, limit, 8, [&](const std::string& head) {
          if (!looks_like_hdf5(head))
            fail_input(name + ": not an HDF5 file (no HDF5 signature at its start)");
        }));
    file = std::make_unique<Hdf5File>(std::move(bytes), name);
  } else {
    file = std::make_unique<Hdf5File>(path);
  }
  const Hdf5File& f = *file;

  std::vector<Found> attentions, blocks, inner;
  const std::string legacy_root = f.is_group("model_weights") ? "model_weights" : "";
  if (auto layer_names = keras_list(f, legacy_root, "layer_names"))
    find_legacy(f, legacy_root, *layer_names, attentions, blocks, inner);
  else
    find_keras3(f, "", attentions, blocks, inner);

  // The choice: by name, else the only attention, else every encoder block.
  std::vector<const Found*> chosen;
  bool stack = false;
  if (layer) {
    for (const Found& b : blocks)
      if (b.aliases.count(*layer)) chosen.push_back(&b), stack = true;
    for (const auto* set : {&attentions, &inner})
      for (const Found& m : *set)
        if (m.aliases.count(*layer)) chosen.push_back(&m);
    std::vector<const Found*> all;
    for (const auto* set : {&blocks, &attentions, &inner})
      for (const Found& x : *set) all.push_back(&x);
    if (chosen.empty())
      fail_input(path + ": keras_layer " + echo(*layer) + " names none of its " +
                 (all.empty() ? std::string("layers: it holds no MultiHeadAttention")
                              : "MultiHeadAttention layers and encoder blocks: " + list(all)));
    if (chosen.size() > 1)
      fail_input(path + ": keras_layer " + echo(*layer) + " names more than one: " + list(chosen) +
                 "; give the full path");
    stack = !chosen[0]->rest.empty();
  } else if (!blocks.empty() && attentions.empty()) {
    for (const Found& b : blocks) chosen.push_back(&b);
    stack = true;
  } else if (blocks.empty() && attentions.size() == 1) {
    chosen.push_back(&attentions[0]);
  } else {
    std::vector<const Found*> all;
    for (const auto* set : {&blocks, &attentions})
      for (const Found& x : *set) all.push_back(&x);
    if (all.empty())
      fail_input(f.name() +
                 ": holds no MultiHeadAttention layer (expected query_dense, "
                 "key_dense, value_dense and output_dense groups, or query/kernel "
                 "weights in a tf.keras .h5)");
    fail_input(path + ": holds " + std::to_string(all.size()) +
               " MultiHeadAttention layers or encoder blocks (" + list(all) +
               "); choose one with keras_layer");
  }
  for (const Found* x : chosen)
    if (!x->refused.empty()) fail_input(f.name() + ": " + listed(*x) + ": " + x->refused);

  // Names as returned -> dataset paths; the headers checked before any read.
  std::vector<std::pair<std::string, std::string>> wanted;
  for (std::size_t n = 0; n < chosen.size(); ++n) {
    const std::string L = stack ? "layers." + std::to_string(n) + "." : "";
    for (const auto& [role, dataset] : chosen[n]->mha)
      wanted.emplace_back(L + (stack ? "self_attn/" : "") + role, dataset);
    for (const auto& [role, dataset] : chosen[n]->rest) wanted.emplace_back(L + role, dataset);
  }
  std::map<std::string, NpyHeaderInfo> headers;
  std::map<std::string, std::string> names;
  for (const auto& [key, dataset] : wanted) {
    headers[key] = header_of(f, dataset);
    names[key] = f.name() + ":" + dataset;
  }
  if (check) check(headers, names);

  std::map<std::string, NpyArray> arrays;
  if (!stack) {
    for (const auto& [key, dataset] : wanted) arrays[key] = f.read(dataset);
    return arrays;
  }
  // Encoder blocks in native layer names, each attention in the keras layout
  // (layers.N.self_attn.query/kernel, ...), which layer_weights_to_native
  // converts: its kernels fix h.
  for (std::size_t n = 0; n < chosen.size(); ++n) {
    const std::string L = "layers." + std::to_string(n) + ".";
    for (const auto& [role, dataset] : chosen[n]->mha)
      arrays[L + "self_attn." + role] = f.read(dataset);
    for (const auto& [role, dataset] : chosen[n]->rest) arrays[L + role] = f.read(dataset);
  }
  return arrays;
}

std::string encode_keras_weights(const std::map<std::string, NpyArray>& native,
                                 std::optional<std::size_t> h, const std::string& what) {
  std::vector<std::pair<std::string, NpyArray>> datasets;
  std::vector<Hdf5StringAttribute> attributes;
  // Keras 3.6+ names each object on its vars group; load_weights ignores it.
  const auto named = [&](const std::string& group, const std::string& name) {
    attributes.push_back({group.empty() ? "vars" : group + "/vars", "name", name});
  };
  const auto attention = [&](const std::map<std::string, NpyArray>& w, const std::string& group,
                             const std::string& name) {
    named(group, name);
    const char* const dense[][2] = {{"query", "query_dense"},
                                    {"key", "key_dense"},
                                    {"value", "value_dense"},
                                    {"attention_output", "output_dense"}};
    std::map<std::string, NpyArray> keras;
    for (auto& [n, a] : from_native(w, WeightsFormat::keras, h, what)) keras[n] = std::move(a);
    for (const auto& d : dense) {
      const std::string g = group + "/" + d[1];
      named(g, d[0]);
      datasets.emplace_back(g + "/vars/0", keras.at(std::string(d[0]) + "/kernel"));
      if (keras.count(std::string(d[0]) + "/bias"))
        datasets.emplace_back(g + "/vars/1", keras.at(std::string(d[0]) + "/bias"));
    }
  };
  named("", "functional");
  if (!has_layer_names(native)) {
    attention(native, "layers/multi_head_attention", "multi_head_attention");
    return encode_hdf5(datasets, attributes, what);
  }
  // Encoder blocks, each the tutorial's EncoderLayer: mha, ffn, layernorm1, layernorm2.
  const std::size_t n = layer_count(native);
  std::set<std::string> used;
  for (std::size_t l = 0; l < n; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    const std::string name = l ? "encoder_layer_" + std::to_string(l) : "encoder_layer";
    const std::string g = "layers/" + name;
    named(g, name);
    std::map<std::string, NpyArray> self;
    for (const auto& [k, a] : native)
      if (k.compare(0, L.size() + 10, L + "self_attn.") == 0) self[k.substr(L.size() + 10)] = a;
    attention(self, g + "/mha", "multi_head_attention");
    named(g + "/ffn", "sequential");
    const char* const parts[][2] = {
        {"ffn.W_1", "ffn/layers/dense/vars/0"},   {"ffn.b_1", "ffn/layers/dense/vars/1"},
        {"ffn.W_2", "ffn/layers/dense_1/vars/0"}, {"ffn.b_2", "ffn/layers/dense_1/vars/1"},
        {"norm1.gamma", "layernorm1/vars/0"},     {"norm1.beta", "layernorm1/vars/1"},
        {"norm2.gamma", "layernorm2/vars/0"},     {"norm2.beta", "layernorm2/vars/1"}};
    for (const auto& p : parts) {
      if (!native.count(L + p[0]))
        fail_input(what + ": missing '" + L + p[0] + "' for a Keras encoder block");
      datasets.emplace_back(g + "/" + p[1], native.at(L + p[0]));
      used.insert(L + p[0]);
    }
    named(g + "/ffn/layers/dense", "dense");
    named(g + "/ffn/layers/dense_1", "dense_1");
    named(g + "/layernorm1", "layer_normalization");
    named(g + "/layernorm2", "layer_normalization_1");
    for (const auto& [k, a] : self) used.insert(L + "self_attn." + k);
  }
  for (const auto& [k, a] : native)
    if (!used.count(k))
      fail_input(what + ": '" + k +
                 "' has no place in Keras encoder blocks (the tutorial's EncoderLayer: "
                 "post-norm encoders without cross-attention or final_norm)");
  return encode_hdf5(datasets, attributes, what);
}

}  // namespace mha
