// The tiny models on the GPU against the CPU (and diffusers): the PixArt
// and FLUX.1 transformers, and the whole pipelines' images. Each case skips
// where there is no GPU.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

namespace xdit {
namespace {

using namespace test;  // cuda_test_util.h

#ifdef XDIT_HAVE_CUDA
// The tiny PixArt-α/Σ transformers on the GPU against the CPU on the same
// weights and inputs: f32 to rounding, bf16 within the bound the CPU's bf16
// path keeps against diffusers.
TEST(CudaPipeline, PixArtTransformerMatchesTheCpu) {
  NEED_GPU();
  for (const std::string variant : {"alpha", "sigma"}) {
    io::ModelFolder folder(models_dir() + "/pixart-" + variant + "-tiny");
    const auto cfg = models::PixArtConfig::from_json(
        folder.component_config("transformer", "config.json"), variant);
    io::WeightStore weights(folder.component("transformer"));
    const int64_t B = 2, Hl = 12, Wl = 20, L = 9;
    const Tensor lat =
        Tensor::from_vector(random_values(static_cast<size_t>(B * cfg.in_channels * Hl * Wl), 60),
                            {B, cfg.in_channels, 1, Hl, Wl});
    const Tensor text =
        Tensor::from_vector(random_values(static_cast<size_t>(B * L * cfg.caption_channels), 61),
                            {B, L, cfg.caption_channels});
    std::vector<float> mask(static_cast<size_t>(B * L), 1.f);
    mask[static_cast<size_t>(L + 7)] = mask[static_cast<size_t>(L + 8)] = 0.f;
    const Tensor tmask = Tensor::from_vector(mask, {B, L});
    const Tensor res = Tensor::from_vector({96, 160, 96, 160}, {B, 2});
    const Tensor ar = Tensor::from_vector({0.6f, 0.6f}, {B, 1});
    models::DiTInputs in;
    models::Conditioning cond;
    in.latents = &lat;
    in.timesteps = {999.f, 13.f};
    cond.set(models::kText, text);
    cond.set(models::kTextMask, tmask);
    if (cfg.use_additional_conditions) {
      cond.set(models::kResolution, res);
      cond.set(models::kAspectRatio, ar);
    }
    in.cond = &cond;
    for (const DType dt : {DType::kF32, DType::kBF16}) {
      models::PixArtTransformer cpu_model(cfg, weights, dt);
      const auto want = cpu_model.forward(in).to_vector();
      std::unique_ptr<models::PixArtTransformer> gpu_model;
      {
        DeviceScope gpu(parse_device("cuda"));
        gpu_model = std::make_unique<models::PixArtTransformer>(cfg, weights, dt);
      }
      const Tensor got = gpu_model->forward(in);
      EXPECT_TRUE(got.on_host());
      EXPECT_LT(max_rel_diff(got.to_vector(), want), dt == DType::kF32 ? 1e-4f : 3e-2f)
          << variant << (dt == DType::kF32 ? " f32" : " bf16");
    }
  }
}

// The tiny FLUX.1 [schnell] / [dev] transformers on the GPU, on the inputs
// of their diffusers goldens: against the CPU and against diffusers.
TEST(CudaPipeline, FluxTransformerMatchesTheCpuAndDiffusers) {
  NEED_GPU();
  for (const std::string name : {"schnell", "dev"}) {
    const std::string dir = models_dir() + "/flux-" + name + "-tiny/transformer";
    const auto cfg = models::FluxConfig::from_json(io::read_json_file(dir + "/config.json"), dir);
    io::WeightStore w(dir);
    auto g = io::read_safetensors_f32(test_data_dir() + "/goldens/flux_" + name +
                                      "_forward.safetensors");
    models::DiTInputs in;
    models::Conditioning cond;
    const Tensor latents = test::one_frame(g["latents"]);
    in.latents = &latents;
    cond.set(models::kText, g["text"]);
    cond.set(models::kPooled, g["pooled"]);
    in.timesteps = g["timestep"].to_vector();
    if (cfg.guidance_embeds) cond.set(models::kGuidance, g["guidance"]);
    in.cond = &cond;
    for (const DType dt : {DType::kF32, DType::kBF16}) {
      models::FluxTransformer cpu_model(cfg, w, dt);
      const auto want = cpu_model.forward(in).to_vector();
      std::unique_ptr<models::FluxTransformer> gpu_model;
      {
        DeviceScope gpu(parse_device("cuda"));
        gpu_model = std::make_unique<models::FluxTransformer>(cfg, w, dt);
      }
      const auto got = gpu_model->forward(in).to_vector();
      const float tol = dt == DType::kF32 ? 1e-4f : 3e-2f;
      EXPECT_LT(max_rel_diff(got, want), tol) << name << " vs CPU";
      EXPECT_LT(max_rel_diff(got, g["output"].to_vector()), tol) << name << " vs diffusers";
    }
  }
}

// The whole pipelines on the GPU: the tiny PixArt-Σ (CFG, masked text),
// FLUX.1 [schnell] and [dev] (guidance embedding), SD3 and SD3.5 (CLIP-L/G +
// T5, CFG) images equal the CPU's within 1/255 in f32, and within a few
// levels in bf16; the worst difference of each is printed for the record.
TEST(CudaPipeline, ImagesEqualTheCpuImages) {
  NEED_GPU();
  for (const std::string model :
       {"pixart-sigma-tiny", "flux-schnell-tiny", "flux-dev-tiny", "sd3-tiny", "sd35-tiny"}) {
    for (const DType dt : {DType::kF32, DType::kBF16}) {
      pipeline::ImageRequest r;
      r.prompts = {"a red fox in the snow", "two boats"};
      r.height = 96;
      r.width = 160;
      r.num_inference_steps = 3;
      r.seed = 7;
      std::vector<pipeline::ImageResult> out;
      for (const bool gpu : {false, true}) {
        pipeline::Pipeline pipe(models_dir() + "/" + model, dt);
        if (gpu) pipe.set_device(parse_device("cuda"));
        out.push_back(pipe.generate(r));
      }
      ASSERT_EQ(out[0].rgb.size(), out[1].rgb.size());
      int worst = 0;
      for (size_t i = 0; i < out[0].rgb.size(); ++i) {
        ASSERT_EQ(out[0].rgb[i].size(), out[1].rgb[i].size());
        worst = std::max(worst, test::worst_pixel_difference(out[1].rgb[i], out[0].rgb[i]));
      }
      const char* dtype = dt == DType::kF32 ? " f32" : " bf16";
      std::cout << "[ images   ] " << model << dtype << ": GPU vs CPU at most " << worst
                << " levels apart\n";
      EXPECT_LE(worst, dt == DType::kF32 ? 1 : 8) << model << dtype << ": levels apart";
    }
  }
}
#endif  // XDIT_HAVE_CUDA

}  // namespace
}  // namespace xdit
