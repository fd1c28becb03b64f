// FlowMatchEulerDiscreteScheduler against diffusers
// (tools/goldens/make_flow_match.py): FLUX.1-schnell-like (shift 1, custom
// sigmas), dev-like (dynamic shift from mu), SD3-like (shift applied twice),
// linear time shift, shift_terminal, invert_sigmas and custom sigmas, at
// several sizes and step counts; timesteps, sigmas and whole trajectories
// each ≤ 1e-6 relative. Patch-wise stepping equals whole-latent stepping, and
// the scheduler is reached through the interface the loops use.
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

const std::string kFile = std::string(XDIT_TEST_DATA) + "/goldens/flow_match.safetensors";

bool near(float got, float want, double rel) {
  return std::fabs(static_cast<double>(got) - want) <=
         rel * std::fabs(static_cast<double>(want)) + 1e-12;
}

TEST(FlowMatch, MatchesDiffusersOnEveryCase) {
  io::SafeTensorsFile f(kFile);
  const auto& meta = f.metadata();
  const int cases = std::stoi(meta.at("cases"));
  ASSERT_GE(cases, 10);
  for (int k = 0; k < cases; ++k) {
    const std::string c = "case" + std::to_string(k);
    SCOPED_TRACE(c + " " + meta.at(c));
    const auto cfg = SchedulerConfig::from_json(io::parse_json_text(meta.at(c), c), c);
    ASSERT_NE(cfg.flow_match(), nullptr);
    EXPECT_EQ(cfg.class_name(), "FlowMatchEulerDiscreteScheduler");
    const auto s = cfg.make();
    TimestepHints hints;
    const double mu = std::stod(meta.at(c + ".mu"));
    // The pipeline's calculate_shift, from the config's base/max values.
    EXPECT_NEAR(cfg.flow_match()->mu(std::stoll(meta.at(c + ".image_seq_len"))), mu,
                1e-15 * std::fabs(mu));
    if (meta.at(c + ".uses_mu") == "true")
      hints.mu = cfg.flow_match()->mu(std::stoll(meta.at(c + ".image_seq_len")));
    if (meta.count(c + ".sigmas_in"))
      for (const auto& v : io::parse_json_text(meta.at(c + ".sigmas_in"), c))
        hints.sigmas.push_back(v.get<double>());
    const auto ts = f.get(c + ".timesteps").to_vector();
    const auto sig = f.get(c + ".sigmas").to_vector();
    s->set_timesteps(std::stoll(meta.at(c + ".steps")), hints);
    ASSERT_EQ(s->timesteps().size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i)
      EXPECT_PRED3(near, s->timesteps()[i], ts[i], 1e-6) << "timestep " << i;
    ASSERT_EQ(s->sigmas().size(), sig.size());
    for (size_t i = 0; i < sig.size(); ++i)
      EXPECT_PRED3(near, s->sigmas()[i], sig[i], 1e-6) << "sigma " << i;
    EXPECT_EQ(s->init_noise_sigma(), 1.0f);

    const auto errors = test::trajectory_errors(*s, f, c);
    ASSERT_EQ(errors.size(), ts.size());
    for (size_t k = 0; k < errors.size(); ++k) EXPECT_LE(errors[k], 1e-6) << "step " << k;
    EXPECT_EQ(s->step_index(), static_cast<int64_t>(ts.size()));
  }
}

TEST(FlowMatch, PatchwiseStepsEqualWholeSteps) {
  FlowMatchConfig cfg;
  cfg.shift = 3.0;
  cfg.use_dynamic_shifting = true;
  FlowMatchEuler whole(cfg), patched(cfg);
  TimestepHints hints;
  hints.mu = cfg.mu(1530);
  whole.set_timesteps(5, hints);
  patched.set_timesteps(5, hints);
  const Shape shape{2, 16, 9, 5};
  test::expect_patchwise_equals_whole(whole, patched, shape, {{0, 4}, {4, 5}, {5, 9}});
  Tensor b = Tensor::zeros(shape);
  EXPECT_THROW(patched.step(Tensor::zeros(shape), b), Error) << "stepping past the last timestep";
}

TEST(FlowMatch, PatchwiseStepsAcrossFramesEqualWholeSteps) {
  FlowMatchConfig cfg;  // latents [B, C, F, H, W], patches crossing the frames
  cfg.shift = 3.0;
  FlowMatchEuler whole(cfg), patched(cfg);
  whole.set_timesteps(4, {});
  patched.set_timesteps(4, {});
  test::expect_patchwise_equals_whole(whole, patched, {1, 16, 3, 5, 7},
                                      {{0, 4}, {4, 11}, {11, 15}});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(FlowMatch, RejectsUnsupportedOptionsAndMissingHints) {
  const auto parse = [](const std::string& json) {
    return error_of([&] { SchedulerConfig::from_json(io::parse_json_text(json, "cfg"), "cfg"); });
  };
  const std::string fm = R"("_class_name": "FlowMatchEulerDiscreteScheduler")";
  for (const char* flag :
       {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "stochastic_sampling"})
    EXPECT_NE(parse("{" + fm + ", \"" + flag + "\": true}").find(flag), std::string::npos) << flag;
  EXPECT_NE(parse("{" + fm + R"(, "time_shift_type": "cubic"})").find("time_shift_type"),
            std::string::npos);
  EXPECT_NE(parse("{" + fm + R"(, "shift": "x"})").find("shift"), std::string::npos);
  EXPECT_NE(parse(R"({"_class_name": "EulerAncestralDiscreteScheduler"})")
                .find("EulerAncestralDiscreteScheduler is not supported"),
            std::string::npos);
  // FLUX.1-dev's shipped config parses.
  EXPECT_EQ(parse("{" + fm + R"(, "base_image_seq_len": 256, "base_shift": 0.5,
      "max_image_seq_len": 4096, "max_shift": 1.15, "num_train_timesteps": 1000,
      "shift": 3.0, "use_dynamic_shifting": true, "_diffusers_version": "0.30.0.dev0"})"),
            "(accepted)");

  FlowMatchConfig dyn;
  dyn.use_dynamic_shifting = true;
  FlowMatchEuler s(dyn);
  EXPECT_NE(error_of([&] { s.set_timesteps(4, {}); }).find("no mu"), std::string::npos);
  TimestepHints three;
  three.mu = 1.0;
  three.sigmas = {1.0, 0.5, 0.25};
  EXPECT_NE(error_of([&] { s.set_timesteps(4, three); }).find("3 sigmas for 4 steps"),
            std::string::npos);
  DPMSolverMultistep dpm(DPMSolverConfig{});
  EXPECT_NE(error_of([&] { dpm.set_timesteps(4, three); }).find("no mu or custom sigmas"),
            std::string::npos);
}

}  // namespace
}  // namespace xdit::schedulers
