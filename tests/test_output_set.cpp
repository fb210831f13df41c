#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "mha/io/npz.hpp"
#include "mha/io/output_set.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using mha::NpyArray;
using mha::OutputSet;
using namespace mha::test;  // test_util.hpp

namespace {

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.insert(entry.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("OutputSet files appear only on commit", "[output]") {
  TempDir tmp("out");
  const std::string dir = tmp / "out";
  const std::vector<float> f = {1, 2, 3, 4, 5, 6};
  const std::vector<double> d = {0.25, -8};
  {
    OutputSet out(dir);
    CHECK(out.dir() == dir);
    CHECK(out.path("a.txt") == dir + "/a.txt");
    out.stage_bytes("report.json", "{\"ok\": true}\n");
    out.stage("log.txt", [](std::ostream& os) { os << "line 1\nline 2\n"; });
    out.stage_npy("output.npy", f.data(), {2, 3});
    out.stage_npy("scores.npy", d.data(), {2});
    out.stage_npz("all.npz", {{"output", NpyArray::of(f.data(), {3, 2})}});

    // Only hidden temporaries exist until commit.
    for (const auto& name : listing(dir)) CHECK(name.rfind(".", 0) == 0);
    CHECK(listing(dir).size() == 5);
    CHECK_FALSE(fs::exists(dir + "/output.npy"));
    CHECK(out.committed().empty());

    out.commit();
    CHECK(out.committed() == std::vector<std::string>{dir + "/report.json", dir + "/log.txt",
                                                      dir + "/output.npy", dir + "/scores.npy",
                                                      dir + "/all.npz"});
  }
  CHECK(listing(dir) ==
        std::set<std::string>{"report.json", "log.txt", "output.npy", "scores.npy", "all.npz"});
  CHECK(read_file(dir + "/report.json") == "{\"ok\": true}\n");
  CHECK(read_file(dir + "/log.txt") == "line 1\nline 2\n");
  CHECK(read_file(dir + "/output.npy") == mha::encode_npy(NpyArray::of(f.data(), {2, 3})));
  const NpyArray scores = mha::read_npy(dir + "/scores.npy");
  CHECK(scores.dtype == mha::DType::f8);
  CHECK(scores.data == NpyArray::of(d.data(), {2}).data);
  const auto all = mha::read_npz(dir + "/all.npz");
  CHECK(all.at("output").shape == std::vector<std::size_t>{3, 2});
}

TEST_CASE("OutputSet without commit leaves existing files alone", "[output]") {
  TempDir tmp("out");
  const std::string dir = tmp.path.string();
  write_file(tmp / "output.npy", "previous run");
  {
    OutputSet out(dir);
    const std::vector<float> f = {1, 2};
    out.stage_npy("output.npy", f.data(), {2});
    out.stage_bytes("new.txt", "x");
    out.stage_npz("w.npz", {});
    CHECK(listing(tmp.path).size() == 4);
  }
  CHECK(listing(tmp.path) == std::set<std::string>{"output.npy"});
  CHECK(read_file(tmp / "output.npy") == "previous run");
}

TEST_CASE("OutputSet commit replaces existing files", "[output]") {
  TempDir tmp("out");
  write_file(tmp / "report.json", "old");
  OutputSet out(tmp.path.string());
  out.stage_bytes("report.json", "new");
  out.commit();
  CHECK(read_file(tmp / "report.json") == "new");
  CHECK(listing(tmp.path) == std::set<std::string>{"report.json"});
}

TEST_CASE("OutputSet creates nested directories", "[output]") {
  TempDir tmp("out");
  const std::string dir = tmp / "a/b/c";
  OutputSet out(dir);
  CHECK(fs::is_directory(dir));
  out.stage_bytes("x", "1");
  out.commit();
  CHECK(read_file(dir + "/x") == "1");
}

TEST_CASE("OutputSet refuses unusable directories", "[output]") {
  TempDir tmp("out");
  write_file(tmp / "file", "not a directory");
  require_runtime([&] { OutputSet out(tmp / "file"); },
                  tmp / "file" + ": output directory exists but is not a directory");
  require_runtime([&] { OutputSet out(tmp / "file/sub"); },
                  tmp / "file/sub" + ": cannot create output directory");

  // A directory nobody may write to. Root may write anywhere, so as root the
  // check runs in a child that has dropped to the unprivileged user nobody
  // (65534): CI runs as root, and the check must run there too.
  fs::create_directory(tmp / "ro");
  fs::permissions(tmp.path, fs::perms::others_exec, fs::perm_options::add);
  fs::permissions(tmp / "ro", fs::perms::owner_read | fs::perms::owner_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  const std::string ro = tmp / "ro";
  const std::string expected = ro + ": output directory is not writable: Permission denied";
  auto message = [&]() -> std::string {
    try {
      OutputSet out(ro);
    } catch (const mha::Error& e) {
      return e.kind() == mha::ErrorKind::runtime ? e.what() : "";
    }
    return "";
  };
  if (::geteuid() != 0) {
    CHECK(message() == expected);
    return;
  }
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const bool dropped = ::setgid(65534) == 0 && ::setuid(65534) == 0 && ::geteuid() == 65534;
    ::_exit(!dropped ? 3 : message() == expected ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 1: another message or none; 3: could not drop root
}

TEST_CASE("OutputSet refuses staging a file twice", "[output]") {
  TempDir tmp("out");
  OutputSet out(tmp.path.string());
  out.stage_bytes("a.txt", "1");
  require_runtime([&] { out.stage_bytes("a.txt", "2"); },
                  tmp / "a.txt" + ": staged more than once");
  require_runtime([&] { out.stage_npz("a.txt", {}); }, "staged more than once");
  out.commit();
  require_runtime([&] { out.stage_bytes("a.txt", "3"); }, "staged more than once");
  CHECK(read_file(tmp / "a.txt") == "1");
}

TEST_CASE("OutputSet write failures remove the temporary", "[output]") {
  TempDir tmp("out");
  OutputSet out(tmp.path.string());
  SECTION("stream error") {
    require_runtime(
        [&] {
          out.stage("out.npy", [](std::ostream& os) {
            os << "partial";
            os.setstate(std::ios::badbit);
          });
        },
        tmp / "out.npy" + ": write failed: ");
  }
  SECTION("exception from the writer") {
    REQUIRE_THROWS_AS(out.stage("out.npy", [](std::ostream&) { throw std::logic_error("boom"); }),
                      std::logic_error);
  }
  SECTION("npz error names the final file") {
    NpyArray bad;
    bad.shape = {3};  // but no data
    require_runtime(
        [&] {
          out.stage_npz("w.npz", {{"a", bad}});
        },
        tmp / "w.npz" + ": member 'a.npy'");
  }
  CHECK(listing(tmp.path).empty());
  out.commit();
  CHECK(listing(tmp.path).empty());
}

TEST_CASE("OutputSet commit failure keeps going safely", "[output]") {
  TempDir tmp("out");
  fs::create_directory(tmp / "blocked");
  write_file(tmp / "blocked/inside", "x");
  {
    OutputSet out(tmp.path.string());
    out.stage_bytes("first.txt", "1");
    out.stage_bytes("blocked", "2");  // a non-empty directory cannot be replaced by a file
    out.stage_bytes("third.txt", "3");
    require_runtime([&] { out.commit(); },
                    tmp / "blocked" + ": cannot move the finished file into place");
    CHECK(out.committed() == std::vector<std::string>{tmp / "first.txt"});
  }
  CHECK(listing(tmp.path) == std::set<std::string>{"first.txt", "blocked"});
  CHECK(fs::is_directory(tmp / "blocked"));
}

TEST_CASE("OutputSet temporaries of two sets do not collide", "[output]") {
  TempDir tmp("out");
  OutputSet a(tmp.path.string());
  OutputSet b(tmp.path.string());
  a.stage_bytes("x.txt", "a");
  b.stage_bytes("x.txt", "b");
  CHECK(listing(tmp.path).size() == 2);
  b.commit();
  CHECK(read_file(tmp / "x.txt") == "b");
}
