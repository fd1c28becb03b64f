// PixArt parity with diffusers: goldens made by tools/goldens/make_pixart.py
// (tiny random-weight PixArt-α and PixArt-Σ style models; see each golden's
// metadata for the diffusers/torch versions).
#include <gtest/gtest.h>

#include <string>

#include "io/model_folder.h"
#include "io/safetensors.h"
#include "kernels/kernels.h"
#include "models/pixart.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

const std::string kData = XDIT_TEST_DATA;

struct Golden {
  std::map<std::string, Tensor> t;
  const Tensor& operator[](const std::string& k) const { return t.at(k); }
  bool has(const std::string& k) const { return t.count(k) != 0; }
};

Golden load_golden(const std::string& name) {
  return {io::read_safetensors_f32(kData + "/goldens/" + name)};
}

// The tiny model of `variant` and its forward golden's inputs.
struct ForwardCase {
  models::PixArtTransformer model;
  Golden g;
  models::DiTInputs in;
  models::Conditioning cond;
  Tensor latents;  // the golden's hidden_states with their frame axis
};

std::unique_ptr<ForwardCase> forward_case(const std::string& variant, DType dtype) {
  io::ModelFolder folder(std::string(XDIT_MODELS) + "/pixart-" + variant + "-tiny");
  auto cfg = models::PixArtConfig::from_json(folder.component_config("transformer", "config.json"),
                                             variant);
  io::WeightStore weights(folder.component("transformer"));
  auto c = std::unique_ptr<ForwardCase>(
      new ForwardCase{models::PixArtTransformer(cfg, weights, dtype),
                      load_golden("pixart_" + variant + "_forward.safetensors"),
                      {},
                      {},
                      {}});
  const Golden& g = c->g;
  c->latents = test::one_frame(g["hidden_states"]);
  c->in.latents = &c->latents;
  c->in.timesteps = g["timestep"].to_vector();
  c->cond.set(models::kText, g["encoder_hidden_states"]);
  c->cond.set(models::kTextMask, g["encoder_attention_mask"]);
  if (g.has("resolution")) {
    c->cond.set(models::kResolution, g["resolution"]);
    c->cond.set(models::kAspectRatio, g["aspect_ratio"]);
  }
  c->in.cond = &c->cond;
  return c;
}

double forward_error(const std::string& variant, DType dtype) {
  auto c = forward_case(variant, dtype);
  const Golden& g = c->g;
  Tensor out = c->model.forward(c->in);
  EXPECT_EQ(out.shape(), g["output"].shape());
  return test::rel_max_err(out.to_vector(), g["output"].to_vector());
}

TEST(PixArtParity, AlphaForwardF32) {
  EXPECT_LE(forward_error("alpha", DType::kF32), 1e-4);
}
TEST(PixArtParity, SigmaForwardF32) {
  EXPECT_LE(forward_error("sigma", DType::kF32), 1e-4);
}
TEST(PixArtParity, AlphaForwardBf16) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "no native bf16";
  EXPECT_LE(forward_error("alpha", DType::kBF16), 3e-2);
}
TEST(PixArtParity, SigmaForwardBf16) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "no native bf16";
  EXPECT_LE(forward_error("sigma", DType::kBF16), 3e-2);
}

double loop_error(const std::string& variant, DType dtype) {
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/pixart-" + variant + "-tiny", dtype);
  const std::string file = kData + "/goldens/pixart_" + variant + "_loop.safetensors";
  Golden g = load_golden("pixart_" + variant + "_loop.safetensors");
  g.t["output"] = test::one_frame(g["output"]);  // the loop's latents carry a frame axis
  io::SafeTensorsFile meta(file);
  pipeline::LatentRequest r;
  r.cond.set(models::kText, g["prompt_embeds"]);
  r.cond.set(models::kTextMask, g["prompt_attention_mask"]);
  r.uncond.set(models::kText, g["negative_prompt_embeds"]);
  r.uncond.set(models::kTextMask, g["negative_prompt_attention_mask"]);
  r.latents = g["latents"];
  r.height = std::stoll(meta.metadata().at("height"));
  r.width = std::stoll(meta.metadata().at("width"));
  r.num_inference_steps = std::stoll(meta.metadata().at("steps"));
  r.guidance_scale = std::stod(meta.metadata().at("guidance_scale"));
  Tensor out = pipe.generate_latents(r);
  EXPECT_EQ(out.shape(), g["output"].shape());
  return test::rel_max_err(out.to_vector(), g["output"].to_vector());
}

TEST(PixArtParity, AlphaLoopWithCfgF32) {
  EXPECT_LE(loop_error("alpha", DType::kF32), 1e-3);
}
TEST(PixArtParity, SigmaLoopWithCfgF32) {
  EXPECT_LE(loop_error("sigma", DType::kF32), 1e-3);
}

TEST(PixArtParity, MaskedTokensDoNotMatter) {
  // Changing the embeddings of padded text tokens must not change the output.
  auto c = forward_case("sigma", DType::kF32);
  const Golden& g = c->g;
  Tensor text = g["encoder_hidden_states"].clone();
  auto mask = g["encoder_attention_mask"].to_vector();
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] == 0)
      for (int64_t ch = 0; ch < text.dim(2); ++ch) text.data<float>()[i * text.dim(2) + ch] += 5.0f;
  models::DiTInputs& in = c->in;
  c->cond.set(models::kText, text);
  EXPECT_LE(test::rel_max_err(c->model.forward(in).to_vector(), g["output"].to_vector()), 1e-4);
  c->cond.set(models::kTextMask, Tensor());  // and without the mask they do
  EXPECT_GT(test::rel_max_err(c->model.forward(in).to_vector(), g["output"].to_vector()), 1e-2);
}

}  // namespace
}  // namespace xdit
