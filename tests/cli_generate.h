// A test fixture for `xdit generate` end to end: a scratch folder, runs of
// the binary writing out.png there with the test's request, and the check
// that a bad flag is one `xdit: error:` line that writes nothing.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "cli_util.h"

namespace xdit::test {

class GenerateCli : public testing::Test {
 protected:
  // `model`: a folder of models/ by default; `request`: the flags every run
  // gives (prompt, size, steps, seed, dtype).
  GenerateCli(const std::string& name, std::string model, std::string request)
      : dir_(std::filesystem::temp_directory_path() /
             ("xdit_cli_" + name + "_" + std::to_string(::getpid()))),
        model_(std::move(model)),
        request_(std::move(request)) {}
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string out() const { return (dir_ / "out.png").string(); }
  CommandResult generate(const std::string& extra, const std::string& model = "") const {
    return run_command(std::string("env XDIT_QUIET=1 '") + XDIT_BINARY + "' generate --model '" +
                           XDIT_MODELS + "/" + (model.empty() ? model_ : model) + "' " + request_ +
                           " -o '" + out() + "' " + extra,
                       (dir_ / "stderr.txt").string());
  }
  void expect_error(const std::string& extra, const std::string& expect,
                    const std::string& model = "") const {
    const CommandResult r = generate(extra, model);
    EXPECT_NE(r.code, 0) << r.err;
    EXPECT_EQ(r.err.rfind("xdit: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << "expected '" << expect << "' in " << r.err;
    EXPECT_FALSE(std::filesystem::exists(out()));
  }
  std::filesystem::path dir_;

 private:
  std::string model_, request_;
};

}  // namespace xdit::test
