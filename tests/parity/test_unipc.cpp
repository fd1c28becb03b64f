// UniPCMultistepScheduler with flow sigmas (Wan2.1 / Wan2.2) against
// diffusers (tools/goldens/make_unipc.py): Wan's config at flow_shift 3, 5
// and 12, 1 to 10 steps, bh1 and bh2, orders 1 and 2, lower_order_final off,
// disable_corrector, sigma_min, custom sigmas, 4-D and 5-D latents;
// timesteps exactly, sigmas and whole trajectories ≤ 1e-5 relative.
// Patch-wise stepping equals whole-latent stepping, and what diffusers turns
// into NaN / inf is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "scheduler_util.h"
#include "schedulers/scheduler_config.h"
#include "test_util.h"

namespace xdit::schedulers {
namespace {

const std::string kFile = std::string(XDIT_TEST_DATA) + "/goldens/unipc.safetensors";

// Wan2.1-T2V-1.3B-Diffusers' scheduler/scheduler_config.json.
const char* kWanConfig = R"({"_class_name": "UniPCMultistepScheduler",
  "_diffusers_version": "0.33.0.dev0", "beta_end": 0.02, "beta_schedule": "linear",
  "beta_start": 0.0001, "disable_corrector": [], "dynamic_thresholding_ratio": 0.995,
  "final_sigmas_type": "zero", "flow_shift": 3.0, "lower_order_final": true,
  "num_train_timesteps": 1000, "predict_x0": true, "prediction_type": "flow_prediction",
  "rescale_betas_zero_snr": false, "sample_max_value": 1.0, "solver_order": 2,
  "solver_p": null, "solver_type": "bh2", "steps_offset": 0, "thresholding": false,
  "timestep_spacing": "linspace", "trained_betas": null, "use_beta_sigmas": false,
  "use_exponential_sigmas": false, "use_flow_sigmas": true, "use_karras_sigmas": false})";

TEST(UniPC, MatchesDiffusersOnEveryCase) {
  io::SafeTensorsFile f(kFile);
  const auto& meta = f.metadata();
  const int cases = std::stoi(meta.at("cases"));
  ASSERT_GE(cases, 12);
  for (int k = 0; k < cases; ++k) {
    const std::string c = "case" + std::to_string(k);
    SCOPED_TRACE(c + " " + meta.at(c));
    const auto cfg = SchedulerConfig::from_json(io::parse_json_text(meta.at(c), c), c);
    ASSERT_NE(cfg.unipc(), nullptr);
    EXPECT_EQ(cfg.class_name(), "UniPCMultistepScheduler");
    const auto s = cfg.make();
    TimestepHints hints;
    if (meta.count(c + ".sigmas_in"))
      for (const auto& v : io::parse_json_text(meta.at(c + ".sigmas_in"), c))
        hints.sigmas.push_back(v.get<double>());
    const auto ts = f.get(c + ".timesteps").to_vector();
    const auto sig = f.get(c + ".sigmas").to_vector();
    s->set_timesteps(std::stoll(meta.at(c + ".steps")), hints);
    ASSERT_EQ(s->timesteps().size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(s->timesteps()[i], ts[i]) << "timestep " << i;
    ASSERT_EQ(s->sigmas().size(), sig.size());
    for (size_t i = 0; i < sig.size(); ++i)
      EXPECT_NEAR(s->sigmas()[i], sig[i], 1e-7 + 1e-6 * std::fabs(sig[i])) << "sigma " << i;
    const auto errors = test::trajectory_errors(*s, f, c);
    ASSERT_EQ(errors.size(), ts.size());
    for (size_t i = 0; i < errors.size(); ++i) EXPECT_LE(errors[i], 1e-5) << "step " << i;
    EXPECT_EQ(s->step_index(), static_cast<int64_t>(ts.size()));
  }
}

// The same trajectory stepped patch by patch over the frame-major rows of a
// [B, C, F, H, W] latent, with patches crossing frames, for bh1 and bh2.
TEST(UniPC, PatchwiseStepsAcrossFramesEqualWholeSteps) {
  for (const char* solver : {"bh2", "bh1"}) {
    UniPCConfig cfg;
    cfg.flow_shift = 5.0;
    cfg.solver_type = solver;
    cfg.final_sigmas_type = "sigma_min";
    cfg.disable_corrector = {2};
    UniPCMultistep whole(cfg), patched(cfg);
    whole.set_timesteps(6, {});
    patched.set_timesteps(6, {});
    test::expect_patchwise_equals_whole(whole, patched, {1, 16, 3, 5, 7},
                                        {{0, 4}, {4, 11}, {11, 15}});
    Tensor b = Tensor::zeros({1, 16, 3, 5, 7});
    EXPECT_THROW(patched.step(Tensor::zeros(b.shape()), b), Error) << "past the last timestep";
  }
}

TEST(UniPC, WanConfigParsesAndSetTimestepsRestarts) {
  const auto cfg = SchedulerConfig::from_json(io::parse_json_text(kWanConfig, "wan"), "wan");
  ASSERT_NE(cfg.unipc(), nullptr);
  EXPECT_EQ(cfg.unipc()->flow_shift, 3.0);
  EXPECT_EQ(cfg.num_train_timesteps(), 1000);
  // A second set_timesteps forgets the history: the same run twice.
  const auto s = cfg.make();
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    s->set_timesteps(4, {});
    Tensor x = Tensor::from_vector(test::randn(60, 3), {1, 4, 3, 5});
    for (int i = 0; i < 4; ++i) s->step(Tensor::from_vector(test::randn(60, 10 + i), x.shape()), x);
    if (run == 0) first = x.to_vector();
    EXPECT_EQ(x.to_vector(), first);
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(UniPC, RejectsUnsupportedAndDegenerateConfigs) {
  const auto parse = [](const std::string& extra) {
    return error_of([&] {
      SchedulerConfig::from_json(io::parse_json_text(R"({"_class_name": "UniPCMultistepScheduler",
              "use_flow_sigmas": true, "prediction_type": "flow_prediction")" +
                                                         extra + "}",
                                                     "cfg"),
                                 "cfg");
    });
  };
  EXPECT_EQ(parse(""), "(accepted)");
  for (const char* flag : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                           "use_dynamic_shifting", "thresholding"})
    EXPECT_NE(parse(std::string(", \"") + flag + "\": true").find(flag), std::string::npos) << flag;
  EXPECT_NE(parse(R"(, "use_flow_sigmas": false)").find("use_flow_sigmas"), std::string::npos);
  EXPECT_NE(parse(R"(, "solver_order": 3)").find("solver_order 3"), std::string::npos);
  EXPECT_NE(parse(R"(, "predict_x0": false)").find("predict_x0"), std::string::npos);
  EXPECT_NE(parse(R"(, "solver_type": "bh3")").find("bh3"), std::string::npos);
  EXPECT_NE(parse(R"(, "flow_shift": 0)").find("flow_shift"), std::string::npos);
  EXPECT_NE(parse(R"(, "shift_terminal": 0.1)").find("shift_terminal"), std::string::npos);
  EXPECT_NE(parse(R"(, "solver_type": "bh1")").find("NaN"), std::string::npos);
  EXPECT_NE(parse(R"(, "lower_order_final": false)").find("inf"), std::string::npos);
  EXPECT_EQ(parse(R"(, "solver_type": "bh1", "final_sigmas_type": "sigma_min")"), "(accepted)");
  EXPECT_EQ(parse(R"(, "solver_type": "midpoint", "disable_corrector": [0, 4])"), "(accepted)");

  UniPCMultistep s(UniPCConfig{});
  TimestepHints mu;
  mu.mu = 1.0;
  EXPECT_NE(error_of([&] { s.set_timesteps(4, mu); }).find("no mu"), std::string::npos);
  EXPECT_NE(error_of([&] { s.set_timesteps(0, {}); }).find("at least 1"), std::string::npos);
  TimestepHints bad;
  bad.sigmas = {0.9, 1.5};
  EXPECT_NE(error_of([&] { s.set_timesteps(2, bad); }).find("outside (0, 1)"), std::string::npos);
}

}  // namespace
}  // namespace xdit::schedulers
