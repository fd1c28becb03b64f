// FluxTransformer2DModel against diffusers (tools/goldens/make_flux.py): tiny
// schnell-like (no guidance embedding) and dev-like (guidance) models stored
// in bf16 as FLUX.1 ships, one forward on the pipeline's inputs (latents
// unpacked, t / 1000, guidance, T5-width text, pooled CLIP), in f32 ≤ 1e-4
// and bf16 ≤ 3e-2; config checks; and FluxPipeline's denoising loop rebuilt
// from the components (the initial noise from the seed, Flow-Match with the
// pipeline's sigmas and mu, guidance, true CFG, the 16-channel VAE) against
// whole diffusers runs; and the whole FluxPipeline from the prompt (Pipeline).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/rng.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "kernels/kernels.h"
#include "models/flux.h"
#include "models/vae.h"
#include "parity/pipeline_goldens.h"
#include "pipeline/pipeline.h"
#include "schedulers/scheduler_config.h"
#include "test_util.h"

namespace xdit::models {
namespace {

double forward_error(const std::string& name, DType dt) {
  const std::string dir = std::string(XDIT_MODELS) + "/flux-" + name + "-tiny/transformer";
  const auto cfg = FluxConfig::from_json(io::read_json_file(dir + "/config.json"), dir);
  EXPECT_EQ(cfg.guidance_embeds, name == "dev");
  io::WeightStore w(dir);
  w.check_shapes(cfg.weight_specs());
  FluxTransformer model(cfg, w, dt);
  auto g = io::read_safetensors_f32(std::string(XDIT_TEST_DATA) + "/goldens/flux_" + name +
                                    "_forward.safetensors");
  DiTInputs in;
  Conditioning cond;
  const Tensor latents = test::one_frame(g["latents"]);
  in.latents = &latents;
  cond.set(kText, g["text"]);
  cond.set(kPooled, g["pooled"]);
  in.timesteps = g["timestep"].to_vector();
  if (cfg.guidance_embeds) cond.set(kGuidance, g["guidance"]);
  in.cond = &cond;
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

// FluxPipeline.__call__ after encode_prompt, written out from the components:
// noise from the seed, sigmas linspace(1, 1/N, N) with mu from the packed
// image's token count, t / 1000 and the guidance scale into the model, true
// CFG as neg + scale·(pos − neg), the Flow-Match step, then the VAE.
void expect_loop_matches(const std::string& name) {
  const std::string root = std::string(XDIT_MODELS) + "/flux-" + name + "-tiny";
  const auto cfg =
      FluxConfig::from_json(io::read_json_file(root + "/transformer/config.json"), root);
  io::WeightStore tw(root + "/transformer");
  FluxTransformer model(cfg, tw, DType::kF32);
  const auto sched_cfg = schedulers::SchedulerConfig::from_json(
      io::read_json_file(root + "/scheduler/scheduler_config.json"), root);
  ASSERT_NE(sched_cfg.flow_match(), nullptr);
  const auto vae_cfg = VaeConfig::from_json(io::read_json_file(root + "/vae/config.json"), root);
  io::WeightStore vw(root + "/vae");
  VaeDecoder vae(vae_cfg, vw, DType::kF32);
  test::for_each_pipeline_case("flux_" + name, [&](const std::string& c, const io::Json& m,
                                                   std::map<std::string, Tensor>& g) {
    const int64_t steps = m["steps"].get<int64_t>();
    const Tensor& want_init = g[c + ".initial_latents"];
    TorchGenerator gen(m["seed"].get<uint64_t>());
    Tensor latents = gen.randn(want_init.shape());
    ASSERT_EQ(test::rel_max_err(latents.to_vector(), want_init.to_vector()), 0.0)
        << "the initial noise is torch.randn's for the seed";
    const auto sched = sched_cfg.make();
    schedulers::TimestepHints hints;
    for (int64_t i = 0; i < steps; ++i)  // np.linspace(1.0, 1 / N, N)
      hints.sigmas.push_back(steps > 1 ? 1.0 + i * ((1.0 / steps - 1.0) / (steps - 1)) : 1.0);
    if (steps > 1) hints.sigmas.back() = 1.0 / steps;
    hints.mu = sched_cfg.flow_match()->mu((latents.dim(2) / 2) * (latents.dim(3) / 2));
    sched->set_timesteps(steps, hints);
    const bool true_cfg = m["true_cfg_scale"].get<double>() > 1.0;
    const auto scale = static_cast<float>(m["true_cfg_scale"].get<double>());
    DiTInputs in;
    Conditioning cond;
    const Tensor frame = test::one_frame(latents);  // a view: the steps update it too
    in.latents = &frame;
    in.cond = &cond;
    for (const float t : sched->timesteps()) {
      in.timesteps = {t / 1000.0f};
      if (cfg.guidance_embeds)
        cond.set(kGuidance,
                 Tensor::from_vector({static_cast<float>(m["guidance_scale"].get<double>())}, {1}));
      cond.set(kText, g[c + ".prompt_embeds"]);
      cond.set(kPooled, g[c + ".pooled_prompt_embeds"]);
      Tensor noise = model.forward(in);
      if (true_cfg) {
        cond.set(kText, g[c + ".negative_prompt_embeds"]);
        cond.set(kPooled, g[c + ".negative_pooled_prompt_embeds"]);
        const Tensor neg = model.forward(in);
        float* v = noise.data<float>();
        const float* n = neg.data<float>();
        for (int64_t i = 0; i < noise.numel(); ++i) {
          const float diff = v[i] - n[i], scaled = scale * diff;
          v[i] = n[i] + scaled;
        }
      }
      sched->step(noise, latents);
    }
    EXPECT_LE(test::rel_max_err(latents.to_vector(), g[c + ".latents"].to_vector()), 1e-4);
    const Tensor image = vae.decode_latents(latents);
    EXPECT_LE(test::rel_max_err(image.to_vector(), g[c + ".image"].to_vector()), 1e-4);
  });
}

TEST(FluxLoop, SchnellComponentsReproduceFluxPipeline) {
  expect_loop_matches("schnell");
}

TEST(FluxLoop, DevComponentsWithGuidanceAndTrueCfgReproduceFluxPipeline) {
  expect_loop_matches("dev");
}

// FluxPipeline from the prompt: CLIP pooled + unmasked T5 embeddings equal
// diffusers' encode_prompt, and the PNG bytes are within 1/255 of diffusers'
// postprocessed image (the loop and VAE through Pipeline::generate).
void expect_prompt_to_image(const std::string& name) {
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/flux-" + name + "-tiny", DType::kF32);
  pipe.set_keep_text_encoder(true);
  test::for_each_pipeline_case("flux_" + name, [&](const std::string& c, const io::Json& m,
                                                   std::map<std::string, Tensor>& g) {
    pipeline::ImageRequest r = test::image_request(m);
    r.true_cfg_scale = m["true_cfg_scale"].get<double>();
    const pipeline::Plan plan = pipe.plan(r);
    const pipeline::PromptEmbeddings e = pipe.encode_prompts(plan);
    EXPECT_LE(test::rel_max_err(e.cond.at(models::kText).to_vector(),
                                g[c + ".prompt_embeds"].to_vector()),
              1e-4);
    EXPECT_LE(test::rel_max_err(e.cond.at(models::kPooled).to_vector(),
                                g[c + ".pooled_prompt_embeds"].to_vector()),
              1e-4);
    EXPECT_EQ(e.uncond.has(models::kText), r.negative_prompt.has_value());
    const pipeline::ImageResult out = pipe.generate(plan);
    const Tensor& want = g[c + ".image"];  // [1, 3, H, W] in [-1, 1]
    ASSERT_EQ(out.rgb.size(), 1u);
    ASSERT_EQ(out.height, want.dim(2));
    ASSERT_EQ(out.width, want.dim(3));
    EXPECT_LE(
        test::worst_pixel_difference(out.rgb[0], want.data<float>(), want.dim(2), want.dim(3)), 1)
        << "largest per-pixel difference (of 255)";
  });
}

TEST(FluxPipeline, SchnellPromptToImageMatchesDiffusers) {
  expect_prompt_to_image("schnell");
}

TEST(FluxPipeline, DevPromptToImageWithGuidanceAndTrueCfgMatchesDiffusers) {
  expect_prompt_to_image("dev");
}

}  // namespace
}  // namespace xdit::models
