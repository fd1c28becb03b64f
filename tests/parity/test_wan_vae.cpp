// AutoencoderKLWan's decoder against diffusers (tools/goldens/make_wan_vae.py):
// a tiny random VAE of Wan's structure (8x space, 4x time, mid-block
// attention) decoding 3 latent frames of 4 x 6 into 9 frames of 32 x 48,
// frame by frame with the causal cache; f32 within 1e-4 of the largest
// value. Its weight list equals the file's, and its config checks name keys.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/wan_vae.h"
#include "test_util.h"
#include "weight_list.h"

namespace xdit::models {
namespace {

const std::string kDir = std::string(XDIT_TEST_DATA) + "/wan";

WanVaeConfig tiny() {
  return WanVaeConfig::from_json(io::read_json_file(kDir + "/vae/config.json"), "vae");
}

TEST(WanVae, DecodeMatchesDiffusers) {
  io::WeightStore w(kDir + "/vae");
  WanVaeDecoder dec(tiny(), w, DType::kF32);
  auto g = io::read_safetensors_f32(kDir + "/wan_vae_decode.safetensors");
  const Tensor video = dec.decode(g["z"]);
  ASSERT_EQ(video.shape(), g["video"].shape());
  EXPECT_LE(test::rel_max_err(video.to_vector(), g["video"].to_vector()), 1e-4);
  // Decoding again starts from a fresh cache: the same video.
  EXPECT_EQ(dec.decode(g["z"]).to_vector(), video.to_vector());
}

// WanPipeline's de-normalisation: latents / (1 / std) + mean per channel.
TEST(WanVae, DecodeLatentsDenormalisesPerChannel) {
  const WanVaeConfig c = tiny();
  io::WeightStore w(kDir + "/vae");
  WanVaeDecoder dec(c, w, DType::kF32);
  auto g = io::read_safetensors_f32(kDir + "/wan_vae_decode.safetensors");
  const Tensor& lat = g["z"];
  Tensor z = lat.clone();
  const int64_t per = z.numel() / c.z_dim;
  for (int64_t ch = 0; ch < c.z_dim; ++ch)
    for (int64_t i = 0; i < per; ++i) {
      float& v = z.data<float>()[ch * per + i];
      v = v / (1.0f / static_cast<float>(c.latents_std[ch])) +
          static_cast<float>(c.latents_mean[ch]);
    }
  EXPECT_EQ(dec.decode_latents(lat).to_vector(), dec.decode(z).to_vector());
  try {
    dec.decode(Tensor::zeros({1, c.z_dim, 0, 4, 6}));
    FAIL() << "accepted no frames";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least one latent frame"), std::string::npos);
  }
}

TEST(WanVae, FramesAndFactors) {
  const WanVaeConfig c = tiny();
  EXPECT_EQ(c.spatial_factor(), 8);
  EXPECT_EQ(c.temporal_factor(), 4);
  EXPECT_EQ(c.frames(1), 1);
  EXPECT_EQ(c.frames(21), 81);
}

TEST(WanVae, WeightListEqualsTheDecoderPartOfTheFile) {
  io::WeightStore w(kDir + "/vae");
  test::expect_weight_list(tiny().decoder_weight_specs(), w, {"decoder.", "post_quant_conv."});
}

TEST(WanVae, UnsupportedConfigsAreRefusedByName) {
  const auto error_of = [](const std::string& extra) {
    try {
      WanVaeConfig::from_json(io::parse_json_text(R"({"_class_name": "AutoencoderKLWan",
          "latents_mean": [0, 0], "latents_std": [1, 2], "z_dim": 2)" +
                                                      extra + "}",
                                                  "c"),
                              "vae");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error_of(""), "(accepted)");
  // Wan2.2's residual VAE: conv_out's channels must be whole patches, the
  // stated spatial factor the one its levels and patch make.
  EXPECT_EQ(error_of(R"(, "is_residual": true)"), "(accepted)");
  EXPECT_NE(error_of(R"(, "patch_size": 2)").find("out_channels 3 are not the video's channels"),
            std::string::npos);
  EXPECT_EQ(error_of(R"(, "patch_size": 2, "out_channels": 12, "scale_factor_spatial": 16)"),
            "(accepted)");
  EXPECT_NE(error_of(R"(, "patch_size": 2, "out_channels": 12, "scale_factor_spatial": 8)")
                .find("scale_factor_spatial 8 is not the 16"),
            std::string::npos);
  EXPECT_NE(error_of(R"(, "temperal_downsample": [true])").find("temperal_downsample"),
            std::string::npos);
  EXPECT_NE(error_of(R"(, "latents_std": [1, 0])").find("latents_std"), std::string::npos);
}

}  // namespace
}  // namespace xdit::models
