// Z-Image's original layout under diffusers' names
// (models/zimage_checkpoint.h), on the tiny Z-Image written in that layout
// by the inverse of diffusers' converter (tools/goldens/make_zimage_gguf.py,
// which checks the converter gives the folder back): every weight from its
// original tensor and rows (a fused qkv's thirds), exactly from a BF16
// single-file safetensors and within the quantization step from a Q8_0
// GGUF; the pipeline with --transformer's GGUF gives diffusers' image of
// the same file (ZImageTransformer2DModel.from_single_file with
// GGUFQuantizationConfig, f32) within 1/255, with and without CFG.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/checkpoint_file.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/original_checkpoint.h"
#include "models/zimage_checkpoint.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

std::string data(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/zimage_checkpoint/" + name;
}

std::string folder() {
  return std::string(XDIT_MODELS) + "/zimage-tiny";
}

TEST(ZImageCheckpoint, OriginalLayoutIsTheFoldersWeights) {
  const io::WeightStore store(folder() + "/transformer");
  const int64_t dim = store.shape("x_pad_token")[1];
  for (const char* file : {"zimage_tiny_bf16.safetensors", "zimage_tiny_q8_0.gguf"}) {
    SCOPED_TRACE(file);
    const bool bf16 = std::string(file).find("bf16") != std::string::npos;
    const models::OriginalCheckpointWeights w(
        std::make_shared<io::CheckpointFile>(data(file)), "Z-Image",
        [dim](const std::string& n) { return models::zimage_original_rows(n, dim); });
    int quantized = 0;
    for (const std::string& name : store.names()) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(w.has(name));
      const Shape s = store.shape(name);
      Tensor want_t = store.get(name, s);
      if (bf16) want_t = want_t.to(DType::kBF16);  // the file's values: the folder's, rounded
      const std::vector<float> want = want_t.to(DType::kF32).to_vector();
      const std::vector<float> got = w.get(name, s).to(DType::kF32).to_vector();
      float most = 0;
      for (float x : want) most = std::max(most, std::abs(x));
      bool same = true;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_LE(std::abs(got[i] - want[i]), bf16 ? 0.0f : most / 127) << i;
        same = same && got[i] == want[i];
      }
      quantized += same ? 0 : 1;
    }
    if (!bf16) {
      EXPECT_GE(quantized, 8);  // the matrices of whole 32-value rows
    }
  }
  // Names the converter does not produce: none.
  EXPECT_FALSE(models::zimage_original_rows("all_x_embedder.4-1.weight", dim).has_value());
  const auto k = models::zimage_original_rows("layers.1.attention.to_k.weight", dim);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->name, "layers.1.attention.qkv.weight");
  EXPECT_EQ(k->begin, dim);
  EXPECT_EQ(k->count, dim);
}

pipeline::ImageRequest request(bool cfg) {
  pipeline::ImageRequest r;  // make_zimage_pipeline.py's CASES[0] and CASES[1]
  if (cfg) {
    r.prompts = {"Two cats, sitting on a mat under the warm afternoon sun!"};
    r.negative_prompt = "blurry";
    r.height = 32;
    r.width = 64;
    r.num_inference_steps = 3;
    r.guidance_scale = 2.5;
    r.seed = 7;
    r.max_sequence_length = 40;
  } else {
    r.prompts = {"a red fox in the snow"};
    r.height = 64;
    r.width = 48;
    r.num_inference_steps = 4;
    r.guidance_scale = 0.0;
    r.seed = 0;
    r.max_sequence_length = 24;
  }
  return r;
}

TEST(ZImageCheckpoint, ImageFromGgufIsDiffusers) {
  const auto want = io::read_safetensors_f32(data("zimage_tiny_q8_0_image.safetensors"));
  pipeline::Pipeline pipe(folder(), DType::kF32), plain(folder(), DType::kF32);
  pipe.set_transformer_file(data("zimage_tiny_q8_0.gguf"));
  pipe.load();
  plain.load();
  // Its Q8_0 matrices stay in their blocks.
  EXPECT_LT(pipe.linear_weight_bytes(), plain.linear_weight_bytes());
  for (const bool cfg : {false, true}) {
    SCOPED_TRACE(cfg ? "CFG" : "no CFG");
    const auto got = pipe.generate(request(cfg)).rgb;
    EXPECT_LE(test::worst_pixel_difference(got, want.at(cfg ? "cfg_image" : "image").data<float>()),
              1);
    EXPECT_NE(got, plain.generate(request(cfg)).rgb);  // (Q8_0 rounds the weights)
  }
  // Another model's file: one line before any weight is read.
  const std::string flux = test::error_message([&] {
    pipeline::Pipeline(folder(), DType::kF32)
        .set_transformer_file(std::string(XDIT_TEST_DATA) + "/flux_checkpoint/flux_tiny_q8_0.gguf");
  });
  EXPECT_NE(flux.find("a checkpoint of another model?"), std::string::npos) << flux;
  EXPECT_EQ(flux.find('\n'), std::string::npos) << flux;
}

}  // namespace
}  // namespace xdit
