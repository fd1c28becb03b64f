#include "pipeline/family_util.h"

#include "core/error.h"
#include "core/log.h"

namespace xdit::pipeline {

void check_finite_output(const Tensor& t, const char* model, const char* component) {
  const int64_t bad = count_nonfinite(t);
  XDIT_CHECK(bad == 0, "the ", model, " produced ", bad,
             " NaN/Inf value(s); stopped without writing an image. Likely cause: non-finite "
             "weights in ",
             component, "/ (check with xdit info --model DIR --check-weights)");
}

std::unique_ptr<models::T5Config> open_t5(const io::ModelFolder& folder,
                                          const std::string& component, int64_t width,
                                          std::unique_ptr<io::WeightStore>& weights) {
  const std::string dir = folder.component(component);
  auto cfg = std::make_unique<models::T5Config>(models::T5Config::from_json(
      folder.component_config(component, "config.json"), dir + "/config.json"));
  XDIT_CHECK(cfg->d_model == width, component, "/ has width (d_model) ", cfg->d_model,
             " but the transformer takes text of width ", width);
  weights = std::make_unique<io::WeightStore>(dir);
  weights->check_shapes(cfg->weight_specs(
      weights->has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight"));
  return cfg;
}

std::pair<Tensor, Tensor> encode_t5(const tokenizers::T5Tokenizer& tok, models::T5Encoder& t5,
                                    const std::vector<std::string>& texts, int64_t L,
                                    bool lower_strip, bool masked, bool warn) {
  const int64_t n = static_cast<int64_t>(texts.size());
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  for (const auto& raw : texts) {
    const std::string text = lower_strip ? tokenizers::lower_strip(raw) : raw;
    tokenizers::Tokens t = tok.encode(text, L);
    if (warn && t.truncated()) {
      // As diffusers: say what was cut.
      tokenizers::Tokens all = tok.encode(text, t.untruncated);
      std::vector<int32_t> cut(all.ids.begin() + (L - 1), all.ids.end() - 1);
      XDIT_WARN("the prompt is longer than ", L, " T5 tokens; this part was truncated: \"",
                tok.decode(cut), "\"");
    }
    ids.insert(ids.end(), t.ids.begin(), t.ids.end());
    mask.insert(mask.end(), t.mask.begin(), t.mask.end());
  }
  Tensor m;
  if (masked) {
    m = Tensor::empty({n, L});
    for (size_t i = 0; i < mask.size(); ++i) m.data<float>()[i] = mask[i];
  }
  Tensor embeds = t5.encode(ids, masked ? mask : std::vector<uint8_t>{}, n, L);
  check_finite_output(embeds, "text encoder", "text_encoder");
  return {embeds, m};
}

models::ClipTextOutput encode_clip(const tokenizers::ClipTokenizer& tok,
                                   models::ClipTextEncoder& clip,
                                   const std::vector<std::string>& texts, bool warn,
                                   int64_t hidden_state) {
  const int64_t n = static_cast<int64_t>(texts.size()), L = tok.model_max_length();
  std::vector<int32_t> ids;
  for (const auto& text : texts) {
    tokenizers::Tokens t = tok.encode(text, L);
    if (warn && t.truncated()) {
      const auto all = tok.tokenize(text);
      std::string cut;
      for (std::string piece : tok.pieces(std::vector<int32_t>(all.begin() + (L - 2), all.end()))) {
        const size_t end = piece.rfind("</w>");  // the end of a word
        cut += end == std::string::npos ? piece : piece.substr(0, end) + " ";
      }
      XDIT_WARN("the prompt is longer than CLIP's ", L, " tokens; this part was truncated: \"", cut,
                "\"");
    }
    ids.insert(ids.end(), t.ids.begin(), t.ids.end());
  }
  models::ClipTextOutput out = clip.encode(ids, n, L, hidden_state);
  check_finite_output(out.pooled, "CLIP text encoder", "text_encoder");
  if (out.hidden.defined()) check_finite_output(out.hidden, "CLIP text encoder", "text_encoder");
  return out;
}

std::unique_ptr<models::ClipTextConfig> read_clip_config(const io::ModelFolder& folder,
                                                         const std::string& component) {
  return std::make_unique<models::ClipTextConfig>(
      models::ClipTextConfig::from_json(folder.component_config(component, "config.json"),
                                        folder.component(component) + "/config.json"));
}

std::unique_ptr<io::WeightStore> open_clip_weights(const io::ModelFolder& folder,
                                                   const std::string& component,
                                                   const models::ClipTextConfig& cfg) {
  auto weights = std::make_unique<io::WeightStore>(folder.component(component));
  weights->check_shapes(cfg.weight_specs(
      weights->has("text_model.embeddings.token_embedding.weight") ? "text_model." : ""));
  return weights;
}

}  // namespace xdit::pipeline
