#include "mha/config/dims.hpp"

#include "mha/base/error.hpp"

namespace mha {
namespace {

using Shape = std::vector<std::size_t>;

// A size seen in a file, with the words that say where it came from.
struct Seen {
  std::size_t value;
  std::string where;  // "query 'q.npy' of shape (2, 5, 16)"
};

// Agrees a config value and the sizes seen in files on one size `key`.
std::optional<std::size_t> agree(const char* key, const std::optional<std::int64_t>& configured,
                                 const std::vector<Seen>& seen) {
  std::optional<std::size_t> value;
  std::string from;
  if (configured) {
    value = static_cast<std::size_t>(*configured);
    from = std::string(key) + " = " + std::to_string(*configured) + " in the config";
  }
  for (const auto& s : seen) {
    if (value && *value != s.value)
      fail_input(std::string(key) + " mismatch: " + from + ", but " + s.where + " implies " + key +
                 " = " + std::to_string(s.value));
    if (!value) {
      value = s.value;
      from = s.where + " implies " + key + " = " + std::to_string(s.value);
    }
  }
  return value;
}

std::size_t divide(std::size_t total, std::size_t by, const std::string& what) {
  if (by == 0 || total % by != 0) fail_input(what);
  return total / by;
}

// Splits an input of shape (B, L, F) or (L, F) into its sizes.
struct InputSizes {
  std::optional<std::size_t> B;
  std::size_t L, F;
  std::string where;
};

std::optional<InputSizes> input_sizes(const std::optional<Shape>& shape, const std::string& role,
                                      const std::string& path, const char* dims3,
                                      const char* dims2) {
  if (!shape) return std::nullopt;
  std::string where = role + " '" + path + "' of shape " + shape_str(*shape);
  if (shape->size() != 2 && shape->size() != 3)
    fail_input(path + ": expected a " + role + " of shape " + dims3 + " or " + dims2 + ", got " +
               shape_str(*shape));
  for (auto d : *shape)
    if (d == 0)
      fail_input(path + ": " + role + " has an empty dimension, shape " + shape_str(*shape));
  InputSizes s;
  if (shape->size() == 3) s.B = (*shape)[0];
  s.L = (*shape)[shape->size() - 2];
  s.F = (*shape)[shape->size() - 1];
  s.where = where;
  return s;
}

// The 2-D shape of weight `name`, or null when absent (or not 2-D: the shape
// check of the weights names that).
const Shape* weight_shape(const FileShapes& files, const char* name) {
  auto it = files.weights.find(name);
  return it == files.weights.end() || it->second.size() != 2 ? nullptr : &it->second;
}

// h, d_k, kv_heads and d_v, from the config and the weights' widths (with
// d_model already resolved in `d`).
void resolve_heads(const Config& c, const FileShapes& files, Dims& d) {
  const auto& w = files.weights;
  auto weight = [&](const char* name) { return weight_shape(files, name); };
  // Heads: h * d_k is fixed by W_q when weights are given.
  const Shape* wq = weight("W_q");
  const std::string wq_where = wq ? files.weights_name + ":W_q of shape " + shape_str(*wq) : "";
  std::optional<std::int64_t> h = c.h;
  if (files.weights_h) {
    h = static_cast<std::int64_t>(
        *agree("h", c.h, {{*files.weights_h, files.weights_name + " (its kernels hold h heads)"}}));
  }
  if (h) {
    d.h = static_cast<std::size_t>(*h);
    if (c.d_k) {
      d.d_k = static_cast<std::size_t>(*c.d_k);
    } else if (wq) {
      d.d_k = divide((*wq)[1], d.h,
                     wq_where + " has " + std::to_string((*wq)[1]) +
                         " columns (h*d_k), not divisible by h = " + std::to_string(d.h));
    } else {
      d.d_k = divide(d.d_model, d.h,
                     "d_model = " + std::to_string(d.d_model) + " is not divisible by h = " +
                         std::to_string(d.h) + "; give d_k explicitly");
    }
  } else if (c.d_k && wq) {
    d.d_k = static_cast<std::size_t>(*c.d_k);
    d.h = divide((*wq)[1], d.d_k,
                 wq_where + " has " + std::to_string((*wq)[1]) +
                     " columns (h*d_k), not divisible by d_k = " + std::to_string(d.d_k));
  } else {
    fail_input(std::string("h (number of heads) is required: set it in the config or with --h") +
               (w.empty() ? "" : " (" + files.weights_name + " does not store it)"));
  }

  // Key/value heads: kv_heads * d_k is fixed by W_k when weights are given.
  const Shape* wk = weight("W_k");
  if (c.kv_heads) {
    d.kv_heads = static_cast<std::size_t>(*c.kv_heads);
  } else if (wk && (*wk)[1] < d.h * d.d_k && (*wk)[1] % d.d_k == 0 &&
             d.h % ((*wk)[1] / d.d_k) == 0 && (*wk)[1] > 0) {
    // Fewer key columns than h*d_k, in whole heads that divide h: grouped-query
    // weights. Any other width is left to the shape check, which names it.
    d.kv_heads = (*wk)[1] / d.d_k;
  } else {
    d.kv_heads = d.h;
  }
  if (d.kv_heads == 0 || d.h % d.kv_heads != 0)
    fail_input("kv_heads = " + std::to_string(d.kv_heads) + " does not divide h = " +
               std::to_string(d.h) + (c.kv_heads ? "" : " (from " + files.weights_name + ":W_k)") +
               "; expected a divisor of h (h for multi-head, 1 for multi-query attention)");
  const std::string heads_v = d.kv_heads == d.h ? "h" : "kv_heads";
  if (c.d_v) {
    d.d_v = static_cast<std::size_t>(*c.d_v);
  } else if (const Shape* wv = weight("W_v")) {
    d.d_v = divide((*wv)[1], d.kv_heads,
                   files.weights_name + ":W_v of shape " + shape_str(*wv) + " has " +
                       std::to_string((*wv)[1]) + " columns (" + heads_v +
                       "*d_v), not divisible by " + heads_v + " = " + std::to_string(d.kv_heads));
  } else {
    d.d_v = d.d_k;
  }
}

// Which tensors are shared. With random inputs, self-attention whenever the
// sizes allow it; otherwise key and value are drawn independently.
void resolve_sharing(const FileShapes& files, Dims& d) {
  if (files.query) {
    d.key_is_query = !files.key && !files.value;
    d.value_is_key = !files.key;
  } else {
    d.key_is_query = d.S == d.T && d.kdim == d.d_model && d.vdim == d.d_model;
    d.value_is_key = d.key_is_query;
  }
  if (d.key_is_query && (d.S != d.T || d.kdim != d.d_model))
    fail_input("self-attention (no key or value file) needs kv_seq_len = seq_len = " +
               std::to_string(d.T) + " and kdim = vdim = d_model = " + std::to_string(d.d_model) +
               "; give key/value files for cross-attention");
  if (d.value_is_key && d.vdim != d.kdim)
    fail_input("the value input is the key input here, so vdim (" + std::to_string(d.vdim) +
               ") must equal kdim (" + std::to_string(d.kdim) + ")");
}

}  // namespace

Dims resolve_dims(const Config& c, const FileShapes& files) {
  if (files.key && !files.value)
    fail_input(
        "'key' is given without 'value': give both, or only 'value' to use it as the key too");
  if ((files.key || files.value) && !files.query)
    fail_input("'" + std::string(files.key ? "key" : "value") +
               "' is given without 'query': give the query input too");

  auto q = input_sizes(files.query, "query", files.query_name, "(B, T, d_model)", "(T, d_model)");
  auto k = input_sizes(files.key, "key", files.key_name, "(B, S, kdim)", "(S, kdim)");
  auto v = input_sizes(files.value, "value", files.value_name, "(B, S, vdim)", "(S, vdim)");
  // query+value means key = value; query alone means key = value = query.
  if (!k) k = v;
  if (!v) v = k;

  auto wseen = [&](const char* name, int axis, const char* meaning) -> std::vector<Seen> {
    const Shape* s = weight_shape(files, name);
    if (!s) return {};
    return {{(*s)[axis], files.weights_name + ":" + name + " of shape " + shape_str(*s) + " (" +
                             meaning + ")"}};
  };

  Dims d;
  std::vector<Seen> batches;
  for (const auto* in : {&q, &k, &v})
    if (*in) batches.push_back({(*in)->B.value_or(1), (*in)->where});
  d.B = agree("batch", c.batch, batches).value_or(1);

  std::vector<Seen> ts;
  if (q) ts.push_back({q->L, q->where});
  auto T = agree("seq_len", c.seq_len, ts);
  if (!T) fail_input("seq_len is required when no query file is given (config key or --seq_len)");
  d.T = *T;

  std::vector<Seen> ss;
  if (files.key || files.value) {
    if (k) ss.push_back({k->L, k->where});
    if (v) ss.push_back({v->L, v->where});
  } else if (q) {
    ss.push_back({q->L, q->where + " used as key and value (self-attention)"});
  }
  d.S = agree("kv_seq_len", c.kv_seq_len, ss).value_or(d.T);

  std::vector<Seen> dm;
  if (q) dm.push_back({q->F, q->where});
  for (auto& s : wseen("W_q", 0, "d_model, h*d_k")) dm.push_back(s);
  auto d_model = agree("d_model", c.d_model, dm);
  if (!d_model)
    fail_input(
        "d_model is required when neither a query file nor weights give it (config key or "
        "--d_model)");
  d.d_model = *d_model;

  std::vector<Seen> kd, vd;
  if (files.key || files.value) {
    kd.push_back({k->F, k->where});
    vd.push_back({v->F, v->where});
  } else if (q) {
    kd.push_back({q->F, q->where + " used as key (self-attention)"});
    vd.push_back({q->F, q->where + " used as value (self-attention)"});
  }
  for (auto& s : wseen("W_k", 0, "kdim, h*d_k")) kd.push_back(s);
  for (auto& s : wseen("W_v", 0, "vdim, h*d_v")) vd.push_back(s);
  d.kdim = agree("kdim", c.kdim, kd).value_or(d.d_model);
  d.vdim = agree("vdim", c.vdim, vd).value_or(d.d_model);

  resolve_heads(c, files, d);

  d.d_out = agree("d_out", c.d_out, wseen("W_o", 1, "h*d_v, d_out")).value_or(d.d_model);

  resolve_sharing(files, d);
  return d;
}

}  // namespace mha
