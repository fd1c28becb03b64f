#include "pipeline/text_encoding.h"

#include <cstring>
#include <map>

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

std::vector<std::pair<Tensor, Tensor>> encode_t5(const tokenizers::T5Tokenizer& tok,
                                                 models::T5Encoder& t5,
                                                 const std::vector<T5Texts>& lists, int64_t L,
                                                 bool lower_strip, bool masked) {
  // The distinct texts, each tokenized once, and where each list's texts are.
  std::map<std::string, int64_t> index;
  std::vector<tokenizers::Tokens> unique;
  std::vector<std::vector<int64_t>> which(lists.size());
  for (size_t l = 0; l < lists.size(); ++l)
    for (const auto& raw : lists[l].texts) {
      const std::string text = lower_strip ? tokenizers::lower_strip(raw) : raw;
      auto [it, added] = index.emplace(text, static_cast<int64_t>(unique.size()));
      if (added) unique.push_back(tok.encode(text, L));
      const tokenizers::Tokens& t = unique[static_cast<size_t>(it->second)];
      if (lists[l].warn && t.truncated()) {
        // As diffusers: say what was cut.
        tokenizers::Tokens all = tok.encode(text, t.untruncated);
        std::vector<int32_t> cut(all.ids.begin() + (L - 1), all.ids.end() - 1);
        XDIT_WARN("the prompt is longer than ", L, " T5 tokens; this part was truncated: \"",
                  tok.decode(cut), "\"");
      }
      which[l].push_back(it->second);
    }
  // Masked, the positions after the last real token of every text are left
  // out: no real token attends to them.
  int64_t S = L;
  if (masked) {
    S = 1;
    for (const auto& t : unique)
      for (int64_t i = L; i > S; --i)
        if (t.mask[static_cast<size_t>(i - 1)] != 0) {
          S = i;
          break;
        }
  }
  const int64_t U = static_cast<int64_t>(unique.size());
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  for (const auto& t : unique) {
    ids.insert(ids.end(), t.ids.begin(), t.ids.begin() + S);
    mask.insert(mask.end(), t.mask.begin(), t.mask.begin() + S);
  }
  const Tensor enc = t5.encode(ids, masked ? mask : std::vector<uint8_t>{}, U, S);
  check_finite_output(enc, "text encoder", "text_encoder");
  const int64_t d = enc.dim(2);
  std::vector<std::pair<Tensor, Tensor>> out;
  for (size_t l = 0; l < lists.size(); ++l) {
    const int64_t n = static_cast<int64_t>(which[l].size());
    Tensor e = Tensor::zeros({n, L, d}), m;
    if (masked) m = Tensor::zeros({n, L});
    for (int64_t b = 0; b < n; ++b) {
      const int64_t u = which[l][static_cast<size_t>(b)];
      const auto& umask = unique[static_cast<size_t>(u)].mask;
      for (int64_t i = 0; i < S; ++i) {
        if (masked && umask[static_cast<size_t>(i)] == 0) continue;  // padding stays zero
        std::memcpy(e.data<float>() + (b * L + i) * d, enc.data<float>() + (u * S + i) * d,
                    static_cast<size_t>(d) * sizeof(float));
      }
      if (masked)
        for (int64_t i = 0; i < L; ++i) m.data<float>()[b * L + i] = umask[static_cast<size_t>(i)];
    }
    out.emplace_back(std::move(e), std::move(m));
  }
  return out;
}

std::vector<T5Texts> prompt_lists(const PlanFields& r, bool cfg) {
  std::vector<T5Texts> lists{{r.prompts, true}};
  if (cfg)
    lists.push_back(
        {std::vector<std::string>(r.prompts.size(), r.negative_prompt.value_or("")), false});
  return lists;
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
