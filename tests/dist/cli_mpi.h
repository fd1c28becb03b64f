// The fixture of the mpirun end-to-end tests (test_cli_mpi*.cpp): `xdit`
// run directly or on N ranks with a hard time limit, mpirun's MPMD form,
// and the check that parallel runs write the serial run's pixels. A target
// including it defines MPIEXEC (and the tests' XDIT_BINARY, XDIT_MODELS).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli_util.h"
#include "io/png.h"
#include "test_util.h"

namespace xdit::test {

// The paths fixed at build time; the environment overrides them where the
// binaries run from another checkout (scripts/gpu_check.sh on a GPU machine).
inline std::string binary() {
  return path_from_env("XDIT_BINARY", XDIT_BINARY);
}
inline std::string mpiexec() {
  return path_from_env("XDIT_MPIEXEC", MPIEXEC);
}
inline std::string models() {
  return path_from_env("XDIT_MODELS", XDIT_MODELS);
}

struct Result {
  int code;
  std::string err;
  double seconds;
};

class CliMpi : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_test_dir("xdit_mpi_"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }

  // Runs `xdit ARGS` on `np` ranks (np 0: directly), with a hard time limit.
  Result run(int np, const std::string& args, const std::string& env = "", int limit = 120) const {
    const std::string err = path("stderr.txt");
    std::string cmd =
        "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
        "XDIT_QUIET=1 " +
        env + " timeout " + std::to_string(limit) + " ";
    if (np > 0)
      cmd += mpiexec() + " -np " + std::to_string(np) +
             " --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none ";
    cmd += std::string("'") + binary() + "' " + args;
    const auto r = run_command(cmd, err);
    return {r.code, r.err, r.wall_seconds};
  }

  // mpirun's MPMD form: `contexts` is "-np 1 CMD : -np 1 CMD ..." (each
  // with its own options), with the same limits as run().
  Result run_mpmd(const std::string& contexts) const {
    const std::string cmd =
        "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
        "XDIT_QUIET=1 timeout 120 " +
        mpiexec() + " --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none " +
        contexts;
    const auto r = run_command(cmd, path("stderr.txt"));
    return {r.code, r.err, r.wall_seconds};
  }

  std::string args(const std::string& out, const std::string& extra) const {
    return "generate --model '" + models() +
           "/pixart-sigma-tiny' --prompt 'a red fox' --prompt 'a cat on a mat' --height 128 "
           "--width 96 "
           "--num_inference_steps 3 --guidance_scale 3 --seed 5 --no_resolution_binning --dtype "
           "f32 -o '" +
           path(out) + "' " + extra;
  }

  // Max per-pixel difference between two PNGs.
  static int pixel_diff(const std::string& a, const std::string& b) {
    io::PngImage x = io::read_png(a), y = io::read_png(b);
    EXPECT_EQ(x.rgb.size(), y.rgb.size());
    int worst = 0;
    for (size_t i = 0; i < std::min(x.rgb.size(), y.rgb.size()); ++i)
      worst = std::max(worst, std::abs(static_cast<int>(x.rgb[i]) - y.rgb[i]));
    return worst;
  }

  // Runs `make(out, flags)` serially and then under each (ranks, flags):
  // every parallel run writes the serial run's two images (within 1/255).
  using Runs = std::vector<std::pair<int, std::string>>;
  void expect_serial_pixels(
      const std::function<std::string(const std::string&, const std::string&)>& make,
      const Runs& runs, const std::string& name = "") const {
    Result s = run(0, make(name + "serial.png", ""));
    ASSERT_EQ(s.code, 0) << s.err;
    for (const auto& [np, flags] : runs) {
      SCOPED_TRACE(flags);
      Result r = run(np, make(name + "par.png", flags));
      ASSERT_EQ(r.code, 0) << r.err;
      for (const char* i : {"_0.png", "_1.png"})
        EXPECT_LE(pixel_diff(path(name + "par" + i), path(name + "serial" + i)), 1);
      EXPECT_NE(io::read_png(path(name + "par_0.png")).text["parallel"].find("dp="),
                std::string::npos);
    }
  }

  std::filesystem::path dir_;
};

}  // namespace xdit::test
