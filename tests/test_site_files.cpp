#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/output_set.hpp"
#include "mha/run/site_files.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace mha;
using namespace mha::test;  // test_util.hpp

namespace {

ModelConfig gpt2_like() {
  ModelConfig c;
  c.model_type = "gpt2";
  c.num_layers = 2;
  c.d_model = 8;
  c.h = 2;
  c.kv_heads = 2;
  c.head_dim = 4;
  c.d_ff = 32;
  c.position_rows = 16;
  c.final_norm = true;
  return c;
}

std::vector<std::string> names(const std::vector<SiteShape>& sites) {
  std::vector<std::string> out;
  for (const SiteShape& s : sites) out.push_back(s.name);
  return out;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("model_sites lists a model's sites with the table's shapes", "[sites]") {
  const ModelConfig c = gpt2_like();
  const std::vector<SiteShape> sites = model_sites(c, 3, 5);
  // embed, pos_embed, 2 layers x 15 kinds, ln_final
  CHECK(sites.size() == 2 + 2 * 15 + 1);
  CHECK(sites.front().name == "hook_embed");
  CHECK(sites[1].name == "hook_pos_embed");
  CHECK(sites.back().name == "ln_final.hook_normalized");
  for (const SiteShape& s : sites) {
    if (s.name == "blocks.1.attn.hook_z") CHECK(s.shape == std::vector<std::size_t>{3, 5, 2, 4});
    if (s.name == "blocks.0.attn.hook_pattern")
      CHECK(s.shape == std::vector<std::size_t>{3, 2, 5, 5});
    if (s.name == "blocks.0.mlp.hook_post") CHECK(s.shape == std::vector<std::size_t>{3, 5, 32});
    if (s.name == "blocks.0.hook_resid_mid") CHECK(s.shape == std::vector<std::size_t>{3, 5, 8});
  }

  ModelConfig neox = gpt2_like();  // parallel residual, rotary, no position table
  neox.parallel_residual = true;
  neox.position_rows = 0;
  neox.kv_heads = 1;
  const std::vector<std::string> n = names(model_sites(neox, 1, 4));
  CHECK(std::find(n.begin(), n.end(), "blocks.0.hook_resid_mid") == n.end());
  CHECK(std::find(n.begin(), n.end(), "hook_pos_embed") == n.end());
  for (const SiteShape& s : model_sites(neox, 1, 4))
    if (s.name == "blocks.0.attn.hook_k") CHECK(s.shape == std::vector<std::size_t>{1, 4, 1, 4});
}

TEST_CASE("model_sites of an image model: its pass starts from the patch embeddings", "[sites]") {
  ModelConfig c = gpt2_like();
  c.patch_size = 4;
  c.image_height = c.image_width = 8;
  const std::vector<std::string> n = names(model_sites(c, 1, 5));
  CHECK(n.front() == "blocks.0.hook_resid_pre");
  CHECK(std::find(n.begin(), n.end(), "hook_pos_embed") == n.end());
  CHECK(n.back() == "ln_final.hook_normalized");
}

TEST_CASE("model_sites of an encoder-decoder: prefixes and the cross-attention", "[sites]") {
  ModelConfig c = gpt2_like();
  c.encoder_decoder = true;
  c.num_decoder_layers = 1;
  c.position_rows = 0;
  const std::vector<SiteShape> sites = model_sites(c, 2, 7, 3);  // 7 source, 3 target tokens
  const std::vector<std::string> n = names(sites);
  CHECK(n.front() == "encoder.hook_embed");
  CHECK(std::find(n.begin(), n.end(), "encoder.blocks.1.attn.hook_z") != n.end());
  CHECK(std::find(n.begin(), n.end(), "encoder.blocks.0.cross_attn.hook_z") == n.end());
  CHECK(std::find(n.begin(), n.end(), "decoder.blocks.1.attn.hook_z") == n.end());
  CHECK(std::find(n.begin(), n.end(), "decoder.ln_final.hook_normalized") != n.end());
  for (const SiteShape& s : sites) {
    if (s.name == "decoder.blocks.0.cross_attn.hook_pattern")
      CHECK(s.shape == std::vector<std::size_t>{2, 2, 3, 7});
    if (s.name == "decoder.blocks.0.cross_attn.hook_k")
      CHECK(s.shape == std::vector<std::size_t>{2, 7, 2, 4});
    if (s.name == "decoder.blocks.0.ln3.hook_normalized")
      CHECK(s.shape == std::vector<std::size_t>{2, 3, 8});
    if (s.name == "encoder.blocks.0.attn.hook_pattern")
      CHECK(s.shape == std::vector<std::size_t>{2, 2, 7, 7});
  }
}

TEST_CASE("select_sites: globs, and patterns that match nothing", "[sites]") {
  const std::vector<SiteShape> sites = model_sites(gpt2_like(), 1, 4);
  CHECK(names(select_sites(sites, split_site_patterns("blocks.*.attn.hook_z, hook_resid_post"),
                           "--save_sites")) ==
        std::vector<std::string>{"blocks.0.attn.hook_z", "blocks.0.hook_resid_post",
                                 "blocks.1.attn.hook_z", "blocks.1.hook_resid_post"});
  CHECK(names(select_sites(sites, {"*resid_post", "blocks.1.hook_resid_post"}, "x")) ==
        std::vector<std::string>{"blocks.0.hook_resid_post", "blocks.1.hook_resid_post"});
  CHECK(select_sites(sites, {"*"}, "x").size() == sites.size());

  const std::string typo =
      message_of([&] { select_sites(sites, {"blocks.0.attn.hook_zz"}, "--save_sites"); });
  CHECK(typo.find("--save_sites: 'blocks.0.attn.hook_zz' matches no site of this model") !=
        std::string::npos);
  CHECK(typo.find("did you mean 'blocks.0.attn.hook_z'?") != std::string::npos);
  CHECK(typo.find("hook_embed, hook_pos_embed, blocks.*.hook_resid_pre") != std::string::npos);
  const std::string range = message_of([&] { select_sites(sites, {"blocks.2.attn.hook_z"}, "x"); });
  CHECK(range.find("'blocks.2.attn.hook_z' matches no site") != std::string::npos);
  CHECK(message_of([&] {
          select_sites(sites, split_site_patterns("hook_embed,,"), "x");
        }).find("an empty site pattern") != std::string::npos);
  CHECK(message_of([&] { select_sites(sites, {}, "x"); }).find("expected site names") !=
        std::string::npos);
}

TEST_CASE("SiteFiles streams tensors and blocks to sites/<name>.npy on commit", "[sites]") {
  TempDir tmp("sites");
  const std::string dir = tmp / "out";
  const ModelConfig c = gpt2_like();
  const std::size_t B = 2, T = 3;
  const std::vector<SiteShape> chosen = select_sites(
      model_sites(c, B, T), {"blocks.1.attn.hook_z", "blocks.0.attn.hook_pattern"}, "x");
  {
    OutputSet out(dir);
    SiteFiles files(out, chosen);
    CHECK(files.filenames() == std::vector<std::string>{"sites/blocks.0.attn.hook_pattern.npy",
                                                        "sites/blocks.1.attn.hook_z.npy"});
    const Site z{SiteKind::z, Stack::main, 1}, pattern{SiteKind::pattern, Stack::main, 0};
    CHECK(files.wants(z));
    CHECK(files.wants(pattern));
    CHECK_FALSE(files.wants(Site{SiteKind::z, Stack::main, 0}));
    CHECK_FALSE(files.wants(Site{SiteKind::z, Stack::decoder, 1}));
    CHECK_FALSE(files.wants(Site{SiteKind::resid_pre, Stack::main, 7}));
    // z: (B*T, h*d) = (6, 8) with row stride 10 (padding columns not written)
    std::vector<float> zs(6 * 10, -1.0f);
    for (std::size_t r = 0; r < 6; ++r)
      for (std::size_t j = 0; j < 8; ++j) zs[r * 10 + j] = static_cast<float>(r * 8 + j);
    files.tensor(z, zs.data(), 6, 8, 10);
    // the pattern in (rows, S) blocks from several threads, row stride 4
    std::vector<std::thread> threads;
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < 2; ++h)
        threads.emplace_back([&, b, h] {
          for (std::size_t t0 = 0; t0 < T; t0 += 2) {
            const std::size_t rows = std::min<std::size_t>(2, T - t0);
            std::vector<float> block(rows * 4, -1.0f);
            for (std::size_t r = 0; r < rows; ++r)
              for (std::size_t s = 0; s < T; ++s)
                block[r * 4 + s] = static_cast<float>(((b * 2 + h) * T + t0 + r) * T + s);
            files.block(pattern, b, h, t0, rows, block.data(), 4);
          }
        });
    for (std::thread& t : threads) t.join();
    CHECK_FALSE(fs::exists(fs::path(dir) / "sites" / "blocks.1.attn.hook_z.npy"));
    files.check_complete();
    out.commit();
  }
  const NpyArray z = read_npy((fs::path(dir) / "sites" / "blocks.1.attn.hook_z.npy").string());
  CHECK(z.shape == std::vector<std::size_t>{B, T, 2, 4});
  std::vector<float> got(z.size());
  convert(z, got.data(), "z");
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == static_cast<float>(i));
  const NpyArray p =
      read_npy((fs::path(dir) / "sites" / "blocks.0.attn.hook_pattern.npy").string());
  CHECK(p.shape == std::vector<std::size_t>{B, 2, T, T});
  got.assign(p.size(), 0);
  convert(p, got.data(), "pattern");
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == static_cast<float>(i));
}

TEST_CASE("SiteFiles: nothing appears without commit", "[sites]") {
  TempDir tmp("sites");
  const std::string dir = tmp / "out";
  {
    OutputSet out(dir);
    SiteFiles files(out, select_sites(model_sites(gpt2_like(), 1, 2), {"hook_embed"}, "x"));
    CHECK(files.bytes() > 4 * 2 * 8);
    CHECK(message_of([&] { files.check_complete(); }) ==
          "hook_embed: the pass computed 0 of its 16 values; the site was not saved");
  }
  CHECK(fs::is_empty(fs::path(dir) / "sites"));
}

TEST_CASE("pattern_matches: whole names and their ends after a dot", "[sites]") {
  CHECK(pattern_matches("hook_resid_post", "blocks.3.hook_resid_post"));
  CHECK(pattern_matches("hook_resid_post", "decoder.blocks.0.hook_resid_post"));
  CHECK(pattern_matches("blocks.*.attn.hook_z", "encoder.blocks.1.attn.hook_z"));
  CHECK_FALSE(pattern_matches("attn.hook_z", "decoder.blocks.0.cross_attn.hook_z"));
  CHECK(pattern_matches("hook_z", "decoder.blocks.0.cross_attn.hook_z"));
  CHECK_FALSE(pattern_matches("resid_post", "blocks.0.hook_resid_post"));
  CHECK(pattern_matches("blocks.1?.hook_resid_pre", "blocks.12.hook_resid_pre"));
  CHECK_FALSE(pattern_matches("blocks.1.hook_resid_pre", "blocks.12.hook_resid_pre"));
}

TEST_CASE("earlier_site_files: site files of sites/, not links, inputs or other files", "[sites]") {
  TempDir tmp("sites");
  const fs::path dir = tmp.path / "out";
  CHECK(earlier_site_files(dir.string(), nullptr).empty());  // no directory
  fs::create_directories(dir / "sites");
  for (const char* name : {"blocks.0.attn.hook_z.npy", "hook_embed.npy", "decoder.hook_embed.npy",
                           "ids.npy", "blocks.1.hook_resid_pre.npy", ".x.npy.tmp.1.2", "notes.txt"})
    std::ofstream(dir / "sites" / name) << "x";
  fs::create_symlink(dir / "sites" / "hook_embed.npy", dir / "sites" / "hook_pos_embed.npy");
  const auto input = [&](const std::string& p) {
    return fs::path(p).filename() == "blocks.1.hook_resid_pre.npy";
  };
  CHECK(earlier_site_files(dir.string(), input, {"run.json"}) ==
        std::vector<std::string>{"run.json", "sites/blocks.0.attn.hook_z.npy",
                                 "sites/decoder.hook_embed.npy", "sites/hook_embed.npy"});
  {
    OutputSet out(dir.string());
    SiteFiles files(out, select_sites(model_sites(gpt2_like(), 1, 2), {"hook_embed"}, "x"));
    std::vector<float> x(2 * 8, 1.0f);
    files.tensor(Site{SiteKind::embed, Stack::main, 0}, x.data(), 2, 8, 8);
    out.remove_on_commit(earlier_site_files(dir.string(), input));
    out.commit();
  }
  CHECK_FALSE(fs::exists(dir / "sites" / "blocks.0.attn.hook_z.npy"));
  CHECK(read_npy((dir / "sites" / "hook_embed.npy").string()).shape ==
        std::vector<std::size_t>{1, 2, 8});
  for (const char* kept : {"ids.npy", "notes.txt", "blocks.1.hook_resid_pre.npy"})
    CHECK(fs::exists(dir / "sites" / kept));
}
