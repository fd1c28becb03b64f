// CLIP text encoders against transformers (tools/goldens/make_clip.py): a
// CLIP-L-like CLIPTextModel (quick_gelu, keys without "text_model.") and a
// CLIP-G-like CLIPTextModelWithProjection (gelu, "text_model." keys,
// projection) on the tokenizers' ids of four prompts: the last hidden state,
// the penultimate hidden state (SD3's features, no final LayerNorm) and the
// pooled output (projected for G), in f32 ≤ 1e-4 relative; bf16 close.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "kernels/kernels.h"
#include "models/clip.h"
#include "test_util.h"

namespace xdit::models {
namespace {

const std::string kClip = std::string(XDIT_TEST_DATA) + "/clip";

struct Case {
  const char* key;
  const char* folder;
  int64_t projection;
  const char* act;
};

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(ClipEncoder, MatchesTransformers) {
  io::SafeTensorsFile g(std::string(XDIT_TEST_DATA) + "/goldens/clip_encoders.safetensors");
  for (const Case c :
       {Case{"l", "text_encoder", 0, "quick_gelu"}, Case{"g", "text_encoder_2", 24, "gelu"}}) {
    SCOPED_TRACE(c.folder);
    const std::string dir = kClip + "/" + c.folder;
    const auto cfg =
        ClipTextConfig::from_json(io::read_json_file(dir + "/config.json"), dir + "/config.json");
    EXPECT_EQ(cfg.projection_dim, c.projection);
    EXPECT_EQ(cfg.hidden_act, c.act);
    io::WeightStore w(dir);
    const std::string key = c.key;
    const Tensor ids_t = g.get(key + ".ids");  // stored as f32 (exact)
    const int64_t B = ids_t.dim(0), S = ids_t.dim(1);
    std::vector<int32_t> ids;
    for (const float v : ids_t.to_vector()) ids.push_back(static_cast<int32_t>(v));
    for (const DType dt : {DType::kF32, DType::kBF16}) {
      if (dt == DType::kBF16 && !kernels::cpu_has_bf16()) continue;
      ClipTextEncoder enc(cfg, w, dt);
      const ClipTextOutput out = enc.encode(ids, B, S, -2);
      const double tol = dt == DType::kF32 ? 1e-4 : 5e-2;
      EXPECT_LT(test::rel_max_err(values(out.last_hidden), g.get(key + ".last").to_vector()), tol);
      EXPECT_LT(test::rel_max_err(values(out.hidden), g.get(key + ".penultimate").to_vector()),
                tol);
      EXPECT_LT(test::rel_max_err(values(out.pooled), g.get(key + ".pooled").to_vector()), tol);
      EXPECT_EQ(out.pooled.dim(1), c.projection > 0 ? c.projection : cfg.hidden_size);
      if (dt != DType::kF32) continue;
      // Index 0 is the embeddings, the last index the final layer's output
      // before the final LayerNorm: it differs from last_hidden.
      const ClipTextOutput first = enc.encode(ids, B, S, 0);
      const ClipTextOutput top = enc.encode(ids, B, S, cfg.num_hidden_layers);
      EXPECT_GT(test::rel_max_err(values(top.hidden), values(out.last_hidden)), 1e-2);
      EXPECT_GT(test::rel_max_err(values(first.hidden), values(out.hidden)), 1e-2);
      EXPECT_FALSE(enc.encode(ids, B, S).hidden.defined());
    }
  }
}

TEST(ClipEncoder, RejectsBadConfigsAndInputs) {
  const auto parse = [](const std::string& json) {
    return test::error_message(
        [&] { ClipTextConfig::from_json(io::parse_json_text(json, "cfg"), "cfg"); });
  };
  EXPECT_NE(parse(R"({"hidden_act": "relu"})").find("hidden_act \"relu\""), std::string::npos);
  EXPECT_NE(parse(R"({"hidden_size": 50, "num_attention_heads": 8})").find("not divisible"),
            std::string::npos);
  EXPECT_NE(parse(R"({"num_hidden_layers": -1})").find("num_hidden_layers"), std::string::npos);
  // A full CLIPConfig: the text model's keys come from text_config.
  const auto full = ClipTextConfig::from_json(
      io::parse_json_text(R"({"text_config": {"hidden_size": 64, "num_attention_heads": 4},
                               "vision_config": {"hidden_size": 1024}})",
                          "cfg"),
      "cfg");
  EXPECT_EQ(full.hidden_size, 64);

  const std::string dir = kClip + "/text_encoder";
  const auto cfg =
      ClipTextConfig::from_json(io::read_json_file(dir + "/config.json"), dir + "/config.json");
  io::WeightStore w(dir);
  ClipTextEncoder enc(cfg, w, DType::kF32);
  std::vector<int32_t> ids(78, 1);
  EXPECT_NE(test::error_message([&] { enc.encode(ids, 1, 78); }).find("exceed"), std::string::npos);
  ids.assign(5, static_cast<int32_t>(cfg.vocab_size));
  EXPECT_NE(test::error_message([&] { enc.encode(ids, 1, 5); }).find("outside the CLIP vocabulary"),
            std::string::npos);
  ids.assign(5, 1);
  EXPECT_NE(test::error_message([&] { enc.encode(ids, 1, 5, -5); }).find("does not exist"),
            std::string::npos);
}

}  // namespace
}  // namespace xdit::models
