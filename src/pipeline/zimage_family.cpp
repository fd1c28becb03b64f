// Z-Image (diffusers ZImagePipeline; Z-Image-Turbo): each prompt in Qwen3's
// chat template, padded to max_sequence_length (512), through Qwen3 — the
// states before its last layer (hidden_states[-2], no final norm) of the
// prompt's real tokens — as text [B, L, hidden] with a mask (L the longest
// prompt of the request); classifier-free guidance when guidance_scale > 0,
// as pos + g·(pos − neg) = neg + (1 + g)·(pos − neg), with the negative
// prompt "" when none is given, both halves in one transformer call; the
// model's output negated (inside ZImageTransformer); 1024 × 1024 px (sizes
// must be multiples of the VAE factor × 2 — 16 —, as the pipeline requires:
// the Pipeline's own rule); Flow-Match Euler over
// torch.linspace(1, 1/N, N) in f32, shifted by the scheduler's shift (3 in
// Z-Image-Turbo's folder; mu where its config shifts dynamically);
// AutoencoderKL with its scaling and shift factors. Defaults: Z-Image-Turbo's
// (its model card's) — 9 steps and guidance 0 (off) — rather than the
// pipeline's signature (50, 5.0), which suit no distilled model.
#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "models/qwen_text.h"
#include "models/zimage.h"
#include "models/zimage_checkpoint.h"
#include "pipeline/guidance/zimage_cfg.h"
#include "pipeline/model_family.h"
#include "pipeline/qwen_prompts.h"
#include "pipeline/qwen_text_family.h"
#include "pipeline/text_encoding.h"
#include "tokenizers/qwen_tokenizer.h"

namespace xdit::pipeline {

namespace {

// Per half, its prompts' states [n_i, d] as text [B, L, d] and mask [B, L]
// (zero padding past each prompt's tokens).
std::pair<Tensor, Tensor> stack_padded(const std::vector<Tensor>& states, int64_t L) {
  const auto B = static_cast<int64_t>(states.size());
  const int64_t d = states.front().dim(1);
  Tensor text = Tensor::zeros({B, L, d}), mask = Tensor::zeros({B, L});
  for (int64_t b = 0; b < B; ++b) {
    const Tensor& s = states[static_cast<size_t>(b)];
    std::copy_n(s.data<float>(), s.numel(), text.data<float>() + b * L * d);
    std::fill_n(mask.data<float>() + b * L, s.dim(0), 1.0f);
  }
  return {std::move(text), std::move(mask)};
}

class ZImageFamily : public QwenTextFamily<models::ZImageConfig, models::ZImageTransformer> {
 public:
  using QwenTextFamily::QwenTextFamily;

  std::string name() const override { return "Z-Image"; }
  std::string describe() const override {
    const auto& c = cfg_;
    return detail::concat("ZImageTransformer2DModel, ", c.n_refiner_layers,
                          " noise- and context-refiner blocks + ", c.n_layers,
                          " single-stream blocks, hidden ", c.dim, " (", c.n_heads, " heads x ",
                          c.head_dim(), "), text ", c.cap_feat_dim, ", RoPE axes ", c.axes_dims[0],
                          "/", c.axes_dims[1], "/", c.axes_dims[2]);
  }
  int64_t text_width() const override { return cfg_.cap_feat_dim; }

  int64_t default_height(int64_t /*vsf*/) const override { return 1024; }
  int64_t default_steps() const override { return 9; }
  const Guider& guider() const override { return guider_; }
  std::optional<OriginalLayout> original_layout(const io::WeightSpecs& specs) const override {
    const int64_t dim = spec_shape(specs, "x_pad_token")[1];
    return OriginalLayout{
        "Z-Image", [dim](const std::string& n) { return models::zimage_original_rows(n, dim); }};
  }
  // hidden_states[-2]: the states before the last layer.
  int64_t text_layers_run(int64_t num_layers) const override { return num_layers - 1; }
  schedulers::TimestepHints timestep_hints(const schedulers::SchedulerConfig& s, int64_t steps,
                                           int64_t latent_h, int64_t latent_w) const override {
    schedulers::TimestepHints h;
    // torch.linspace(1.0, 1 / N, N) in f32: start + step·i for the first
    // half, end − step·(N − 1 − i) for the rest, step in f32.
    const float start = 1.0f, end = static_cast<float>(1.0 / static_cast<double>(steps));
    const float step = steps > 1 ? (end - start) / static_cast<float>(steps - 1) : 0.0f;
    for (int64_t i = 0; i < steps; ++i)
      h.sigmas.push_back(i < steps / 2 ? start + step * static_cast<float>(i)
                                       : end - step * static_cast<float>(steps - 1 - i));
    if (s.flow_match() != nullptr) h.mu = s.flow_match()->mu((latent_h / 2) * (latent_w / 2));
    return h;
  }

  void open_text(const io::ModelFolder& folder) override {
    open_qwen_text(folder, cfg_.cap_feat_dim);
  }
  int64_t default_max_sequence_length() const override { return kZImageMaxLength; }
  // The tokenizer's limit, at most 2048 tokens: the encoder's causal mask
  // is a [heads, S, S] table (32 × 2048² floats: 0.5 GB for Qwen3-4B).
  int64_t max_sequence_limit() const override {
    return std::min<int64_t>(tokenizer_->model_max_length(), 2048);
  }

  PromptEmbeddings encode(const PlanFields& r, DType dtype) override {
    models::QwenTextEncoder& encoder = qwen_encoder(dtype);
    // Both halves in one encoder call; each half's text padded to the
    // longest prompt of either, so that the CFG batch stacks.
    std::vector<std::string> texts = r.prompts;
    const auto n = static_cast<int64_t>(texts.size());
    if (r.cfg) texts.resize(2 * texts.size(), r.negative_prompt.value_or(""));
    const std::vector<Tensor> states =
        encode_z_image_prompts(*tokenizer_, encoder, texts, r.max_sequence_length);
    int64_t L = 1;
    for (const Tensor& s : states) L = std::max(L, s.dim(0));
    PromptEmbeddings e;
    auto [text, mask] = stack_padded({states.begin(), states.begin() + n}, L);
    e.cond.set(models::kText, std::move(text));
    e.cond.set(models::kTextMask, std::move(mask));
    if (r.cfg) {
      auto [ut, um] = stack_padded({states.begin() + n, states.end()}, L);
      e.uncond.set(models::kText, std::move(ut));
      e.uncond.set(models::kTextMask, std::move(um));
    }
    return e;
  }

 private:
  ZImageGuider guider_;
};

}  // namespace

std::unique_ptr<ModelFamily> make_zimage_family(const io::ModelFolder& folder) {
  const std::string tdir = folder.component("transformer");
  const auto cfg = models::ZImageConfig::from_json(
      folder.component_config("transformer", "config.json"), tdir + "/config.json");
  return std::make_unique<ZImageFamily>(cfg);
}

}  // namespace xdit::pipeline
