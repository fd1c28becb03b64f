// FluxTransformer2DModel against diffusers (tools/goldens/make_flux.py): tiny
// schnell-like (no guidance embedding) and dev-like (guidance) models stored
// in bf16 as FLUX.1 ships, one forward on the pipeline's inputs (latents
// unpacked, t / 1000, guidance, T5-width text, pooled CLIP), in f32 ≤ 1e-4
// and bf16 ≤ 3e-2; config checks.
#include <gtest/gtest.h>

#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "kernels/kernels.h"
#include "models/flux.h"
#include "test_util.h"

namespace xdit::models {
namespace {

double forward_error(const std::string& name, DType dt) {
  const std::string dir = std::string(XDIT_TEST_DATA) + "/flux-tiny/" + name + "/transformer";
  const auto cfg = FluxConfig::from_json(io::read_json_file(dir + "/config.json"), dir);
  EXPECT_EQ(cfg.guidance_embeds, name == "dev");
  io::WeightStore w(dir);
  w.check_shapes(cfg.weight_specs());
  FluxTransformer model(cfg, w, dt);
  auto g = io::read_safetensors_f32(std::string(XDIT_TEST_DATA) + "/goldens/flux_" + name +
                                    "_forward.safetensors");
  FluxInputs in;
  in.latents = &g["latents"];
  in.text = &g["text"];
  in.pooled = &g["pooled"];
  in.timesteps = g["timestep"].to_vector();
  if (cfg.guidance_embeds) in.guidance = g["guidance"].to_vector();
  const Tensor out = model.forward(in);
  EXPECT_EQ(out.shape(), g["output"].shape());
  return test::rel_max_err(out.to_vector(), g["output"].to_vector());
}

TEST(Flux, SchnellForwardMatchesDiffusers) {
  EXPECT_LE(forward_error("schnell", DType::kF32), 1e-4);
}

TEST(Flux, DevForwardWithGuidanceMatchesDiffusers) {
  EXPECT_LE(forward_error("dev", DType::kF32), 1e-4);
}

TEST(Flux, Bf16Forward) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  EXPECT_LE(forward_error("schnell", DType::kBF16), 3e-2);
  EXPECT_LE(forward_error("dev", DType::kBF16), 3e-2);
}

TEST(Flux, ConfigChecks) {
  const auto err = [](const std::string& json) {
    return test::error_message([&] {
      FluxConfig::from_json(io::parse_json_text(json, "cfg"), "transformer/config.json");
    });
  };
  EXPECT_EQ(err("{}"), "(no error)");  // FLUX.1's defaults
  const FluxConfig d = FluxConfig::from_json(io::parse_json_text("{}", "cfg"), "cfg");
  EXPECT_EQ(d.hidden(), 3072);
  EXPECT_EQ(d.axes_dims_rope, (std::vector<int64_t>{16, 56, 56}));
  EXPECT_NEAR(static_cast<double>(d.parameter_count()), 11.9e9, 0.05e9);
  EXPECT_NE(err(R"({"patch_size": 2})").find("patch_size 2"), std::string::npos);
  EXPECT_NE(err(R"({"in_channels": 62})").find("in_channels 62"), std::string::npos);
  EXPECT_NE(err(R"({"axes_dims_rope": [16, 56, 48]})").find("add up to 120"), std::string::npos);
  EXPECT_NE(err(R"({"axes_dims_rope": [15, 57, 56]})").find("even"), std::string::npos);
  EXPECT_NE(err(R"({"out_channels": 32})").find("out_channels 32"), std::string::npos);
  EXPECT_NE(err(R"({"_class_name": "SD3Transformer2DModel"})").find("SD3Transformer2DModel"),
            std::string::npos);
}

}  // namespace
}  // namespace xdit::models
