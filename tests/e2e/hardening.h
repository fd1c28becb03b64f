// The fixture of the hardening tests: a copy of the tiny PixArt model in a
// fresh folder, xdit run on it, and the check that a refusal is one line,
// cheap, and leaves nothing behind.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "cli_util.h"
#include "io/json.h"
#include "test_util.h"

namespace xdit {

namespace fs = std::filesystem;

class Hardening : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::make_test_dir("xdit_hard_");
    fs::copy(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", dir_ / "model",
             fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  std::string model() const { return path("model"); }

  test::CommandResult xdit(const std::string& args) const {
    return test::run_command(
        std::string("env XDIT_QUIET=1 OMP_NUM_THREADS=1 '") + XDIT_BINARY + "' " + args,
        path("stderr.txt"));
  }
  // A small prompt-to-PNG run on the test's model copy.
  std::string generate(const std::string& extra, const std::string& out = "out.png") const {
    return "generate --model '" + model() +
           "' --prompt 'a red fox' --height 48 --width 80 --no_resolution_binning "
           "--num_inference_steps 2 --seed 1 --dtype f32 -o '" +
           path(out) + "' " + extra;
  }

  // Names in the test folder other than the model, the stderr capture and `keep`.
  std::set<std::string> stray_files(const std::set<std::string>& keep = {}) const {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n != "model" && n != "stderr.txt" && !keep.count(n)) s.insert(n);
    }
    return s;
  }

  // Refused with one line containing `expect`, cheaply, and nothing written.
  void expect_refused(const test::CommandResult& r, const std::string& expect,
                      const std::set<std::string>& keep = {}) const {
    EXPECT_NE(r.code, 0) << r.err;
    EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << ": " << r.err;
    EXPECT_EQ(r.err.rfind("xdit: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line expected: " << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << "expected '" << expect << "' in: " << r.err;
    for (const char* bare : {"std::", "bad_alloc", "filesystem error", "[json.exception"})
      EXPECT_EQ(r.err.find(bare), std::string::npos) << "a library's message leaked: " << r.err;
    EXPECT_LT(r.cpu_seconds, 2.0) << r.err;
    EXPECT_LT(r.max_rss_mb, 1024.0) << r.err;
    EXPECT_EQ(stray_files(keep), std::set<std::string>{}) << "left behind after: " << r.err;
  }

  // The model copy's `file` (JSON) with `key` set to `json`.
  void set_config(const std::string& file, const std::string& key, const std::string& json) const {
    const std::string p = (fs::path(model()) / file).string();
    io::Json j = io::read_json_file(p);
    j[key] = io::parse_json_text(json, "value");
    std::ofstream(p, std::ios::trunc) << j.dump(2);
  }

  void poison(const std::string& component, const std::string& tensor) const {
    ASSERT_TRUE(test::poison_f32(fs::path(model()) / component, tensor)) << tensor;
  }

  fs::path dir_;
};

}  // namespace xdit
