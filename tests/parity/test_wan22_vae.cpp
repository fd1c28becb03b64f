// Wan2.2's VAE decoder (AutoencoderKLWan with is_residual and patch_size 2,
// TI2V-5B's: 48 latent channels, 16x space, 4x time) against diffusers
// (tools/goldens/make_wan22_vae.py): a tiny random one decoding 3 latent
// frames of 3 x 5 into 9 frames of 48 x 80, and a batch of two one-frame
// clips — the residual up blocks' DupUp3D shortcuts, the first chunk's
// single time copy, conv_out's 12 channels unpatchified into 2 x 2 pixels;
// f32 within 1e-4 of the largest value. Its weight list equals the file's.
#include <gtest/gtest.h>

#include <set>

#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/wan_vae.h"
#include "test_util.h"
#include "weight_list.h"

namespace xdit::models {
namespace {

const std::string kDir = std::string(XDIT_TEST_DATA) + "/wan22";

WanVaeConfig tiny() {
  return WanVaeConfig::from_json(io::read_json_file(kDir + "/vae/config.json"), "vae");
}

TEST(Wan22Vae, DecodeMatchesDiffusers) {
  const WanVaeConfig c = tiny();
  EXPECT_TRUE(c.residual);
  EXPECT_EQ(c.patch, 2);
  EXPECT_EQ(c.z_dim, 48);
  EXPECT_EQ(c.spatial_factor(), 16);
  EXPECT_EQ(c.temporal_factor(), 4);
  EXPECT_EQ(c.video_channels(), 3);
  io::WeightStore w(kDir + "/vae");
  WanVaeDecoder dec(c, w, DType::kF32);
  auto g = io::read_safetensors_f32(kDir + "/wan22_vae_decode.safetensors");
  for (const char* k : {"", "1"}) {
    SCOPED_TRACE(std::string("clip z") + k);
    const Tensor video = dec.decode(g[std::string("z") + k]);
    const Tensor& want = g[std::string("video") + k];
    ASSERT_EQ(video.shape(), want.shape());
    EXPECT_LE(test::rel_max_err(video.to_vector(), want.to_vector()), 1e-4);
  }
  // bf16 stays close (each layer rounds its inputs).
  WanVaeDecoder half(c, w, DType::kBF16);
  EXPECT_LE(test::rel_max_err(half.decode(g["z"]).to_vector(), g["video"].to_vector()), 0.05);
}

TEST(Wan22Vae, WeightListEqualsTheDecoderPartOfTheFile) {
  io::WeightStore w(kDir + "/vae");
  test::expect_weight_list(tiny().decoder_weight_specs(), w, {"decoder.", "post_quant_conv."});
}

}  // namespace
}  // namespace xdit::models
