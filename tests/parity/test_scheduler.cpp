// DPMSolverMultistepScheduler against diffusers (tools/goldens/make_scheduler.py):
// timesteps, sigmas and whole trajectories for α/Σ-style and other configs;
// patch-wise stepping equals whole-latent stepping.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "scheduler_util.h"
#include "schedulers/dpm_solver.h"
#include "test_util.h"

namespace xdit::schedulers {
namespace {

const std::string kFile = std::string(XDIT_TEST_DATA) + "/goldens/dpm_solver.safetensors";

TEST(DPMSolver, MatchesDiffusersOnEveryCase) {
  io::SafeTensorsFile f(kFile);
  const int cases = std::stoi(f.metadata().at("cases"));
  ASSERT_GE(cases, 10);
  for (int k = 0; k < cases; ++k) {
    const std::string c = "case" + std::to_string(k);
    SCOPED_TRACE(c + " " + f.metadata().at(c));
    auto cfg = DPMSolverConfig::from_json(io::parse_json_text(f.metadata().at(c), c), c);
    DPMSolverMultistep s(cfg);
    auto ts = f.get(c + ".timesteps").to_vector();
    auto sig = f.get(c + ".sigmas").to_vector();
    s.set_timesteps(static_cast<int64_t>(ts.size()));
    ASSERT_EQ(s.timesteps().size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i)
      EXPECT_EQ(s.timesteps()[i], static_cast<int64_t>(ts[i])) << i;
    ASSERT_EQ(s.sigmas().size(), sig.size());
    for (size_t i = 0; i < sig.size(); ++i)
      EXPECT_NEAR(s.sigmas()[i], sig[i], 1e-6 * (1 + sig[i])) << i;

    const auto errors = test::trajectory_errors(s, f, c);
    ASSERT_EQ(errors.size(), ts.size());
    for (size_t i = 0; i < errors.size(); ++i) EXPECT_LT(errors[i], 2e-5) << "step " << i;
  }
}

TEST(DPMSolver, PatchwiseStepsEqualWholeSteps) {
  DPMSolverConfig cfg;  // PixArt's: dpmsolver++, order 2, midpoint
  DPMSolverMultistep whole(cfg), patched(cfg);
  whole.set_timesteps(6);
  patched.set_timesteps(6);
  test::expect_patchwise_equals_whole(whole, patched, {2, 4, 9, 5}, {{0, 4}, {4, 5}, {5, 9}});
}

TEST(DPMSolver, PatchwiseStepsAcrossFramesEqualWholeSteps) {
  // Latents [B, C, F, H, W]: patches of the frame-major rows F·H = 21 cross
  // the frames' boundaries (7, 14).
  DPMSolverConfig cfg;
  DPMSolverMultistep whole(cfg), patched(cfg);
  whole.set_timesteps(5);
  patched.set_timesteps(5);
  test::expect_patchwise_equals_whole(whole, patched, {2, 4, 3, 7, 5},
                                      {{0, 9}, {9, 10}, {10, 15}, {15, 21}});
}

TEST(DPMSolver, RejectsUnsupportedOptions) {
  auto bad = [](const std::string& json) {
    try {
      DPMSolverConfig::from_json(io::parse_json_text(json, "cfg"), "cfg");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(bad(R"({"use_karras_sigmas": true})").find("use_karras_sigmas"), std::string::npos);
  EXPECT_NE(bad(R"({"solver_order": 3})").find("solver_order 3"), std::string::npos);
  EXPECT_NE(bad(R"({"_class_name": "EulerDiscreteScheduler"})").find("EulerDiscreteScheduler"),
            std::string::npos);
  EXPECT_NE(bad(R"({"beta_start": "x"})").find("beta_start"), std::string::npos);
  EXPECT_EQ(bad(R"({"lambda_min_clipped": -Infinity, "variance_type": null})"), "(accepted)");
}

}  // namespace
}  // namespace xdit::schedulers
