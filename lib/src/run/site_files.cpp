#include "mha/run/site_files.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <system_error>

#include "mha/base/error.hpp"
#include "mha/config/config.hpp"
#include "mha/io/npy.hpp"

namespace mha {
namespace fs = std::filesystem;

std::size_t SiteShape::elements() const {
  std::size_t n = 1;
  for (std::size_t s : shape) n *= s;
  return n;
}

namespace {

// The kinds of one layer of `stack`, in the pass's order (a decoder layer of
// an encoder-decoder: self-attention, cross-attention, MLP).
std::vector<SiteKind> layer_kinds(const ModelConfig& c, Stack stack) {
  using K = SiteKind;
  std::vector<SiteKind> kinds = {K::resid_pre, K::ln1,     K::q, K::k,       K::v,
                                 K::scores,    K::pattern, K::z, K::attn_out};
  if (!c.parallel_residual) kinds.push_back(K::resid_mid);
  kinds.push_back(K::ln2);
  if (stack == Stack::decoder)
    kinds.insert(kinds.end(),
                 {K::cross_q, K::cross_k, K::cross_v, K::cross_scores, K::cross_pattern, K::cross_z,
                  K::cross_attn_out, K::resid_mid_cross, K::ln3});
  kinds.insert(kinds.end(), {K::mlp_pre, K::mlp_post, K::mlp_out, K::resid_post});
  return kinds;
}

// A site's shape in a stack of B rows of T queries over S keys (S_cross for
// the cross-attention's).
std::vector<std::size_t> site_shape(const ModelConfig& c, SiteKind kind, std::size_t B,
                                    std::size_t T, std::size_t S_cross) {
  using K = SiteKind;
  const std::size_t h = c.h, kv = c.kv_heads ? c.kv_heads : c.h, dh = c.head_dim;
  switch (kind) {
    case K::q:
    case K::z:
    case K::cross_q:
    case K::cross_z:
      return {B, T, h, dh};
    case K::k:
    case K::v:
      return {B, T, kv, dh};
    case K::cross_k:
    case K::cross_v:
      return {B, S_cross, kv, dh};
    case K::scores:
    case K::pattern:
      return {B, h, T, T};
    case K::cross_scores:
    case K::cross_pattern:
      return {B, h, T, S_cross};
    case K::mlp_pre:
    case K::mlp_post:
      return {B, T, c.d_ff};
    default:
      return {B, T, c.d_model};
  }
}

void add_stack(std::vector<SiteShape>& out, const ModelConfig& c, Stack stack, std::size_t layers,
               std::size_t B, std::size_t T, std::size_t S_cross) {
  auto add = [&](SiteKind kind, std::size_t layer) {
    const Site s{kind, stack, layer};
    out.push_back({s, site_name(s, c.encoder_decoder), site_shape(c, kind, B, T, S_cross)});
  };
  // An image model's pass starts from Checkpoint::embed_patches' output (the
  // position table added): its embeddings are not shown at sites.
  if (!c.image_input()) {
    add(SiteKind::embed, 0);
    if (c.position_rows > 0) add(SiteKind::pos_embed, 0);
  }
  const std::vector<SiteKind> kinds = layer_kinds(c, stack);
  for (std::size_t l = 0; l < layers; ++l)
    for (SiteKind kind : kinds) add(kind, l);
  if (c.final_norm) add(SiteKind::ln_final, 0);
}

// "blocks.3.attn.hook_z" -> "blocks.*.attn.hook_z": the names a message lists.
std::string generic_name(const std::string& name) {
  std::string out;
  for (std::size_t i = 0; i < name.size();) {
    if (std::isdigit(static_cast<unsigned char>(name[i])) && i > 0 && name[i - 1] == '.') {
      while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
      out += '*';
    } else {
      out += name[i++];
    }
  }
  return out;
}

}  // namespace

bool pattern_matches(const std::string& pattern, const std::string& name) {
  return site_matches(pattern, name) || site_matches("*." + pattern, name);
}

std::vector<SiteShape> model_sites(const ModelConfig& c, std::size_t B, std::size_t T,
                                   std::size_t T_dec) {
  std::vector<SiteShape> out;
  add_stack(out, c, Stack::main, c.num_layers, B, T, 0);
  if (c.encoder_decoder) add_stack(out, c, Stack::decoder, c.num_decoder_layers, B, T_dec, T);
  return out;
}

std::vector<std::string> split_site_patterns(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = list.find(',', start);
    std::string p =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto first = p.find_first_not_of(" \t");
    p = first == std::string::npos ? "" : p.substr(first, p.find_last_not_of(" \t") - first + 1);
    out.push_back(p);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<SiteShape> select_sites(const std::vector<SiteShape>& sites,
                                    const std::vector<std::string>& patterns,
                                    const std::string& what) {
  std::vector<bool> chosen(sites.size(), false);
  std::vector<std::string> generic;  // distinct, in the sites' order
  for (const SiteShape& s : sites) {
    const std::string g = generic_name(s.name);
    if (std::find(generic.begin(), generic.end(), g) == generic.end()) generic.push_back(g);
  }
  if (patterns.empty())
    fail_input(what + ": expected site names or patterns, e.g. 'blocks.*.attn.hook_z'");
  for (const std::string& p : patterns) {
    if (p.empty())
      fail_input(what +
                 ": an empty site pattern; expected names or patterns separated by "
                 "commas, e.g. 'blocks.*.attn.hook_z,hook_resid_post'");
    bool any = false;
    for (std::size_t i = 0; i < sites.size(); ++i)
      if (pattern_matches(p, sites[i].name)) chosen[i] = any = true;
    if (any) continue;
    std::vector<std::string> names;
    for (const SiteShape& s : sites) names.push_back(s.name);
    std::string hint = nearest_key(p, names);
    if (hint.empty()) hint = nearest_key(p, generic);
    std::string listed;
    for (std::size_t i = 0; i < generic.size() && i < 6; ++i)
      listed += (i ? ", " : "") + generic[i];
    fail_input(what + ": '" + p + "' matches no site of this model" +
               (hint.empty() ? "" : " (did you mean '" + hint + "'?)") + "; its sites are " +
               listed + (generic.size() > 6 ? ", ..." : "") + " (" + std::to_string(sites.size()) +
               " in all; docs/models.md lists them)");
  }
  std::vector<SiteShape> out;
  for (std::size_t i = 0; i < sites.size(); ++i)
    if (chosen[i]) out.push_back(sites[i]);
  return out;
}

std::string site_filename(const std::string& name) {
  return "sites/" + name + ".npy";
}

std::vector<std::string> earlier_site_files(const std::string& out_dir,
                                            const std::function<bool(const std::string&)>& is_input,
                                            std::vector<std::string> names) {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path dir = fs::path(out_dir) / "sites";
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code kind;
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".npy") != 0) continue;
    const std::string stem = name.substr(0, name.size() - 4);
    if ((parse_site_name(stem, false) || parse_site_name(stem, true)) &&
        fs::is_regular_file(it->symlink_status(kind)) &&
        !(is_input && is_input(it->path().string())))
      out.push_back("sites/" + name);
  }
  std::sort(out.begin(), out.end());
  names.insert(names.end(), out.begin(), out.end());
  return names;
}

std::vector<SiteShape> sites_to_save(const ModelConfig& c, std::size_t B, std::size_t T,
                                     std::size_t T_dec, const std::string& patterns) {
  if (patterns.empty()) return {};
  return select_sites(model_sites(c, B, T, T_dec), split_site_patterns(patterns), "--save_sites");
}

SiteFiles::SiteFiles(OutputSet& out, std::vector<SiteShape> sites) {
  if (sites.empty()) return;
  std::error_code ec;
  const std::string dir = out.path("sites");
  fs::create_directories(dir, ec);
  if (ec) fail_runtime(dir + ": cannot create the sites' directory: " + ec.message());
  files_.reserve(sites.size());
  for (SiteShape& s : sites) {
    File f;
    f.stream = &out.stage_npy_stream(site_filename(s.name), DType::f4, s.shape);
    f.written = std::make_unique<std::atomic<std::size_t>>(0);
    bytes_ += npy_header(DType::f4, s.shape).size() + 4 * std::uint64_t{s.elements()};
    f.shape = std::move(s);
    layers_ = std::max(layers_, f.shape.site.layer + 1);
    files_.push_back(std::move(f));
  }
  index_.assign(2 * kSiteKinds * layers_, 0);
  for (std::size_t i = 0; i < files_.size(); ++i) index_[slot(files_[i].shape.site)] = i + 1;
}

std::size_t SiteFiles::slot(const Site& site) const {
  return (static_cast<std::size_t>(site.stack) * kSiteKinds + static_cast<std::size_t>(site.kind)) *
             layers_ +
         site.layer;
}

const SiteFiles::File* SiteFiles::find(const Site& site) const {
  if (site.layer >= layers_) return nullptr;
  const std::size_t i = index_[slot(site)];
  return i ? &files_[i - 1] : nullptr;
}

SiteFiles::File* SiteFiles::find(const Site& site) {
  return const_cast<File*>(static_cast<const SiteFiles*>(this)->find(site));
}

bool SiteFiles::wants(const Site& site) const {
  return find(site) != nullptr;
}

// Once a file's every element is written, it goes to disk in the background
// (the one thread that completes it starts the writeback).
void SiteFiles::wrote(File& f, std::size_t count) {
  const std::size_t total = f.shape.elements();
  if (f.written->fetch_add(count) + count == total) f.stream->start_writeback(0, total);
}

void SiteFiles::tensor(const Site& site, float* data, std::size_t rows, std::size_t cols,
                       std::size_t ld) {
  File* f = find(site);
  if (!f) return;
  if (rows * cols != f->shape.elements())
    fail_runtime(f->shape.name + ": the pass gave " + std::to_string(rows) + " x " +
                 std::to_string(cols) + " values, expected " + std::to_string(f->shape.elements()));
  if (ld == cols) {
    f->stream->write_elements(0, data, rows * cols);
  } else {
    for (std::size_t r = 0; r < rows; ++r) f->stream->write_elements(r * cols, data + r * ld, cols);
  }
  wrote(*f, rows * cols);
}

void SiteFiles::block(const Site& site, std::size_t b, std::size_t head, std::size_t t0,
                      std::size_t rows, float* data, std::size_t ld) {
  File* f = find(site);
  if (!f) return;
  const std::vector<std::size_t>& s = f->shape.shape;  // (B, h, T, S)
  if (b >= s[0] || head >= s[1] || t0 + rows > s[2])
    fail_runtime(f->shape.name + ": a block outside the site's shape");
  const std::size_t T = s[2], S = s[3], first = ((b * s[1] + head) * T + t0) * S;
  if (ld == S) {
    f->stream->write_elements(first, data, rows * S);
  } else {
    for (std::size_t r = 0; r < rows; ++r)
      f->stream->write_elements(first + r * S, data + r * ld, S);
  }
  wrote(*f, rows * S);
}

void SiteFiles::check_complete() const {
  for (const File& f : files_) {
    const std::size_t got = f.written->load(), want = f.shape.elements();
    if (got != want)
      fail_runtime(f.shape.name + ": the pass computed " + std::to_string(got) + " of its " +
                   std::to_string(want) + " values; the site was not saved");
  }
}

std::vector<std::string> SiteFiles::filenames() const {
  std::vector<std::string> out;
  for (const File& f : files_) out.push_back(site_filename(f.shape.name));
  return out;
}

std::uint64_t SiteFiles::bytes() const {
  return bytes_;
}

}  // namespace mha
