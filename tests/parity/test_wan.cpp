// WanTransformer3DModel against diffusers (tools/goldens/make_wan.py): a tiny
// random model (2 heads of 12, rotary axes 4 / 4 / 4, ffn 40, 3 blocks) on 3
// frames of 6 x 10 latents, two timesteps and zero-padded text; f32 within
// 1e-4, bf16 within 3e-2. Its weight list equals the file's, and the
// configurations it does not cover are refused by name.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/wan.h"
#include "test_util.h"
#include "weight_list.h"

namespace xdit::models {
namespace {

const std::string kDir = std::string(XDIT_TEST_DATA) + "/wan";

WanConfig tiny_config() {
  return WanConfig::from_json(io::read_json_file(kDir + "/transformer/config.json"), "wan");
}

// The golden's inputs as a call takes them, and its output.
struct Golden {
  std::map<std::string, Tensor> g = io::read_safetensors_f32(kDir + "/wan_forward.safetensors");
  Conditioning cond;
  DiTInputs in;
  Golden() {
    in.latents = &g["latents"];
    in.timesteps = g["timesteps"].to_vector();
    cond.set(kText, g["text"]);
    in.cond = &cond;
  }
};

double forward_error(DType dtype) {
  io::WeightStore w(kDir + "/transformer");
  WanTransformer model(tiny_config(), w, dtype);
  Golden g;
  const Tensor out = model.forward(g.in);
  EXPECT_EQ(out.numel(), g.g["out"].numel());
  return test::rel_max_err(out.to_vector(), g.g["out"].to_vector());
}

TEST(Wan, ForwardMatchesDiffusers) {
  EXPECT_LE(forward_error(DType::kF32), 1e-4);
}

TEST(Wan, Bf16ForwardStaysClose) {
  EXPECT_LE(forward_error(DType::kBF16), 3e-2);
}

TEST(Wan, WeightListEqualsTheFile) {
  const WanConfig c = tiny_config();
  EXPECT_EQ(c.rope_axes(), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_TRUE(c.spec().video);
  io::WeightStore w(kDir + "/transformer");
  test::expect_weight_list(c.weight_specs(), w);
  EXPECT_EQ(WanConfig::t2v_1_3b().rope_axes(), (std::vector<int64_t>{44, 42, 42}));
}

TEST(Wan, UnsupportedConfigsAreRefusedByName) {
  const auto error_of = [](const std::string& extra) {
    try {
      WanConfig::from_json(
          io::parse_json_text(R"({"_class_name": "WanTransformer3DModel")" + extra + "}", "c"),
          "cfg");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error_of(""), "(accepted)");
  EXPECT_NE(error_of(R"(, "image_dim": 1280)").find("image_dim"), std::string::npos);
  EXPECT_NE(error_of(R"(, "added_kv_proj_dim": 5120)").find("I2V"), std::string::npos);
  EXPECT_NE(error_of(R"(, "patch_size": [2, 2, 2])").find("patch_size"), std::string::npos);
  EXPECT_NE(error_of(R"(, "qk_norm": "rms_norm")").find("qk_norm"), std::string::npos);
  EXPECT_NE(error_of(R"(, "attention_head_dim": 5)").find("attention_head_dim"), std::string::npos);
}

TEST(Wan, TooManyFramesForTheRotaryTableIsNamed) {
  WanConfig c = tiny_config();
  c.rope_max_seq_len = 2;  // the golden's 3 frames no longer fit
  io::WeightStore w(kDir + "/transformer");
  WanTransformer model(c, w, DType::kF32);
  Golden g;
  try {
    model.forward(g.in);
    FAIL() << "accepted 3 frames with a 2-position table";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rotary table covers 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace xdit::models
