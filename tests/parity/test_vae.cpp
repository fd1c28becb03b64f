// AutoencoderKL decoder against diffusers (tools/goldens/make_pixart.py): a
// tiny VAE with channel changes (so conv_shortcut is used), stored sharded.
#include <gtest/gtest.h>

#include "io/json.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "kernels/kernels.h"
#include "models/vae.h"
#include "test_util.h"

namespace xdit {
namespace {

double decode_error(DType dtype) {
  io::ModelFolder mf(std::string(XDIT_MODELS) + "/pixart-alpha-tiny");
  auto cfg = models::VaeConfig::from_json(mf.component_config("vae", "config.json"), "vae");
  io::WeightStore w(mf.component("vae"));
  models::VaeDecoder vae(cfg, w, dtype);
  auto g =
      io::read_safetensors_f32(std::string(XDIT_TEST_DATA) + "/goldens/vae_decoder.safetensors");
  Tensor z = g["latents"].clone();
  for (int64_t i = 0; i < z.numel(); ++i)
    z.data<float>()[i] /= static_cast<float>(cfg.scaling_factor);
  Tensor img = vae.decode(z);
  EXPECT_EQ(img.shape(), g["image"].shape());
  return test::rel_max_err(img.to_vector(), g["image"].to_vector());
}

TEST(VaeDecoder, F32MatchesDiffusers) {
  EXPECT_LE(decode_error(DType::kF32), 1e-4);
}
TEST(VaeDecoder, Bf16) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "no native bf16";
  EXPECT_LE(decode_error(DType::kBF16), 5e-2);
}

TEST(VaeDecoder, ScaleFactorFromConfig) {
  io::ModelFolder mf(std::string(XDIT_MODELS) + "/pixart-alpha-tiny");
  auto cfg = models::VaeConfig::from_json(mf.component_config("vae", "config.json"), "vae");
  EXPECT_EQ(cfg.scale_factor(), 8);
  io::WeightStore w(mf.component("vae"));
  // Every decoder weight the config implies is present, and nothing more is counted.
  size_t decoder_params = 0;
  for (const auto& n : w.names())
    if (n.rfind("decoder.", 0) == 0 || n.rfind("post_quant_conv.", 0) == 0)
      decoder_params += static_cast<size_t>(shape_numel(w.shape(n)));
  EXPECT_EQ(static_cast<int64_t>(decoder_params), cfg.decoder_parameter_count());
}

// FLUX.1 / SD3's VAE layout (tools/goldens/make_vae16.py): 16 latent
// channels, no post_quant_conv, decode(latents / scaling_factor + shift_factor).
TEST(VaeDecoder, SixteenChannelsWithShiftMatchesDiffusers) {
  const std::string dir = std::string(XDIT_TEST_DATA) + "/vae16";
  auto cfg = models::VaeConfig::from_json(io::read_json_file(dir + "/config.json"), dir);
  EXPECT_EQ(cfg.latent_channels, 16);
  EXPECT_FALSE(cfg.use_post_quant_conv);
  EXPECT_NEAR(cfg.shift_factor, 0.1159, 1e-12);
  io::WeightStore w(dir);
  EXPECT_FALSE(w.has("post_quant_conv.weight"));
  auto g =
      io::read_safetensors_f32(std::string(XDIT_TEST_DATA) + "/goldens/vae16_decoder.safetensors");
  for (const DType dt : {DType::kF32, DType::kBF16}) {
    if (dt == DType::kBF16 && !kernels::cpu_has_bf16()) continue;
    models::VaeDecoder vae(cfg, w, dt);
    const Tensor img = vae.decode_latents(g["latents"]);
    EXPECT_EQ(img.shape(), g["image"].shape());
    EXPECT_LE(test::rel_max_err(img.to_vector(), g["image"].to_vector()),
              dt == DType::kF32 ? 1e-4 : 5e-2);
  }
  // Without the shift the image is another one: the shift is applied.
  models::VaeDecoder vae(cfg, w, DType::kF32);
  Tensor z = g["latents"].clone();
  for (int64_t i = 0; i < z.numel(); ++i)
    z.data<float>()[i] /= static_cast<float>(cfg.scaling_factor);
  EXPECT_GT(test::rel_max_err(vae.decode(z).to_vector(), g["image"].to_vector()), 1e-2);
}

TEST(VaeDecoder, UnsupportedLatentStatisticsAreRefusedByName) {
  for (const char* key : {"latents_mean", "latents_std"}) {
    const std::string json =
        std::string(R"({"latent_channels": 16, ")") + key + R"(": [0.1, 0.2]})";
    EXPECT_NE(test::error_message([&] {
                models::VaeConfig::from_json(io::parse_json_text(json, "vae"), "vae/config.json");
              }).find(std::string(key) + " is not supported"),
              std::string::npos);
  }
  EXPECT_EQ(test::error_message([&] {
              models::VaeConfig::from_json(
                  io::parse_json_text(R"({"latents_mean": null, "use_quant_conv": false})", "vae"),
                  "vae/config.json");
            }),
            "(no error)");
}

TEST(VaeDecoder, PostprocessRoundsLikeNumpy) {
  Tensor img = Tensor::from_vector({-1.5f, -1.0f, 0.0f, 1.0f / 255.0f, 1.0f, 2.0f}, {1, 3, 1, 2});
  auto px = models::image_to_rgb8(img);
  // x/2+0.5 → clamp → ×255 → round: 0, 0, 127.5→128, 128, 255, 255 (interleaved HWC)
  EXPECT_EQ(px[0], (std::vector<uint8_t>{0, 128, 255, 0, 128, 255}));
}

}  // namespace
}  // namespace xdit
