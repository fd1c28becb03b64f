// PixArt-α / PixArt-Σ (diffusers PixArtAlphaPipeline / PixArtSigmaPipeline):
// T5 with its attention mask over lower-cased, stripped prompts (120 tokens
// for α, 300 for Σ), classifier-free guidance from guidance_scale > 1 with
// the negative prompt "" by default, resolution binning, DPM-Solver++.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "models/t5.h"
#include "pipeline/guidance/cfg.h"
#include "pipeline/model_family.h"
#include "pipeline/text_encoding.h"
#include "tokenizers/t5_tokenizer.h"

namespace xdit::pipeline {

namespace {

class PixArtFamily : public ConfigFamily<models::PixArtConfig, models::PixArtTransformer> {
 public:
  PixArtFamily(const models::PixArtConfig& cfg, bool sigma) : ConfigFamily(cfg), sigma_(sigma) {}

  std::string name() const override { return sigma_ ? "PixArt-Σ" : "PixArt-α"; }
  std::vector<std::string> lora_text_components() const override { return {"text_encoder"}; }
  bool runs_on_cuda() const override { return true; }
  std::string describe() const override {
    const auto& c = cfg_;
    return detail::concat("PixArtTransformer2DModel, ", c.num_layers, " blocks, hidden ",
                          c.hidden(), " (", c.num_attention_heads, " heads x ",
                          c.attention_head_dim, "), patch ", c.patch_size, ", sample size ",
                          c.sample_size, ", caption ", c.caption_channels, ", micro-conditions ",
                          c.use_additional_conditions ? "yes" : "no");
  }
  int64_t text_width() const override { return cfg_.caption_channels; }

  int64_t default_height(int64_t vsf) const override { return cfg_.sample_size * vsf; }
  int64_t default_steps() const override { return 20; }
  const Guider& guider() const override { return guider_; }
  bool bins_resolution() const override { return true; }

  void open_text(const io::ModelFolder& folder) override {
    if (!tokenizer_)
      tokenizer_ = std::make_unique<tokenizers::T5Tokenizer>(folder.component("tokenizer"));
    if (!t5_cfg_) open_t5_encoder(folder, "text_encoder", cfg_.caption_channels);
  }
  std::vector<Component> text_components() const override {
    return {{"text_encoder", ComponentKind::kT5Encoder},
            {"tokenizer", ComponentKind::kT5Tokenizer}};
  }
  int64_t default_max_sequence_length() const override { return sigma_ ? 300 : 120; }
  int64_t max_sequence_limit() const override { return tokenizer_->model_max_length(); }

  PromptEmbeddings encode(const PlanFields& r, DType dtype) override {
    const bool cfg = r.cfg;
    XDIT_CHECK(tokenizer_ && t5_cfg_, "encode before the text side was opened");
    auto enc = encode_t5(*tokenizer_, t5_encoder(dtype), prompt_lists(r, cfg),
                         r.max_sequence_length, true, true);
    PromptEmbeddings e;
    e.cond.set(models::kText, std::move(enc[0].first));
    e.cond.set(models::kTextMask, std::move(enc[0].second));
    if (cfg) {
      e.uncond.set(models::kText, std::move(enc[1].first));
      e.uncond.set(models::kTextMask, std::move(enc[1].second));
    }
    return e;
  }
  // PixArt-α's micro-conditions, the size the model runs at (Σ's model
  // does not read them).
  void add_request_conditioning(models::Conditioning& c, int64_t height, int64_t width,
                                double /*guidance_scale*/) const override {
    const int64_t B = c.batch();
    Tensor resolution = Tensor::empty({B, 2}), aspect = Tensor::empty({B, 1});
    for (int64_t b = 0; b < B; ++b) {
      resolution.data<float>()[2 * b] = static_cast<float>(height);
      resolution.data<float>()[2 * b + 1] = static_cast<float>(width);
      aspect.data<float>()[b] =
          static_cast<float>(static_cast<double>(height) / static_cast<double>(width));
    }
    c.set(models::kResolution, std::move(resolution));
    c.set(models::kAspectRatio, std::move(aspect));
  }
  void drop_text_encoders() override { t5_.reset(); }
  void describe_text(MemoryQuery& q) const override { q.t5 = t5_cfg_.get(); }

 private:
  CfgGuider guider_{{.default_guidance = 4.5}};
  bool sigma_;
  std::unique_ptr<tokenizers::T5Tokenizer> tokenizer_;
};

}  // namespace

std::unique_ptr<ModelFamily> ModelFamily::pixart(const models::PixArtConfig& cfg) {
  return std::make_unique<PixArtFamily>(cfg, false);
}

std::unique_ptr<ModelFamily> make_pixart_family(const io::ModelFolder& folder) {
  const std::string tdir = folder.component("transformer");
  const auto cfg = models::PixArtConfig::from_json(
      folder.component_config("transformer", "config.json"), tdir + "/config.json");
  return std::make_unique<PixArtFamily>(cfg, folder.pipeline_class() == "PixArtSigmaPipeline");
}

}  // namespace xdit::pipeline
