// FlowMatchEulerDiscreteScheduler against diffusers
// (tools/goldens/make_flow_match.py): FLUX.1-schnell-like (shift 1, custom
// sigmas), dev-like (dynamic shift from mu), SD3-like (shift applied twice),
// linear time shift, shift_terminal, invert_sigmas and custom sigmas, at
// several sizes and step counts; timesteps, sigmas and whole trajectories
// each ≤ 1e-6 relative. Patch-wise stepping equals whole-latent stepping, and
// the scheduler is reached through the interface the loops use.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "io/json.h"
#include "io/safetensors.h"
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

    Tensor x = f.get(c + ".sample0").to(DType::kF32);
    Tensor outs = f.get(c + ".model_outputs").to(DType::kF32);
    Tensor want = f.get(c + ".samples").to(DType::kF32);
    const int64_t n = x.numel();
    for (size_t i = 0; i < ts.size(); ++i) {
      Tensor m = Tensor::from_vector(
          std::vector<float>(outs.data<float>() + i * n, outs.data<float>() + (i + 1) * n),
          x.shape());
      s->step(m, x);
      EXPECT_LE(
          test::rel_max_err(x.data<float>(), want.data<float>() + i * n, static_cast<size_t>(n)),
          1e-6)
          << "step " << i;
    }
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
  const int64_t B = 2, C = 16, H = 9, W = 5;
  const Shape shape{B, C, H, W};
  Tensor a = Tensor::from_vector(test::randn(B * C * H * W, 1), shape);
  Tensor b = a.clone();
  const std::vector<std::pair<int64_t, int64_t>> patches = {{0, 4}, {4, 5}, {5, 9}};
  for (int step = 0; step < 5; ++step) {
    Tensor m = Tensor::from_vector(test::randn(B * C * H * W, 100 + step), shape);
    whole.step(m, a);
    for (auto [r0, r1] : patches) {
      const int64_t rows = r1 - r0;
      std::vector<float> mo(B * C * rows * W), sp(mo.size());
      for (int64_t bc = 0; bc < B * C; ++bc)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t w = 0; w < W; ++w) {
            mo[(bc * rows + r) * W + w] = m.data<float>()[(bc * H + r0 + r) * W + w];
            sp[(bc * rows + r) * W + w] = b.data<float>()[(bc * H + r0 + r) * W + w];
          }
      EXPECT_EQ(patched.step_index(), step) << "the step index advances only after the last patch";
      patched.step(mo.data(), sp.data(), shape, r0, r1);
      for (int64_t bc = 0; bc < B * C; ++bc)
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(b.data<float>() + (bc * H + r0 + r) * W, sp.data() + (bc * rows + r) * W,
                      W * 4);
    }
    EXPECT_EQ(patched.step_index(), step + 1);
    ASSERT_EQ(0, std::memcmp(a.data<float>(), b.data<float>(), a.nbytes())) << "step " << step;
  }
  EXPECT_THROW(patched.step(Tensor::zeros(shape), b), Error) << "stepping past the last timestep";
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
