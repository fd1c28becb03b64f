// Stable Diffusion 3 / 3.5 (diffusers StableDiffusion3Pipeline): CLIP-L and
// CLIP-G (penultimate hidden states and projected pooled outputs), T5 without
// a mask (max_sequence_length 256): the CLIP features concatenated, zero-
// padded to T5's width and put before T5's tokens (77 + 256 = 333), the two
// pooled vectors concatenated; classifier-free guidance from guidance_scale
// > 1 with the negative prompt "" by default; Flow-Match with SD3's shift
// (mu only where the scheduler shifts dynamically); skip-layer guidance.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "models/sd3.h"
#include "models/sd3_checkpoint.h"
#include "pipeline/guidance/skip_layer.h"
#include "pipeline/model_family.h"
#include "pipeline/text_encoding.h"

namespace xdit::pipeline {

namespace {

class SD3Family : public ConfigFamily<models::SD3Config, models::SD3Transformer> {
 public:
  using ConfigFamily::ConfigFamily;

  bool runs_on_cuda() const override { return true; }
  std::optional<OriginalLayout> original_layout(const io::WeightSpecs& specs) const override {
    const Shape& q = spec_shape(specs, "transformer_blocks.0.attn.to_q.weight");
    int64_t last_block = -1;  // the last joint block's context stream ends the model
    for (const auto& [name, shape] : specs)
      if (name.rfind("transformer_blocks.", 0) == 0)
        last_block = std::max<int64_t>(last_block, std::stoll(name.substr(19)));
    return OriginalLayout{"SD3", [inner = q[0], last_block](const std::string& n) {
                            return models::sd3_original_rows(n, inner, last_block);
                          }};
  }
  std::vector<std::string> lora_text_components() const override {
    return {"text_encoder", "text_encoder_2", "text_encoder_3"};
  }
  std::string name() const override {
    return cfg_.dual_attention_layers.empty() && !cfg_.qk_norm ? "Stable Diffusion 3"
                                                               : "Stable Diffusion 3.5";
  }
  std::string describe() const override {
    const auto& c = cfg_;
    return detail::concat(
        "SD3Transformer2DModel, ", c.num_layers, " joint blocks (", c.dual_attention_layers.size(),
        " with dual attention), hidden ", c.hidden(), " (", c.num_attention_heads, " heads x ",
        c.attention_head_dim, "), patch ", c.patch_size, ", text ", c.joint_attention_dim,
        ", pooled ", c.pooled_projection_dim, ", qk-norm ", c.qk_norm ? "rms_norm" : "none",
        ", positions up to ", c.pos_embed_max_size, " patches");
  }
  int64_t text_width() const override { return cfg_.joint_attention_dim; }
  int64_t pooled_width() const override { return cfg_.pooled_projection_dim; }

  int64_t default_height(int64_t vsf) const override { return cfg_.sample_size * vsf; }
  int64_t default_steps() const override { return 28; }
  const Guider& guider() const override { return guider_; }
  int64_t max_side(int64_t vsf) const override {
    return cfg_.pos_embed_max_size * cfg_.patch_size * vsf;
  }
  schedulers::TimestepHints timestep_hints(const schedulers::SchedulerConfig& s, int64_t,
                                           int64_t latent_h, int64_t latent_w) const override {
    schedulers::TimestepHints h;
    const auto* fm = s.flow_match();
    if (fm != nullptr && fm->use_dynamic_shifting)
      h.mu = fm->mu((latent_h / cfg_.patch_size) * (latent_w / cfg_.patch_size));
    return h;
  }

  void open_text(const io::ModelFolder& folder) override {
    if (!clip_l_tok_) {
      clip_l_tok_ = std::make_unique<tokenizers::ClipTokenizer>(folder.component("tokenizer"));
      clip_g_tok_ = std::make_unique<tokenizers::ClipTokenizer>(folder.component("tokenizer_2"));
      t5_tok_ = std::make_unique<tokenizers::T5Tokenizer>(folder.component("tokenizer_3"));
    }
    if (!clip_l_cfg_) {
      // Both configs against the transformer first, then the weight headers.
      auto l = read_clip_config(folder, "text_encoder");
      auto g = read_clip_config(folder, "text_encoder_2");
      const int64_t features = l->hidden_size + g->hidden_size;
      XDIT_CHECK(features <= cfg_.joint_attention_dim, "the CLIP encoders' features (",
                 l->hidden_size, " + ", g->hidden_size, " = ", features,
                 ") are wider than the transformer's joint_attention_dim ",
                 cfg_.joint_attention_dim);
      const int64_t pooled = l->pooled_width() + g->pooled_width();
      XDIT_CHECK(pooled == cfg_.pooled_projection_dim, "the CLIP encoders pool to ",
                 l->pooled_width(), " + ", g->pooled_width(), " = ", pooled,
                 " but the transformer's pooled_projection_dim is ", cfg_.pooled_projection_dim);
      clip_l_weights_ = open_clip_weights(folder, "text_encoder", *l);
      clip_g_weights_ = open_clip_weights(folder, "text_encoder_2", *g);
      text_weights("text_encoder", *clip_l_weights_);  // their LoRAs checked now
      text_weights("text_encoder_2", *clip_g_weights_);
      clip_l_cfg_ = std::move(l);
      clip_g_cfg_ = std::move(g);
    }
    if (!t5_cfg_) open_t5_encoder(folder, "text_encoder_3", cfg_.joint_attention_dim);
  }
  std::vector<Component> text_components() const override {
    return {{"text_encoder", ComponentKind::kClipEncoder},
            {"text_encoder_2", ComponentKind::kClipEncoder},
            {"text_encoder_3", ComponentKind::kT5Encoder},
            {"tokenizer", ComponentKind::kClipTokenizer},
            {"tokenizer_2", ComponentKind::kClipTokenizer},
            {"tokenizer_3", ComponentKind::kT5Tokenizer}};
  }
  int64_t default_max_sequence_length() const override { return 256; }
  int64_t max_sequence_limit() const override { return t5_sequence_limit(*t5_tok_); }

  PromptEmbeddings encode(const PlanFields& r, DType dtype) override {
    const bool cfg = r.cfg;
    XDIT_CHECK(clip_l_cfg_ && t5_cfg_, "encode before the text side was opened");
    if (!clip_l_) {
      clip_l_ =
          build_text_encoder("text_encoder", *clip_l_weights_, [&](const io::WeightSource& w) {
            return std::make_unique<models::ClipTextEncoder>(*clip_l_cfg_, w, dtype);
          });
      clip_g_ =
          build_text_encoder("text_encoder_2", *clip_g_weights_, [&](const io::WeightSource& w) {
            return std::make_unique<models::ClipTextEncoder>(*clip_g_cfg_, w, dtype);
          });
    }
    t5_encoder(dtype);  // encode_texts runs it
    PromptEmbeddings e;
    auto [text, pooled] = encode_texts(r.prompts, r.max_sequence_length, true);
    e.cond.set(models::kText, std::move(text));
    e.cond.set(models::kPooled, std::move(pooled));
    if (cfg) {
      auto [ntext, npooled] =
          encode_texts(std::vector<std::string>(r.prompts.size(), r.negative_prompt.value_or("")),
                       r.max_sequence_length, false);
      e.uncond.set(models::kText, std::move(ntext));
      e.uncond.set(models::kPooled, std::move(npooled));
    }
    return e;
  }
  void drop_text_encoders() override {
    clip_l_.reset();
    clip_g_.reset();
    t5_.reset();
  }
  void describe_text(MemoryQuery& q) const override {
    q.t5 = t5_cfg_.get();
    q.clip = clip_g_cfg_.get();  // the larger of the two CLIPs
  }

 private:
  SkipLayerGuider guider_{{.default_guidance = 7.0}};
  // [n, 77 + L, joint] embeddings and [n, pooled] vectors, as encode_prompt makes them.
  std::pair<Tensor, Tensor> encode_texts(const std::vector<std::string>& texts, int64_t L,
                                         bool warn) {
    const auto l = encode_clip(*clip_l_tok_, *clip_l_, texts, warn, -2);
    const auto g = encode_clip(*clip_g_tok_, *clip_g_, texts, false, -2);
    const Tensor t5 = encode_t5(*t5_tok_, *t5_, texts, L, false, false, warn).first;
    const int64_t n = static_cast<int64_t>(texts.size()), J = cfg_.joint_attention_dim;
    const int64_t C = l.hidden.dim(1), hl = l.hidden.dim(2), hg = g.hidden.dim(2);
    Tensor embeds = Tensor::empty({n, C + L, J});
    float* e = embeds.data<float>();
    std::fill(e, e + embeds.numel(), 0.0f);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t t = 0; t < C; ++t) {
        float* row = e + (b * (C + L) + t) * J;
        std::memcpy(row, l.hidden.data<float>() + (b * C + t) * hl, static_cast<size_t>(hl) * 4);
        std::memcpy(row + hl, g.hidden.data<float>() + (b * C + t) * hg,
                    static_cast<size_t>(hg) * 4);
      }
      std::memcpy(e + (b * (C + L) + C) * J, t5.data<float>() + b * L * J,
                  static_cast<size_t>(L * J) * 4);
    }
    const int64_t pl = l.pooled.dim(1), pg = g.pooled.dim(1);
    Tensor pooled = Tensor::empty({n, pl + pg});
    for (int64_t b = 0; b < n; ++b) {
      std::memcpy(pooled.data<float>() + b * (pl + pg), l.pooled.data<float>() + b * pl,
                  static_cast<size_t>(pl) * 4);
      std::memcpy(pooled.data<float>() + b * (pl + pg) + pl, g.pooled.data<float>() + b * pg,
                  static_cast<size_t>(pg) * 4);
    }
    return {embeds, pooled};
  }

  std::unique_ptr<tokenizers::ClipTokenizer> clip_l_tok_, clip_g_tok_;
  std::unique_ptr<tokenizers::T5Tokenizer> t5_tok_;
  std::unique_ptr<models::ClipTextConfig> clip_l_cfg_, clip_g_cfg_;
  std::unique_ptr<io::WeightStore> clip_l_weights_, clip_g_weights_;
  std::unique_ptr<models::ClipTextEncoder> clip_l_, clip_g_;
};

}  // namespace

std::unique_ptr<ModelFamily> make_sd3_family(const io::ModelFolder& folder) {
  const std::string tdir = folder.component("transformer");
  const auto cfg = models::SD3Config::from_json(
      folder.component_config("transformer", "config.json"), tdir + "/config.json");
  // All three text encoders (and their tokenizers), or none (prompt embeddings only).
  std::string have, missing;
  for (const char* c : {"text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2",
                        "text_encoder_3", "tokenizer_3"}) {
    std::string& list = std::filesystem::is_directory(folder.root() + "/" + c) ? have : missing;
    list += (list.empty() ? "" : ", ") + std::string(c) + "/";
  }
  XDIT_CHECK(have.empty() || missing.empty(), "SD3 folder ", folder.root(), " has ", have,
             " but not ", missing,
             ": StableDiffusion3Pipeline needs CLIP-L, CLIP-G and T5 with their tokenizers");
  return std::make_unique<SD3Family>(cfg);
}

}  // namespace xdit::pipeline
