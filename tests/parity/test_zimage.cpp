// Z-Image's transformer (tools/goldens/make_zimage.py's tiny random
// ZImageTransformer2DModel): the weights its config implies are the file's,
// names and shapes; the real Turbo config's size; configs xdit does not run
// refused by name; the forward against diffusers on two-item calls whose
// captions differ in length (the shorter masked), at a token count on the
// 32 grid and one off it, in f32 and bf16; one item alone equals its row of
// the batch; a model split into pipeline stages equals the whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "kernels/kernels.h"
#include "models/zimage.h"
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

// Case k of the golden file as the engine's inputs: the two captions
// zero-padded to the longer, with a text mask.
struct Case {
  Tensor latents;
  std::vector<float> t;
  Conditioning cond;
  Tensor want;
};

Case load_case(std::map<std::string, Tensor>& g, int k) {
  const std::string n = std::to_string(k);
  Case c;
  c.latents = g["latents" + n];
  c.t = g["t" + n].to_vector();
  c.want = g["out" + n];
  const Tensor &a = g["cap" + n + "_0"], &b = g["cap" + n + "_1"];
  const int64_t L = std::max(a.dim(0), b.dim(0)), F = a.dim(1);
  Tensor text = Tensor::zeros({2, L, F});
  Tensor mask = Tensor::zeros({2, L});
  for (int i = 0; i < 2; ++i) {
    const Tensor& cap = i == 0 ? a : b;
    std::copy_n(cap.data<float>(), cap.numel(), text.data<float>() + i * L * F);
    std::fill_n(mask.data<float>() + i * L, cap.dim(0), 1.0f);
  }
  c.cond.set(kText, std::move(text));
  c.cond.set(kTextMask, std::move(mask));
  return c;
}

Tensor run(DiT& model, const Case& c) {
  DiTInputs in;
  in.latents = &c.latents;
  in.timesteps = c.t;
  in.cond = &c.cond;
  return model.forward(in);
}

ZImageConfig tiny_config() {
  return ZImageConfig::from_json(io::read_json_file(kDir + "/config.json"), kDir);
}

double forward_error(DType dt, int k) {
  io::WeightStore w(kDir);
  ZImageTransformer model(tiny_config(), w, dt);
  auto g =
      io::read_safetensors_f32(std::string(XDIT_TEST_DATA) + "/zimage/zimage_forward.safetensors");
  const Case c = load_case(g, k);
  const Tensor out = run(model, c);  // [B, C, H, W]; the golden's [B, C, 1, H, W]
  EXPECT_EQ(out.numel(), c.want.numel());
  // The model returns the velocity the pipeline steps with: diffusers' negated.
  std::vector<float> want = c.want.to_vector();
  for (float& v : want) v = -v;
  return test::rel_max_err(out.to_vector(), want);
}

TEST(ZImage, ForwardMatchesDiffusersWithCaptionsOfTwoLengths) {
  // Case 0: 24 image tokens (8 pads), captions of 5 and 37 tokens (32 and 64
  // padded: the first masked past 32); case 1: 64 tokens (no pads), 32 and 9.
  EXPECT_LE(forward_error(DType::kF32, 0), 1e-4);
  EXPECT_LE(forward_error(DType::kF32, 1), 1e-4);
}

TEST(ZImage, Bf16Forward) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  EXPECT_LE(forward_error(DType::kBF16, 0), 3e-2);
  EXPECT_LE(forward_error(DType::kBF16, 1), 3e-2);
}

TEST(ZImage, OneItemAloneEqualsItsRowOfTheBatch) {
  io::WeightStore w(kDir);
  ZImageTransformer model(tiny_config(), w, DType::kF32);
  auto g =
      io::read_safetensors_f32(std::string(XDIT_TEST_DATA) + "/zimage/zimage_forward.safetensors");
  const Case both = load_case(g, 0);
  // Item 0 (the short caption) alone: its 5 tokens, no mask, no padding.
  Case one;
  const Tensor& lat = both.latents;
  const int64_t plane = lat.numel() / 2;
  one.latents = Tensor::empty({1, lat.dim(1), lat.dim(2), lat.dim(3), lat.dim(4)});
  std::copy_n(lat.data<float>(), plane, one.latents.data<float>());
  one.t = {both.t[0]};
  one.cond.set(kText, g["cap0_0"].reshape({1, g["cap0_0"].dim(0), g["cap0_0"].dim(1)}));
  const Tensor alone = run(model, one);
  const Tensor batch = run(model, both);
  const std::vector<float> b = batch.to_vector(), a = alone.to_vector();
  EXPECT_LE(test::rel_max_err(a, std::vector<float>(b.begin(), b.begin() + plane)), 1e-5);
}

TEST(ZImage, PipelineStagesEqualTheWholeModel) {
  io::WeightStore w(kDir);
  const ZImageConfig cfg = tiny_config();  // 3 flat blocks: the noise refiner, 2 layers
  auto g =
      io::read_safetensors_f32(std::string(XDIT_TEST_DATA) + "/zimage/zimage_forward.safetensors");
  const Case c = load_case(g, 1);
  ZImageTransformer whole(cfg, w, DType::kF32);
  const Tensor want = run(whole, c);
  ZImageTransformer first(cfg, w, DType::kF32, DiTStage(0, 1, true, false));
  ZImageTransformer last(cfg, w, DType::kF32, DiTStage(1, -1, false, true));
  const Tensor hidden = run(first, c);
  DiTInputs in;
  in.latents = &c.latents;
  in.timesteps = c.t;
  in.cond = &c.cond;
  const Tensor got = last.forward(in, &hidden);
  EXPECT_EQ(test::rel_max_err(got.to_vector(), want.to_vector()), 0.0);
}

}  // namespace
}  // namespace xdit::models
