// Qwen-Image's transformer (tools/goldens/make_qwen_image.py's tiny random
// QwenImageTransformer2DModel): the weights its config implies are the
// file's; the real model's size; the variants xdit does not run refused by
// name; the forward against diffusers on two-item calls with one item's text
// padded and masked, at an even and an odd token grid (the centred RoPE), in
// f32 and bf16; pipeline stages equal the whole model.
#include <gtest/gtest.h>

#include <map>

#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "kernels/kernels.h"
#include "models/qwen_image.h"
#include "test_util.h"
#include "weight_list.h"

namespace xdit::models {
namespace {

const std::string kDir = std::string(XDIT_TEST_DATA) + "/qwen_image/transformer";

QwenImageConfig tiny_config() {
  return QwenImageConfig::from_json(io::read_json_file(kDir + "/config.json"), kDir);
}

TEST(QwenImageConfig, WeightListEqualsTheFile) {
  const QwenImageConfig c = tiny_config();
  EXPECT_EQ(c.hidden(), 32);
  EXPECT_EQ(c.out_channels, 16);
  io::WeightStore w(kDir);
  test::expect_weight_list(c.weight_specs(), w);
  EXPECT_EQ(c.parameter_count(), w.parameter_count());
}

TEST(QwenImageConfig, RealSizeAndRefusals) {
  const QwenImageConfig real;  // Qwen-Image's defaults: 60 blocks of 3072
  EXPECT_EQ(real.hidden(), 3072);
  EXPECT_NEAR(static_cast<double>(real.parameter_count()), 20.4e9, 0.1e9);
  const auto error_of = [](const std::string& extra) {
    return test::error_message([&] {
      QwenImageConfig::from_json(io::parse_json_text("{" + extra + "}", "c"), "transformer");
    });
  };
  EXPECT_EQ(error_of(""), "(no error)");
  EXPECT_NE(error_of(R"("zero_cond_t": true)").find("zero_cond_t"), std::string::npos);
  EXPECT_NE(error_of(R"("guidance_embeds": true)").find("guidance_embeds"), std::string::npos);
  EXPECT_NE(error_of(R"("in_channels": 60)").find("4 x out_channels"), std::string::npos);
  EXPECT_NE(error_of(R"("axes_dims_rope": [16, 56, 48])").find("add up to 120"), std::string::npos);
}

struct Case {
  Tensor latents;
  std::vector<float> t;
  Conditioning cond;
  Tensor want;
};

Case load_case(int k) {
  auto g = io::read_safetensors_f32(std::string(XDIT_TEST_DATA) +
                                    "/qwen_image/qwen_image_forward.safetensors");
  const std::string n = std::to_string(k);
  Case c;
  c.latents = test::one_frame(g["latents" + n]);
  c.t = g["t" + n].to_vector();
  c.cond.set(kText, g["text" + n]);
  c.cond.set(kTextMask, g["mask" + n]);
  c.want = g["out" + n];
  return c;
}

Tensor run(DiT& model, const Case& c, const Tensor* hidden = nullptr) {
  DiTInputs in;
  in.latents = &c.latents;
  in.timesteps = c.t;
  in.cond = &c.cond;
  return model.forward(in, hidden);
}

double forward_error(DType dt, int k) {
  io::WeightStore w(kDir);
  QwenImageTransformer model(tiny_config(), w, dt);
  const Case c = load_case(k);
  const Tensor out = run(model, c);
  EXPECT_EQ(out.numel(), c.want.numel());
  return test::rel_max_err(out.to_vector(), c.want.to_vector());
}

TEST(QwenImage, ForwardMatchesDiffusersWithAMaskedText) {
  EXPECT_LE(forward_error(DType::kF32, 0), 1e-4);  // 4 x 6 tokens; item 1: 5 of 9 text tokens
  EXPECT_LE(forward_error(DType::kF32, 1), 1e-4);  // 5 x 3 tokens (odd sides); no padding
}

TEST(QwenImage, Bf16Forward) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  EXPECT_LE(forward_error(DType::kBF16, 0), 3e-2);
  EXPECT_LE(forward_error(DType::kBF16, 1), 3e-2);
}

TEST(QwenImage, PipelineStagesEqualTheWholeModel) {
  io::WeightStore w(kDir);
  const QwenImageConfig cfg = tiny_config();
  const Case c = load_case(0);
  QwenImageTransformer whole(cfg, w, DType::kF32);
  const Tensor want = run(whole, c);
  QwenImageTransformer first(cfg, w, DType::kF32, DiTStage(0, 1, true, false));
  QwenImageTransformer last(cfg, w, DType::kF32, DiTStage(1, -1, false, true));
  const Tensor hidden = run(first, c);
  EXPECT_EQ(test::rel_max_err(run(last, c, &hidden).to_vector(), want.to_vector()), 0.0);
}

}  // namespace
}  // namespace xdit::models
