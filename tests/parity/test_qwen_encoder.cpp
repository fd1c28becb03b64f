// The decoder-LLM text encoders against transformers
// (tools/goldens/make_qwen_encoder.py): tiny random Qwen3Model (q/k norms),
// Qwen2Model (q/k/v biases) and a whole Qwen2_5_VLForConditionalGeneration
// called on text (its multimodal RoPE), 4 query heads over 2 key/value heads, on
// two right-padded prompts: every entry of output_hidden_states — the
// embeddings, each layer's output, the last one normed — within 1e-4 of the
// largest value (f32). Then their weight lists, and configs refused by name.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/qwen_text.h"
#include "pipeline/qwen_prompts.h"
#include "test_util.h"
#include "tokenizers/qwen_tokenizer.h"
#include "weight_list.h"

namespace xdit::models {
namespace {

const std::string kDir = std::string(XDIT_TEST_DATA) + "/qwen";

class QwenEncoder : public testing::TestWithParam<std::string> {
 protected:
  QwenTextConfig config(const io::WeightSource& w) const {
    const std::string dir = kDir + "/" + GetParam();
    QwenTextConfig c = QwenTextConfig::from_json(io::read_json_file(dir + "/config.json"), dir);
    c.locate(w, dir);
    return c;
  }
};

TEST_P(QwenEncoder, EveryHiddenStateMatchesTransformers) {
  io::WeightStore w(kDir + "/" + GetParam());
  const QwenTextConfig c = config(w);
  EXPECT_EQ(c.qk_norm, GetParam() == "qwen3");
  EXPECT_EQ(c.qkv_bias, GetParam() != "qwen3");
  EXPECT_EQ(c.num_kv_heads, 2);
  auto g = io::read_safetensors_f32(kDir + "/qwen_encoder.safetensors");
  const Tensor& ids_t = g["ids"];
  const int64_t B = ids_t.dim(0), S = ids_t.dim(1);
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  for (float v : ids_t.to_vector()) ids.push_back(static_cast<int32_t>(v));
  for (float v : g["mask"].to_vector()) mask.push_back(static_cast<uint8_t>(v));
  QwenTextEncoder enc(c, w, DType::kF32);
  // Qwen2.5-VL gives the padding rows other positions (get_rope_index): the
  // real tokens' rows compare there, every row elsewhere.
  const bool real_only = GetParam() == "qwen2_5_vl";
  const auto rows = [&](const Tensor& t) {
    std::vector<float> v;
    const int64_t d = t.dim(2);
    for (int64_t r = 0; r < B * S; ++r)
      if (!real_only || mask[static_cast<size_t>(r)] != 0)
        v.insert(v.end(), t.data<float>() + r * d, t.data<float>() + (r + 1) * d);
    return v;
  };
  for (int64_t k = 0; k <= c.num_layers; ++k) {
    const Tensor want = g[GetParam() + ".hidden_states." + std::to_string(k)];
    const Tensor got = enc.encode(ids, mask, B, S, k, k == c.num_layers);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_LE(test::rel_max_err(rows(got), rows(want)), 1e-4) << "hidden_states " << k;
  }
  // Built with fewer layers (what a pipeline taking an earlier one builds),
  // and streamed a layer at a time: the same states.
  QwenTextEncoder two(c, w, DType::kF32, 2);
  EXPECT_EQ(two.encode(ids, mask, B, S, 2, false).to_vector(),
            enc.encode(ids, mask, B, S, 2, false).to_vector());
  QwenTextEncoder streamed(c, w, DType::kF32, -1, {}, false);
  EXPECT_EQ(streamed.encode(ids, mask, B, S, c.num_layers, true).to_vector(),
            enc.encode(ids, mask, B, S, c.num_layers, true).to_vector());
  // bf16 layers stay close.
  QwenTextEncoder half(c, w, DType::kBF16);
  EXPECT_LE(test::rel_max_err(
                half.encode(ids, mask, B, S, c.num_layers, true).to_vector(),
                g[GetParam() + ".hidden_states." + std::to_string(c.num_layers)].to_vector()),
            0.05);
}

TEST_P(QwenEncoder, WeightListEqualsTheFile) {
  io::WeightStore w(kDir + "/" + GetParam());
  const QwenTextConfig c = config(w);
  // (Qwen2.5-VL's file holds its vision tower and lm_head beside.)
  test::expect_weight_list(c.weight_specs(), w, {c.prefix});
  if (c.prefix.empty()) {
    EXPECT_EQ(c.parameter_count(), w.parameter_count());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, QwenEncoder, testing::Values("qwen3", "qwen2", "qwen2_5_vl"));

TEST(QwenEncoderConfig, UnsupportedConfigsAreRefusedByName) {
  const auto error_of = [](const std::string& text) {
    return test::error_message(
        [&] { QwenTextConfig::from_json(io::parse_json_text(text, "c"), "text_encoder"); });
  };
  EXPECT_NE(error_of(R"({"model_type": "llama"})").find("model_type \"llama\""), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "qwen3", "num_attention_heads": 6,
                         "num_key_value_heads": 4, "head_dim": 8})")
                .find("not a multiple of num_key_value_heads"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "qwen2", "hidden_act": "gelu"})").find("hidden_act"),
            std::string::npos);
  // Qwen2.5-VL: the language model's sizes from text_config.
  const QwenTextConfig vl = QwenTextConfig::from_json(
      io::parse_json_text(R"({"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 64,
          "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 5,
          "rope_theta": 1000000.0}})",
                          "c"),
      "vl");
  EXPECT_EQ(vl.hidden_size, 64);
  EXPECT_EQ(vl.head_dim, 16);
  EXPECT_EQ(vl.num_layers, 5);
  EXPECT_TRUE(vl.qkv_bias);
  // Tensor parallelism names the GQA groups a degree would split.
  const QwenTextConfig q3 = QwenTextConfig::qwen3_4b();
  nn::TensorParallel tp;
  tp.size = 16;
  io::RandomWeights none(1);
  EXPECT_NE(test::error_message([&] {
              QwenTextEncoder e(q3, none, DType::kBF16, 0, tp);
            }).find("key/value heads (GQA groups of 4 query heads)"),
            std::string::npos);
}

// Qwen-Image's prompt encoding against QwenImagePipeline.encode_prompt on
// the tiny tokenizer and Qwen2.5-VL: the template, the 34 dropped tokens,
// the real tokens' normed last states, zero padding with its mask, and the
// cut at max_sequence_length.
TEST(QwenImagePrompts, MatchDiffusers) {
  const std::string dir = kDir + "/qwen2_5_vl";
  io::WeightStore w(dir);
  QwenTextConfig c = QwenTextConfig::from_json(io::read_json_file(dir + "/config.json"), dir);
  c.locate(w, dir);
  QwenTextEncoder enc(c, w, DType::kF32);
  const tokenizers::QwenTokenizer tok(kDir + "/tokenizer");
  auto g = io::read_safetensors_f32(kDir + "/qwen_image_prompts.safetensors");
  const std::vector<std::string> prompts{"a red fox in the snow",
                                         "Two cats, sitting on a mat! 3 dogs and 12 birds."};
  for (const auto& [cut, tag] :
       std::vector<std::pair<int64_t, std::string>>{{1024, ""}, {20, "_cut20"}}) {
    const pipeline::MaskedEmbeddings e =
        pipeline::encode_qwen_image_prompts(tok, enc, prompts, cut);
    ASSERT_EQ(e.embeds.shape(), g["prompt_embeds" + tag].shape()) << tag;
    EXPECT_LE(test::rel_max_err(e.embeds.to_vector(), g["prompt_embeds" + tag].to_vector()), 1e-4)
        << tag;
    EXPECT_EQ(e.mask.to_vector(), g["prompt_embeds_mask" + tag].to_vector()) << tag;
  }
}

// Z-Image's prompt encoding against ZImagePipeline._encode_prompt on the
// tiny tokenizer (given the part of Qwen3's chat template one user message
// uses) and Qwen3: padded to max_sequence_length, the states before the last
// layer without the norm, each prompt's real tokens; the encoder built with
// those layers alone gives the same.
TEST(ZImagePrompts, MatchDiffusers) {
  const std::string dir = kDir + "/qwen3";
  io::WeightStore w(dir);
  QwenTextConfig c = QwenTextConfig::from_json(io::read_json_file(dir + "/config.json"), dir);
  c.locate(w, dir);
  const tokenizers::QwenTokenizer tok(kDir + "/tokenizer");
  auto g = io::read_safetensors_f32(kDir + "/z_image_prompts.safetensors");
  const std::vector<std::string> prompts{"a red fox in the snow", "Two cats, sitting on a mat!"};
  for (const int64_t layers : {int64_t{-1}, c.num_layers - 1}) {
    QwenTextEncoder enc(c, w, DType::kF32, layers);
    const std::vector<Tensor> e = pipeline::encode_z_image_prompts(tok, enc, prompts, 24);
    ASSERT_EQ(e.size(), 2u);
    for (size_t i = 0; i < e.size(); ++i) {
      const Tensor& want = g["embeds" + std::to_string(i)];
      ASSERT_EQ(e[i].shape(), want.shape()) << i;
      EXPECT_LE(test::rel_max_err(e[i].to_vector(), want.to_vector()), 1e-4) << i;
    }
  }
  QwenTextEncoder too_few(c, w, DType::kF32, 1);
  EXPECT_NE(test::error_message([&] {
              pipeline::encode_z_image_prompts(tok, too_few, prompts, 24);
            }).find("come after 2 layers; the encoder has 1"),
            std::string::npos);
}

}  // namespace
}  // namespace xdit::models
