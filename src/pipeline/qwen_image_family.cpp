// Qwen-Image (diffusers QwenImagePipeline): each prompt in the pipeline's
// system template through Qwen2.5-VL — the last layer's normed states of its
// real tokens less the 34 the template leaves (pipeline/qwen_prompts.h) —
// as text [B, L, 3584] with a mask; true CFG with a negative prompt and
// true_cfg_scale > 1 (4 by default) — diffusers calls the transformer on
// each half apart (cache contexts "cond" and "uncond": a step cache decides
// per half here too); xdit batches them, exactly —, each token's guided noise
// rescaled to its cond prediction's norm over the 2×2 patch's channels;
// 1024 × 1024 px, sizes floored to multiples of 16 with a warning as
// diffusers does; 50 steps of Flow-Match Euler over np.linspace(1, 1/N, N)
// with mu from the packed image's tokens (and the scheduler's
// shift_terminal); AutoencoderKLQwenImage — Wan2.1's causal VAE on one frame.
#include "core/error.h"
#include "core/log.h"
#include "models/qwen_image.h"
#include "models/qwen_text.h"
#include "pipeline/guidance/true_cfg.h"
#include "pipeline/model_family.h"
#include "pipeline/qwen_prompts.h"
#include "pipeline/qwen_text_family.h"
#include "tokenizers/qwen_tokenizer.h"

namespace xdit::pipeline {

namespace {

class QwenImageFamily
    : public QwenTextFamily<models::QwenImageConfig, models::QwenImageTransformer> {
 public:
  using QwenTextFamily::QwenTextFamily;

  std::string name() const override { return "Qwen-Image"; }
  std::string describe() const override {
    const auto& c = cfg_;
    const auto& a = c.axes_dims_rope;
    return detail::concat("QwenImageTransformer2DModel, ", c.num_layers,
                          " double-stream blocks, hidden ", c.hidden(), " (", c.num_attention_heads,
                          " heads x ", c.attention_head_dim, "), text ", c.joint_attention_dim,
                          ", MSRoPE axes ", a[0], "/", a[1], "/", a[2]);
  }
  int64_t text_width() const override { return cfg_.joint_attention_dim; }

  // QwenImagePipeline: default_sample_size 128 latent pixels.
  int64_t default_height(int64_t vsf) const override { return 128 * vsf; }
  int64_t default_steps() const override { return 50; }
  const Guider& guider() const override { return guider_; }
  // The community's Qwen-Image GGUF files keep diffusers' names (diffusers
  // reads them with an identity mapping).
  std::optional<OriginalLayout> original_layout(const io::WeightSpecs&) const override {
    return OriginalLayout{"Qwen-Image", [](const std::string& n) {
                            return std::optional<models::OriginalRows>(models::OriginalRows{n});
                          }};
  }
  bool floors_size() const override { return true; }
  ComponentKind vae_kind() const override { return ComponentKind::kAutoencoderKLWan; }
  schedulers::TimestepHints timestep_hints(const schedulers::SchedulerConfig& s, int64_t steps,
                                           int64_t latent_h, int64_t latent_w) const override {
    return linspace_sigmas_with_mu(s, steps, latent_h, latent_w);
  }

  void open_text(const io::ModelFolder& folder) override {
    open_qwen_text(folder, cfg_.joint_attention_dim);
  }
  int64_t default_max_sequence_length() const override { return 512; }
  int64_t max_sequence_limit() const override { return kQwenImageMaxLength; }

  PromptEmbeddings encode(const PlanFields& r, DType dtype) override {
    models::QwenTextEncoder& encoder = qwen_encoder(dtype);
    // Each half padded to its own longest prompt, as the pipeline encodes
    // them apart (the CFG batch pads both to the longer: ModelFamily::match_masks).
    PromptEmbeddings e;
    MaskedEmbeddings cond =
        encode_qwen_image_prompts(*tokenizer_, encoder, r.prompts, r.max_sequence_length);
    e.cond.set(models::kText, std::move(cond.embeds));
    e.cond.set(models::kTextMask, std::move(cond.mask));
    if (r.cfg) {
      MaskedEmbeddings neg = encode_qwen_image_prompts(
          *tokenizer_, encoder,
          std::vector<std::string>(r.prompts.size(), r.negative_prompt.value_or("")),
          r.max_sequence_length);
      e.uncond.set(models::kText, std::move(neg.embeds));
      e.uncond.set(models::kTextMask, std::move(neg.mask));
    }
    return e;
  }

 private:
  TrueCfgGuider guider_{{
      .default_guidance = 1.0,  // (no guidance embedding)
      .default_true_cfg = 4.0,
      .renorm_patch = 2,
      .unused_prefix = "guidance_scale ",
      .unused_suffix = " has no effect on Qwen-Image (not guidance-distilled); its CFG is "
                       "true_cfg_scale with a negative prompt",
  }};
};

}  // namespace

std::unique_ptr<ModelFamily> make_qwen_image_family(const io::ModelFolder& folder) {
  const std::string tdir = folder.component("transformer");
  const auto cfg = models::QwenImageConfig::from_json(
      folder.component_config("transformer", "config.json"), tdir + "/config.json");
  return std::make_unique<QwenImageFamily>(cfg);
}

}  // namespace xdit::pipeline
