// The activation sites a user asks for (`mha run --save_sites PATTERNS`,
// mha.Model.run_with_cache): which sites a model's pass has, with their
// shapes; name patterns checked against them; and the hook that streams the
// chosen sites to .npy files as the pass computes them.
//
// Files: one per site, <out_dir>/sites/<name>.npy, float32 in the shape of
// kernel/site.hpp's table (a layer's site is its own file:
// sites/blocks.3.attn.hook_z.npy is (B, T, h, d_head)). Each file is staged
// in the run's OutputSet with its full size reserved before the pass (a full
// disk fails then, before any compute), written as its tensor or blocks
// arrive, and committed with the run's other outputs, all-or-nothing: no site
// is held in memory past the call that shows it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mha/checkpoint/model_config.hpp"
#include "mha/io/output_set.hpp"
#include "mha/kernel/site.hpp"

namespace mha {

struct SiteShape {
  Site site;
  std::string name;                // site_name(site, encoder_decoder)
  std::vector<std::size_t> shape;  // kernel/site.hpp's table
  std::size_t elements() const;
};

// Every site a pass of `c` computes, in the pass's order, for B rows of T
// tokens; an encoder-decoder's encoder reads T source tokens and its decoder
// T_dec target tokens (its cross-attention's keys are the T source positions).
std::vector<SiteShape> model_sites(const ModelConfig& c, std::size_t B, std::size_t T,
                                   std::size_t T_dec = 0);

// A pattern matches a site's name, or the end of it after a dot, as a shell
// glob (site_matches): "hook_resid_post" is every layer's (and both stacks'
// of an encoder-decoder), "blocks.*.attn.hook_z" every layer's hook_z,
// "blocks.3.*" all of layer 3, "*" everything.
bool pattern_matches(const std::string& pattern, const std::string& name);

// The sites of `sites` that any of `patterns` matches, in the order of `sites`. A pattern that
// matches none is an error (mha::Error, invalid_input) naming `what` (e.g. "--save_sites") and the
// pattern, with the nearest site name and a few valid ones; so is an empty
// pattern.
std::vector<SiteShape> select_sites(const std::vector<SiteShape>& sites,
                                    const std::vector<std::string>& patterns,
                                    const std::string& what);
// `list` split at commas ("blocks.*.attn.hook_z,hook_resid_post").
std::vector<std::string> split_site_patterns(const std::string& list);
// --save_sites PATTERNS: the sites of model_sites(c, B, T, T_dec) it chooses
// (select_sites), none when `patterns` is empty.
std::vector<SiteShape> sites_to_save(const ModelConfig& c, std::size_t B, std::size_t T,
                                     std::size_t T_dec, const std::string& patterns);

// The file a site is saved to, relative to the output directory.
std::string site_filename(const std::string& name);  // "sites/" + name + ".npy"

// The site files an earlier run left in `out_dir`, for
// OutputSet::remove_on_commit: "sites/<name>.npy" for each regular file there
// (links not followed) whose <name> is a site's name (parse_site_name) and
// that `is_input` does not call an input of the new run; a run's commit
// replaces the whole set, as it replaces its other outputs
// (earlier_run_outputs, whose list `names` this appends to). Other files in
// sites/ are left alone.
std::vector<std::string> earlier_site_files(const std::string& out_dir,
                                            const std::function<bool(const std::string&)>& is_input,
                                            std::vector<std::string> names = {});

// A SiteHook<float> that writes each chosen site to its file in `out`
// (creates <out dir>/sites/). Wants only the chosen sites.
class SiteFiles : public SiteHook<float> {
 public:
  SiteFiles(OutputSet& out, std::vector<SiteShape> sites);
  bool wants(const Site& site) const override;
  void tensor(const Site& site, float* data, std::size_t rows, std::size_t cols,
              std::size_t ld) override;
  void block(const Site& site, std::size_t b, std::size_t head, std::size_t t0, std::size_t rows,
             float* data, std::size_t ld) override;

  // After the pass: throws mha::Error (runtime) naming the first site the
  // pass did not show whole (a site model_sites lists that the forward lacks).
  void check_complete() const;

  // The files staged, relative to the output directory, in the sites' order.
  std::vector<std::string> filenames() const;
  std::uint64_t bytes() const;  // their size, headers included

 private:
  struct File {
    SiteShape shape;
    const OutputSet::NpyStream* stream = nullptr;
    std::unique_ptr<std::atomic<std::size_t>> written;  // elements, for the writeback
  };
  File* find(const Site& site);
  const File* find(const Site& site) const;
  void wrote(File& f, std::size_t count);
  std::size_t slot(const Site& site) const;  // into index_
  std::vector<File> files_;
  std::vector<std::size_t> index_;  // per (stack, kind, layer): 1 + the file's index, or 0
  std::size_t layers_ = 0;          // 1 + the largest layer of a chosen site
  std::uint64_t bytes_ = 0;
};

}  // namespace mha
