// --model as users type it: a folder, or a Hugging Face repo id resolved
// offline through a (fake) Hugging Face cache made in a temporary folder —
// refs, two snapshots, files symlinked to blobs, a missing refs folder, a
// ref to a missing snapshot and a broken symlink.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_util.h"
#include "io/model_ref.h"
#include "io/png.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;

const std::string kAlpha(40, 'a'), kSigma = std::string(39, 'b') + "1", kGone(40, 'c');

class ModelRef : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::make_test_dir("xdit_hf_");
    hub_ = dir_ / "hub";
    // acme/tiny-pixart: main → the α model, v2 → the Σ model.
    const fs::path repo = hub_ / "models--acme--tiny-pixart";
    snapshot(repo, kAlpha, std::string(XDIT_MODELS) + "/pixart-alpha-tiny");
    snapshot(repo, kSigma, std::string(XDIT_MODELS) + "/pixart-sigma-tiny");
    ref(repo, "main", kAlpha);
    ref(repo, "v2", kSigma);
    // acme/no-refs: a snapshot but no refs/ folder.
    snapshot(hub_ / "models--acme--no-refs", kAlpha,
             std::string(XDIT_MODELS) + "/pixart-alpha-tiny");
    // acme/gone: refs/main names a snapshot that is not there.
    ref(hub_ / "models--acme--gone", "main", kGone);
    // acme/broken: one file's blob is missing.
    const fs::path broken = hub_ / "models--acme--broken";
    snapshot(broken, kAlpha, std::string(XDIT_MODELS) + "/pixart-alpha-tiny");
    ref(broken, "main", kAlpha);
    const fs::path vae_cfg = broken / "snapshots" / kAlpha / "vae" / "config.json";
    fs::remove(fs::canonical(vae_cfg));
    saved_ = getenv_or("HF_HUB_CACHE");
    ::setenv("HF_HUB_CACHE", hub_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_.empty())
      ::unsetenv("HF_HUB_CACHE");
    else
      ::setenv("HF_HUB_CACHE", saved_.c_str(), 1);
    fs::remove_all(dir_);
  }

  static std::string getenv_or(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  }
  // snapshots/<hash>/ holding `from`'s files as relative symlinks into blobs/.
  static void snapshot(const fs::path& repo, const std::string& hash, const fs::path& from) {
    fs::create_directories(repo / "blobs");
    int n = 0;
    for (const auto& e : fs::recursive_directory_iterator(from)) {
      if (!e.is_regular_file()) continue;
      const fs::path rel = fs::relative(e.path(), from);
      const fs::path blob = repo / "blobs" / (hash.substr(0, 8) + "-" + std::to_string(n++));
      fs::copy_file(e.path(), blob);
      const fs::path link = repo / "snapshots" / hash / rel;
      fs::create_directories(link.parent_path());
      fs::create_symlink(fs::relative(blob, link.parent_path()), link);
    }
  }
  static void ref(const fs::path& repo, const std::string& name, const std::string& hash) {
    fs::create_directories(repo / "refs");
    std::ofstream(repo / "refs" / name) << hash;  // huggingface_hub writes no newline
  }
  fs::path snap(const std::string& repo, const std::string& hash) const {
    return hub_ / ("models--acme--" + repo) / "snapshots" / hash;
  }

  fs::path dir_, hub_;
  std::string saved_;
};

TEST_F(ModelRef, AnIdResolvesThroughRefsMain) {
  const io::ModelRef m = io::resolve_model("acme/tiny-pixart");
  EXPECT_EQ(m.id, "acme/tiny-pixart");
  EXPECT_EQ(m.revision, "main");
  EXPECT_EQ(m.commit, kAlpha);
  EXPECT_EQ(fs::path(m.folder), snap("tiny-pixart", kAlpha));
}

TEST_F(ModelRef, ARevisionOrAHashPicksItsSnapshot) {
  EXPECT_EQ(io::resolve_model("acme/tiny-pixart@v2").commit, kSigma);
  const io::ModelRef by_hash = io::resolve_model("acme/tiny-pixart@" + kSigma);
  EXPECT_EQ(fs::path(by_hash.folder), snap("tiny-pixart", kSigma));
  // A hash needs no ref: the snapshot alone is enough.
  EXPECT_EQ(io::resolve_model("acme/no-refs@" + kAlpha).commit, kAlpha);
}

TEST_F(ModelRef, AFolderAlwaysWinsOverAnId) {
  const fs::path cwd = fs::current_path();
  fs::create_directories(dir_ / "work" / "acme" / "tiny-pixart");
  fs::current_path(dir_ / "work");
  const io::ModelRef m = io::resolve_model("acme/tiny-pixart");
  fs::current_path(cwd);
  EXPECT_FALSE(m.from_cache());
  EXPECT_EQ(m.folder, "acme/tiny-pixart");
}

TEST_F(ModelRef, WhatIsNotThereIsOneLineWithTheDownloadCommand) {
  auto msg = test::error_message([] { io::resolve_model("acme/missing"); });
  EXPECT_NE(msg.find("looked in " + (hub_ / "models--acme--missing").string()), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("huggingface-cli download acme/missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("xdit never downloads by itself"), std::string::npos) << msg;
  msg = test::error_message([] { io::resolve_model("acme/tiny-pixart@v9"); });
  EXPECT_NE(msg.find("no revision 'v9'"), std::string::npos) << msg;
  msg = test::error_message([] { io::resolve_model("acme/no-refs"); });
  EXPECT_NE(msg.find("no revision 'main'"), std::string::npos) << msg;
}

TEST_F(ModelRef, ARefToAMissingSnapshotIsNamed) {
  const auto msg = test::error_message([] { io::resolve_model("acme/gone"); });
  EXPECT_NE(msg.find("snapshot " + kGone + " is not in the cache"), std::string::npos) << msg;
}

TEST_F(ModelRef, ASymlinkToAMissingBlobIsNamed) {
  const auto msg = test::error_message([] { io::resolve_model("acme/broken"); });
  EXPECT_NE(msg.find((snap("broken", kAlpha) / "vae" / "config.json").string() +
                     " points to a blob that is missing"),
            std::string::npos)
      << msg;
}

TEST_F(ModelRef, DotDotAndAbsolutePathsAreNotIds) {
  for (const char* bad : {"acme/..", "../acme", "/nowhere/model", "acme/x--y", "a/b/c"}) {
    const auto msg = test::error_message([&] { io::resolve_model(bad); });
    EXPECT_NE(msg, "(no error)") << bad;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("does not exist") != std::string::npos ||
                msg.find("is neither a folder nor a Hugging Face repo id") != std::string::npos)
        << bad << ": " << msg;
  }
  for (const char* bad :
       {"acme/tiny-pixart@../../etc", "acme/tiny-pixart@/etc", "acme/tiny-pixart@"})
    EXPECT_NE(test::error_message([&] { io::resolve_model(bad); }).find("is not a branch"),
              std::string::npos)
        << bad;
}

TEST_F(ModelRef, TheCacheIsFoundAsHuggingfaceHubFindsIt) {
  EXPECT_EQ(io::hf_hub_cache(), hub_.string());
  const std::string home = getenv_or("HF_HOME");
  ::unsetenv("HF_HUB_CACHE");
  ::setenv("HF_HOME", "/somewhere/hf", 1);
  EXPECT_EQ(io::hf_hub_cache(), "/somewhere/hf/hub");
  ::unsetenv("HF_HOME");
  EXPECT_EQ(io::hf_hub_cache(), getenv_or("HOME") + "/.cache/huggingface/hub");
  if (!home.empty()) ::setenv("HF_HOME", home.c_str(), 1);
}

TEST_F(ModelRef, ListedWithClassRevisionRefsAndSize) {
  const auto models = io::list_cached_models();
  int tiny = 0;
  for (const auto& m : models) {
    if (m.id != "acme/tiny-pixart") continue;
    ++tiny;
    EXPECT_EQ(m.pipeline_class, m.commit == kAlpha ? "PixArtAlphaPipeline" : "PixArtSigmaPipeline");
    EXPECT_EQ(m.refs, std::vector<std::string>{m.commit == kAlpha ? "main" : "v2"});
    EXPECT_GT(m.bytes, 100000u);
  }
  EXPECT_EQ(tiny, 2);
}

TEST_F(ModelRef, GenerateAndInfoTakeAnIdAndRecordIt) {
  const std::string env =
      "env HF_HUB_CACHE='" + hub_.string() + "' XDIT_QUIET=1 '" + XDIT_BINARY + "' ";
  const std::string out = (dir_ / "out.png").string();
  auto r = test::run_command(env +
                                 "generate --model acme/tiny-pixart@v2 --prompt x --height 48 "
                                 "--width 80 --no_resolution_binning --num_inference_steps 2 -o '" +
                                 out + "'",
                             (dir_ / "err.txt").string());
  ASSERT_EQ(r.code, 0) << r.err;
  io::PngImage png = io::read_png(out);
  EXPECT_EQ(png.text["model"], "acme/tiny-pixart");
  EXPECT_EQ(png.text["model_revision"], kSigma);
  EXPECT_EQ(fs::path(png.text["model_folder"]), snap("tiny-pixart", kSigma));
  r = test::run_command(
      "sh -c \"" + env + "info --model acme/tiny-pixart > '" + (dir_ / "info.txt").string() + "'\"",
      (dir_ / "err.txt").string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(dir_ / "info.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("acme/tiny-pixart@main (snapshot " + kAlpha), std::string::npos)
      << ss.str();
  r = test::run_command("sh -c \"" + env + "list-models > '" + (dir_ / "list.txt").string() + "'\"",
                        (dir_ / "err.txt").string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream lin(dir_ / "list.txt");
  std::stringstream ls;
  ls << lin.rdbuf();
  EXPECT_NE(ls.str().find("PixArtSigmaPipeline"), std::string::npos) << ls.str();
  EXPECT_NE(ls.str().find(kAlpha.substr(0, 12) + " main"), std::string::npos) << ls.str();
  r = test::run_command(env + "generate --model acme/missing --prompt x",
                        (dir_ / "err.txt").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("huggingface-cli download acme/missing"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace xdit
