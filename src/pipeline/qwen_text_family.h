// What the decoder-LLM families (Z-Image: Qwen3; Qwen-Image: Qwen2.5-VL)
// share on their text side: the "tokenizer" and "text_encoder" components
// (a Qwen2 tokenizer, a Qwen language model of the transformer's text width,
// its weights checked for the layers the pipeline runs), the encoder built
// on first use — split by whole GQA groups under tensor parallelism,
// streamed a layer at a time when not resident —, and its memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/qwen_text.h"
#include "pipeline/model_family.h"
#include "tokenizers/qwen_tokenizer.h"

namespace xdit::pipeline {

template <class Config, class Transformer>
class QwenTextFamily : public ConfigFamily<Config, Transformer> {
 public:
  using ConfigFamily<Config, Transformer>::ConfigFamily;
  using ComponentKind = ModelFamily::ComponentKind;
  using Component = ModelFamily::Component;

  std::vector<std::string> lora_text_components() const override { return {}; }
  std::vector<Component> text_components() const override {
    return {{"text_encoder", ComponentKind::kQwenEncoder},
            {"tokenizer", ComponentKind::kQwenTokenizer}};
  }
  void check_tensor_parallel(int degree) const override {
    if (qwen_cfg_) models::check_qwen_tensor_parallel(*qwen_cfg_, degree);
  }
  int text_parallel_degree(int ranks) const override {
    if (!qwen_cfg_) return 1;
    return largest_split_degree(ranks, [&](int d) { return models::qwen_splits(*qwen_cfg_, d); });
  }
  void drop_text_encoders() override { qwen_.reset(); }
  void describe_text(MemoryQuery& q) const override {
    q.qwen = qwen_cfg_.get();
    q.qwen_layers = qwen_cfg_ ? encoder_layers(*qwen_cfg_) : 0;
  }

 protected:
  // The layers of the encoder `c` the pipeline runs (all, or all but the last).
  int64_t encoder_layers(const models::QwenTextConfig& c) const {
    return this->text_layers_run(c.num_layers);
  }
  // Opens the tokenizer and the encoder's config and weight headers, its
  // width checked against the transformer's text width `width`.
  void open_qwen_text(const io::ModelFolder& folder, int64_t width) {
    if (!tokenizer_)
      tokenizer_ = std::make_unique<tokenizers::QwenTokenizer>(folder.component("tokenizer"));
    if (qwen_cfg_) return;
    const std::string dir = folder.component("text_encoder");
    auto c = models::QwenTextConfig::from_json(
        folder.component_config("text_encoder", "config.json"), dir + "/config.json");
    XDIT_CHECK(c.hidden_size == width, dir, ": the text encoder's hidden size ", c.hidden_size,
               " is not the transformer's text width ", width);
    XDIT_CHECK(encoder_layers(c) >= 1, dir, ": ", c.num_layers,
               " layer(s) are too few for this pipeline's states");
    auto w = std::make_unique<io::WeightStore>(dir);
    c.locate(*w, dir);
    w->check_shapes(c.weight_specs(encoder_layers(c)));
    qwen_weights_ = std::move(w);
    qwen_cfg_ = std::make_unique<models::QwenTextConfig>(c);
  }
  // The encoder, built on first use.
  models::QwenTextEncoder& qwen_encoder(DType dtype) {
    XDIT_CHECK(tokenizer_ && qwen_cfg_, "encode before the text side was opened");
    if (!qwen_)
      qwen_ = std::make_unique<models::QwenTextEncoder>(*qwen_cfg_, *qwen_weights_, dtype,
                                                        encoder_layers(*qwen_cfg_), this->text_tp_,
                                                        this->text_resident_);
    return *qwen_;
  }

  std::unique_ptr<tokenizers::QwenTokenizer> tokenizer_;
  std::unique_ptr<models::QwenTextConfig> qwen_cfg_;

 private:
  std::unique_ptr<io::WeightStore> qwen_weights_;
  std::unique_ptr<models::QwenTextEncoder> qwen_;
};

}  // namespace xdit::pipeline
