#include "pipeline/pixart_pipeline.h"

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"

namespace xdit::pipeline {

PixArtPipeline::PixArtPipeline(const std::string& folder, DType dtype)
    : folder_(folder), dtype_(dtype) {
  const std::string tdir = folder_.component("transformer");
  cfg_ = models::PixArtConfig::from_json(folder_.component_config("transformer", "config.json"),
                                         tdir + "/config.json");
  const std::string sdir = folder_.component("scheduler");
  sched_cfg_ = schedulers::DPMSolverConfig::from_json(
      folder_.component_config("scheduler", "scheduler_config.json"),
      sdir + "/scheduler_config.json");
  weights_ = std::make_unique<io::WeightStore>(tdir);  // maps files, checks headers
}

PixArtPipeline::~PixArtPipeline() = default;

namespace {
void check_embeds(const Tensor& e, const Tensor& mask, const char* name, int64_t channels) {
  XDIT_CHECK(e.ndim() == 3, name, " must be [batch, tokens, ", channels, "], got ",
             shape_str(e.shape()));
  XDIT_CHECK(e.dim(2) == channels, name, " has hidden size ", e.dim(2),
             " but this model's caption_channels is ", channels,
             " (embeddings from a different text encoder?)");
  if (mask.defined())
    XDIT_CHECK(mask.ndim() == 2 && mask.dim(0) == e.dim(0) && mask.dim(1) == e.dim(1), name,
               " attention mask must be [", e.dim(0), ", ", e.dim(1), "], got ",
               shape_str(mask.shape()));
}
}  // namespace

void PixArtPipeline::validate(LatentRequest& r) const {
  const int64_t unit = kVaeScaleFactor * cfg_.patch_size;
  if (r.height == 0) r.height = cfg_.sample_size * kVaeScaleFactor;
  if (r.width == 0) r.width = cfg_.sample_size * kVaeScaleFactor;
  XDIT_CHECK(r.height > 0 && r.width > 0, "height and width must be positive");
  XDIT_CHECK(r.height % unit == 0 && r.width % unit == 0, "height ", r.height, " and width ",
             r.width, " must be multiples of ", unit, " (VAE factor 8 x patch size ",
             cfg_.patch_size, ")");
  XDIT_CHECK(r.num_inference_steps >= 0, "num_inference_steps must be >= 0");
  XDIT_CHECK(r.prompt_embeds.defined(), "prompt_embeds are required");
  check_embeds(r.prompt_embeds, r.prompt_mask, "prompt_embeds", cfg_.caption_channels);
  const int64_t P = r.prompt_embeds.dim(0);
  if (r.guidance_scale > 1.0) {
    XDIT_CHECK(
        r.negative_embeds.defined(), "guidance_scale ", r.guidance_scale,
        " > 1 needs negative_prompt_embeds in the embeddings file (or pass --guidance_scale 1)");
    check_embeds(r.negative_embeds, r.negative_mask, "negative_prompt_embeds",
                 cfg_.caption_channels);
    XDIT_CHECK(r.negative_embeds.dim(0) == P && r.negative_embeds.dim(1) == r.prompt_embeds.dim(1),
               "negative_prompt_embeds ", shape_str(r.negative_embeds.shape()),
               " must match prompt_embeds ", shape_str(r.prompt_embeds.shape()));
  }
  if (r.latents.defined()) {
    const Shape want{P, cfg_.in_channels, r.height / kVaeScaleFactor, r.width / kVaeScaleFactor};
    XDIT_CHECK(r.latents.shape() == want, "latents have shape ", shape_str(r.latents.shape()),
               " but ", r.height, "x", r.width, " px with ", P, " prompt(s) needs ",
               shape_str(want));
  }
}

void PixArtPipeline::load() {
  if (!transformer_)
    transformer_ = std::make_unique<models::PixArtTransformer>(cfg_, *weights_, dtype_);
}

namespace {
// Stacks [a; b] along the batch dimension (f32).
Tensor cat_batch(const Tensor& a, const Tensor& b) {
  Shape s = a.shape();
  s[0] += b.dim(0);
  Tensor out = Tensor::empty(s);
  Tensor af = a.to(DType::kF32), bf = b.to(DType::kF32);
  std::memcpy(out.data<float>(), af.data<float>(), af.nbytes());
  std::memcpy(out.data<float>() + af.numel(), bf.data<float>(), bf.nbytes());
  return out;
}
Tensor ones_mask(const Tensor& e) {
  Tensor m = Tensor::empty({e.dim(0), e.dim(1)});
  std::fill(m.data<float>(), m.data<float>() + m.numel(), 1.0f);
  return m;
}
}  // namespace

Tensor PixArtPipeline::generate_latents(const LatentRequest& req,
                                        const std::function<void(const StepEvent&)>& on_step) {
  LatentRequest r = req;
  validate(r);
  load();
  const int64_t P = r.prompt_embeds.dim(0);
  const int64_t h = r.height / kVaeScaleFactor, w = r.width / kVaeScaleFactor, C = cfg_.in_channels;
  Tensor latents =
      r.latents.defined() ? r.latents.to(DType::kF32) : TorchGenerator(r.seed).randn({P, C, h, w});
  schedulers::DPMSolverMultistep sched(sched_cfg_);
  if (r.num_inference_steps == 0) return latents;
  sched.set_timesteps(r.num_inference_steps);
  // latents * init_noise_sigma (1 for DPM-Solver).

  const bool cfg = r.guidance_scale > 1.0;
  const Tensor pmask = r.prompt_mask.defined() ? r.prompt_mask : ones_mask(r.prompt_embeds);
  Tensor text =
      cfg ? cat_batch(r.negative_embeds, r.prompt_embeds) : r.prompt_embeds.to(DType::kF32);
  Tensor mask =
      cfg ? cat_batch(r.negative_mask.defined() ? r.negative_mask : ones_mask(r.negative_embeds),
                      pmask)
          : pmask.to(DType::kF32);
  const int64_t MB = cfg ? 2 * P : P;
  Tensor resolution = Tensor::empty({MB, 2}), aspect = Tensor::empty({MB, 1});
  for (int64_t b = 0; b < MB; ++b) {
    resolution.data<float>()[2 * b] = static_cast<float>(r.height);
    resolution.data<float>()[2 * b + 1] = static_cast<float>(r.width);
    aspect.data<float>()[b] =
        static_cast<float>(static_cast<double>(r.height) / static_cast<double>(r.width));
  }

  Tensor model_in = Tensor::empty({MB, C, h, w});
  Tensor noise = Tensor::empty({P, C, h, w});
  const int64_t plane = C * h * w;
  const auto& ts = sched.timesteps();
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < MB; ++k)
      std::memcpy(model_in.data<float>() + k * plane, latents.data<float>() + (k % P) * plane,
                  plane * 4);
    models::PixArtInputs in;
    in.latents = &model_in;
    in.timesteps.assign(static_cast<size_t>(MB), static_cast<float>(ts[i]));
    in.text = &text;
    in.text_mask = &mask;
    in.resolution = &resolution;
    in.aspect_ratio = &aspect;
    Tensor out = transformer_->forward(in);  // [MB, out_channels, h, w]
    // CFG: uncond + g·(cond − uncond); learned sigma: keep the first C channels.
    const int64_t oc = cfg_.out_channels;
    const float g = static_cast<float>(r.guidance_scale);
    for (int64_t b = 0; b < P; ++b)
      for (int64_t j = 0; j < plane; ++j) {
        const float* ob = out.data<float>();
        const float cond = ob[(cfg ? P + b : b) * oc * h * w + j];
        noise.data<float>()[b * plane + j] =
            cfg ? ob[b * oc * h * w + j] + g * (cond - ob[b * oc * h * w + j]) : cond;
      }
    sched.step(noise, latents);
    if (on_step) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      on_step({static_cast<int64_t>(i) + 1, static_cast<int64_t>(ts.size()), s});
    }
  }
  return latents;
}

}  // namespace xdit::pipeline
