// SD3Transformer2DModel against diffusers (tools/goldens/make_sd3.py): a tiny
// SD3-medium-like model and an SD3.5-medium-like one (qk RMSNorm, dual
// attention), one forward on the pipeline's inputs — and with skip_layers —
// in f32 ≤ 1e-4 and bf16 ≤ 3e-2; config checks.
#include <gtest/gtest.h>

#include <map>

#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "kernels/kernels.h"
#include "models/sd3.h"
#include "parity/pipeline_goldens.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit::models {
namespace {

double forward_error(const std::string& name, DType dt, bool skip) {
  const std::string dir = std::string(XDIT_MODELS) + "/" + name + "-tiny/transformer";
  const auto cfg = SD3Config::from_json(io::read_json_file(dir + "/config.json"), dir);
  io::WeightStore w(dir);
  w.check_shapes(cfg.weight_specs());
  SD3Transformer model(cfg, w, dt);
  auto g = io::read_safetensors_f32(std::string(XDIT_TEST_DATA) + "/goldens/" + name +
                                    "_forward.safetensors");
  DiTInputs in;
  Conditioning cond;
  const Tensor latents = test::one_frame(g["latents"]);
  in.latents = &latents;
  in.timesteps = g["timestep"].to_vector();
  cond.set(kText, g["text"]);
  cond.set(kPooled, g["pooled"]);
  in.cond = &cond;
  if (skip) in.skip_blocks = {1};
  const Tensor out = model.forward(in);
  const Tensor& want = g[skip ? "output_skip" : "output"];
  EXPECT_EQ(out.shape(), want.shape());
  return test::rel_max_err(out.to_vector(), want.to_vector());
}

TEST(SD3, ForwardMatchesDiffusers) {
  EXPECT_LE(forward_error("sd3", DType::kF32, false), 1e-4);
  EXPECT_LE(forward_error("sd3", DType::kF32, true), 1e-4);
}

TEST(SD3, SD35WithQkNormAndDualAttentionMatchesDiffusers) {
  EXPECT_LE(forward_error("sd35", DType::kF32, false), 1e-4);
  EXPECT_LE(forward_error("sd35", DType::kF32, true), 1e-4);
}

TEST(SD3, Bf16Forward) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  EXPECT_LE(forward_error("sd3", DType::kBF16, false), 3e-2);
  EXPECT_LE(forward_error("sd35", DType::kBF16, false), 3e-2);
}

TEST(SD3, ConfigChecks) {
  const auto parse = [](const std::string& text) {
    return SD3Config::from_json(io::parse_json_text(text, "config"), "config");
  };
  EXPECT_EQ(parse(R"({"dual_attention_layers": [0, 2], "num_layers": 4})").dual(2), true);
  const auto& message = test::error_message;
  EXPECT_NE(message([&] { parse(R"({"qk_norm": "layer_norm"})"); }).find("qk_norm"),
            std::string::npos);
  EXPECT_NE(message([&] {
              parse(R"({"num_layers": 2, "dual_attention_layers": [2]})");
            }).find("dual_attention_layers"),
            std::string::npos);
  EXPECT_NE(
      message([&] { parse(R"({"caption_projection_dim": 100})"); }).find("caption_projection_dim"),
      std::string::npos);
  EXPECT_NE(message([&] {
              parse(R"({"_class_name": "FluxTransformer2DModel"})");
            }).find("not SD3Transformer2DModel"),
            std::string::npos);
}

// StableDiffusion3Pipeline from the prompt: the embeddings (CLIP-L ⊕ CLIP-G
// penultimate features padded, then T5; pooled ⊕) equal diffusers'
// encode_prompt, and the PNG bytes are within 1/255 of diffusers' image — CFG,
// no CFG, and skip-layer guidance.
void expect_prompt_to_image(const std::string& name) {
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/" + name + "-tiny", DType::kF32);
  pipe.set_keep_text_encoder(true);
  test::for_each_pipeline_case(name, [&](const std::string& c, const io::Json& m,
                                         std::map<std::string, Tensor>& g) {
    pipeline::ImageRequest r = test::image_request(m);
    if (!m["skip_guidance_layers"].is_null()) {
      r.skip_layer_guidance.layers = m["skip_guidance_layers"].get<std::vector<int64_t>>();
      r.skip_layer_guidance.scale = m["skip_layer_guidance_scale"].get<double>();
      r.skip_layer_guidance.start = m["skip_layer_guidance_start"].get<double>();
      r.skip_layer_guidance.stop = m["skip_layer_guidance_stop"].get<double>();
    }
    const pipeline::Plan plan = pipe.plan(r);
    const pipeline::PromptEmbeddings e = pipe.encode_prompts(plan);
    EXPECT_LE(test::rel_max_err(e.cond.at(kText).to_vector(), g[c + ".prompt_embeds"].to_vector()),
              1e-4);
    EXPECT_LE(test::rel_max_err(e.cond.at(kPooled).to_vector(),
                                g[c + ".pooled_prompt_embeds"].to_vector()),
              1e-4);
    if (plan->guidance_scale > 1) {
      EXPECT_LE(test::rel_max_err(e.uncond.at(kText).to_vector(),
                                  g[c + ".negative_prompt_embeds"].to_vector()),
                1e-4);
    }
    const pipeline::ImageResult out = pipe.generate(plan);
    const Tensor& want = g[c + ".image"];
    ASSERT_EQ(out.height, want.dim(2));
    ASSERT_EQ(out.width, want.dim(3));
    EXPECT_LE(
        test::worst_pixel_difference(out.rgb[0], want.data<float>(), want.dim(2), want.dim(3)), 1)
        << "largest per-pixel difference (of 255)";
  });
}

TEST(SD3Pipeline, PromptToImageMatchesDiffusers) {
  expect_prompt_to_image("sd3");
}

TEST(SD3Pipeline, SD35WithSkipLayerGuidanceMatchesDiffusers) {
  expect_prompt_to_image("sd35");
}

}  // namespace
}  // namespace xdit::models
