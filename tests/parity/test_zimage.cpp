// Z-Image's transformer config (tools/goldens/make_zimage.py's tiny random
// ZImageTransformer2DModel): the weights it implies are the file's, names and
// shapes; the real Turbo config's size; configs xdit does not run refused by
// name. (The model's forward against diffusers comes with the model, issue 47.)
#include <gtest/gtest.h>

#include <set>

#include "io/json.h"
#include "io/weights.h"
#include "models/zimage_config.h"
#include "test_util.h"
#include "weight_list.h"

namespace xdit::models {
namespace {

const std::string kDir = std::string(XDIT_TEST_DATA) + "/zimage/transformer";

TEST(ZImageConfig, WeightListEqualsTheFile) {
  const ZImageConfig c = ZImageConfig::from_json(io::read_json_file(kDir + "/config.json"), kDir);
  EXPECT_EQ(c.head_dim(), 24);
  EXPECT_EQ(c.adaln_dim(), 48);  // min(dim, 256)
  EXPECT_EQ(c.ffn_dim(), 128);
  io::WeightStore w(kDir);
  test::expect_weight_list(c.weight_specs(), w);
  EXPECT_EQ(c.parameter_count(), w.parameter_count());
}

TEST(ZImageConfig, TurboSizeAndPadding) {
  const ZImageConfig t = ZImageConfig::turbo();
  EXPECT_EQ(t.head_dim(), 128);
  EXPECT_EQ(t.ffn_dim(), 10240);
  // Z-Image-Turbo's transformer: 6.15 B parameters.
  EXPECT_NEAR(static_cast<double>(t.parameter_count()), 6.15e9, 0.05e9);
  EXPECT_EQ(ZImageConfig::padded(24), 32);
  EXPECT_EQ(ZImageConfig::padded(64), 64);
  EXPECT_EQ(ZImageConfig::padded(1), 32);
}

TEST(ZImageConfig, UnsupportedConfigsAreRefusedByName) {
  const auto error_of = [](const std::string& extra) {
    return test::error_message([&] {
      ZImageConfig::from_json(
          io::parse_json_text(R"({"dim": 48, "n_heads": 2, "axes_dims": [8, 8, 8])" + extra + "}",
                              "c"),
          "transformer");
    });
  };
  EXPECT_EQ(error_of(""), "(no error)");
  EXPECT_NE(error_of(R"(, "all_patch_size": [2, 4])").find("lists 2 patch sizes"),
            std::string::npos);
  EXPECT_NE(error_of(R"(, "siglip_feat_dim": 1152)").find("Omni"), std::string::npos);
  EXPECT_NE(error_of(R"(, "n_kv_heads": 1)").find("n_kv_heads 1 differs"), std::string::npos);
  EXPECT_NE(error_of(R"(, "axes_dims": [8, 8, 6])").find("add up to 22"), std::string::npos);
}

}  // namespace
}  // namespace xdit::models
