// AutoencoderKL decoder against diffusers (tools/goldens/make_pixart.py): a
// tiny VAE with channel changes (so conv_shortcut is used), stored sharded.
#include <gtest/gtest.h>

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

TEST(VaeDecoder, PostprocessRoundsLikeNumpy) {
  Tensor img = Tensor::from_vector({-1.5f, -1.0f, 0.0f, 1.0f / 255.0f, 1.0f, 2.0f}, {1, 3, 1, 2});
  auto px = models::image_to_rgb8(img);
  // x/2+0.5 → clamp → ×255 → round: 0, 0, 127.5→128, 128, 255, 255 (interleaved HWC)
  EXPECT_EQ(px[0], (std::vector<uint8_t>{0, 128, 255, 0, 128, 255}));
}

}  // namespace
}  // namespace xdit
