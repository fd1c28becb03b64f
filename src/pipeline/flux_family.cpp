// FLUX.1 [schnell] / [dev] (diffusers FluxPipeline): CLIP-L's pooled output
// plus T5 without a mask (max_sequence_length 512 by default), the embedded
// guidance of [dev], true CFG with a negative prompt and true_cfg_scale > 1,
// Flow-Match Euler with sigmas linspace(1, 1/N, N) and the dynamic shift mu
// of the packed image's token count, sizes floored to multiples of 16.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "models/flux.h"
#include "models/flux_checkpoint.h"
#include "pipeline/guidance/true_cfg.h"
#include "pipeline/model_family.h"
#include "pipeline/text_encoding.h"

namespace xdit::pipeline {

namespace {

class FluxFamily : public ConfigFamily<models::FluxConfig, models::FluxTransformer> {
 public:
  using ConfigFamily::ConfigFamily;

  bool runs_on_cuda() const override { return true; }
  std::optional<OriginalLayout> original_layout(const io::WeightSpecs& specs) const override {
    const Shape& q = spec_shape(specs, "transformer_blocks.0.attn.to_q.weight");
    const Shape& mlp = spec_shape(specs, "single_transformer_blocks.0.proj_mlp.weight");
    return OriginalLayout{"FLUX.1", [inner = q[0], mlp_hidden = mlp[0]](const std::string& n) {
                            return models::flux_original_rows(n, inner, mlp_hidden);
                          }};
  }
  std::vector<std::string> lora_text_components() const override {
    return {"text_encoder", "text_encoder_2"};
  }
  std::string name() const override {
    return cfg_.guidance_embeds ? "FLUX.1 [dev]" : "FLUX.1 [schnell]";
  }
  std::string describe() const override {
    const auto& c = cfg_;
    const auto& a = c.axes_dims_rope;
    return detail::concat("FluxTransformer2DModel, ", c.num_layers, " double-stream + ",
                          c.num_single_layers, " single-stream blocks, hidden ", c.hidden(), " (",
                          c.num_attention_heads, " heads x ", c.attention_head_dim, "), text ",
                          c.joint_attention_dim, ", pooled ", c.pooled_projection_dim,
                          ", guidance embedding ", c.guidance_embeds ? "yes" : "no", ", RoPE axes ",
                          a[0], "/", a[1], "/", a[2]);
  }
  int64_t text_width() const override { return cfg_.joint_attention_dim; }
  int64_t pooled_width() const override { return cfg_.pooled_projection_dim; }

  // FluxPipeline: default_sample_size 128 latent pixels.
  int64_t default_height(int64_t vsf) const override { return 128 * vsf; }
  int64_t default_steps() const override { return cfg_.guidance_embeds ? 28 : 4; }
  const Guider& guider() const override { return guider_; }
  bool embeds_guidance() const override { return cfg_.guidance_embeds; }
  // FLUX.1 [dev]: the guidance scale is an input of the model, one per item.
  void add_request_conditioning(models::Conditioning& c, int64_t /*height*/, int64_t /*width*/,
                                double guidance_scale) const override {
    if (!cfg_.guidance_embeds) return;
    c.set(models::kGuidance,
          Tensor::from_vector(std::vector<float>(static_cast<size_t>(c.batch()),
                                                 static_cast<float>(guidance_scale)),
                              {c.batch()}));
  }
  bool floors_size() const override { return true; }
  schedulers::TimestepHints timestep_hints(const schedulers::SchedulerConfig& s, int64_t steps,
                                           int64_t latent_h, int64_t latent_w) const override {
    return linspace_sigmas_with_mu(s, steps, latent_h, latent_w);
  }

  void open_text(const io::ModelFolder& folder) override {
    if (!clip_tok_)
      clip_tok_ = std::make_unique<tokenizers::ClipTokenizer>(folder.component("tokenizer"));
    if (!t5_tok_)
      t5_tok_ = std::make_unique<tokenizers::T5Tokenizer>(folder.component("tokenizer_2"));
    if (!clip_cfg_) {
      auto clip = read_clip_config(folder, "text_encoder");
      const int64_t pooled = clip->pooled_width();
      XDIT_CHECK(pooled == cfg_.pooled_projection_dim, "text_encoder/ pools to width ", pooled,
                 " but the transformer's pooled_projection_dim is ", cfg_.pooled_projection_dim);
      clip_weights_ = open_clip_weights(folder, "text_encoder", *clip);
      text_weights("text_encoder", *clip_weights_);  // its LoRAs checked now
      clip_cfg_ = std::move(clip);
    }
    if (!t5_cfg_) open_t5_encoder(folder, "text_encoder_2", cfg_.joint_attention_dim);
  }
  std::vector<Component> text_components() const override {
    return {{"text_encoder", ComponentKind::kClipEncoder},
            {"text_encoder_2", ComponentKind::kT5Encoder},
            {"tokenizer", ComponentKind::kClipTokenizer},
            {"tokenizer_2", ComponentKind::kT5Tokenizer}};
  }
  int64_t default_max_sequence_length() const override { return 512; }
  int64_t max_sequence_limit() const override { return t5_sequence_limit(*t5_tok_); }

  PromptEmbeddings encode(const PlanFields& r, DType dtype) override {
    const bool cfg = r.cfg;
    XDIT_CHECK(clip_tok_ && t5_tok_ && clip_cfg_ && t5_cfg_,
               "encode before the text side was opened");
    if (!clip_)
      clip_ = build_text_encoder("text_encoder", *clip_weights_, [&](const io::WeightSource& w) {
        return std::make_unique<models::ClipTextEncoder>(*clip_cfg_, w, dtype);
      });
    PromptEmbeddings e;
    e.cond.set(models::kPooled, encode_clip(*clip_tok_, *clip_, r.prompts, true).pooled);
    const std::vector<T5Texts> lists = prompt_lists(r, cfg);
    if (cfg)
      e.uncond.set(models::kPooled, encode_clip(*clip_tok_, *clip_, lists[1].texts, false).pooled);
    auto enc = encode_t5(*t5_tok_, t5_encoder(dtype), lists, r.max_sequence_length, false, false);
    e.cond.set(models::kText, std::move(enc[0].first));
    if (cfg) e.uncond.set(models::kText, std::move(enc[1].first));
    return e;
  }
  void drop_text_encoders() override {
    clip_.reset();
    t5_.reset();
  }
  void describe_text(MemoryQuery& q) const override {
    q.t5 = t5_cfg_.get();
    q.clip = clip_cfg_.get();
  }

 private:
  // FluxPipeline's true CFG; guidance_scale is [dev]'s embedded guidance
  // (add_request_conditioning) and of no effect on [schnell].
  TrueCfgGuider guider_{{
      .default_guidance = 3.5,
      .unused_prefix =
          cfg_.guidance_embeds ? "" : name() + " has no guidance embedding: guidance_scale ",
      .unused_suffix = " has no effect (true CFG: a negative prompt and true_cfg_scale > 1)",
  }};
  std::unique_ptr<tokenizers::ClipTokenizer> clip_tok_;
  std::unique_ptr<tokenizers::T5Tokenizer> t5_tok_;
  std::unique_ptr<models::ClipTextConfig> clip_cfg_;
  std::unique_ptr<io::WeightStore> clip_weights_;
  std::unique_ptr<models::ClipTextEncoder> clip_;
};

}  // namespace

std::unique_ptr<ModelFamily> make_flux_family(const io::ModelFolder& folder) {
  const std::string tdir = folder.component("transformer");
  const auto cfg = models::FluxConfig::from_json(
      folder.component_config("transformer", "config.json"), tdir + "/config.json");
  // The text side is part of the pipeline's shape: refuse a folder without
  // it before anything loads.
  for (const char* c : {"text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"})
    XDIT_CHECK(std::filesystem::is_directory(folder.root() + "/" + c), "FLUX folder ",
               folder.root(), " has no ", c,
               "/ subfolder: FluxPipeline needs CLIP (text_encoder, tokenizer) and T5 "
               "(text_encoder_2, tokenizer_2)");
  return std::make_unique<FluxFamily>(cfg);
}

}  // namespace xdit::pipeline
