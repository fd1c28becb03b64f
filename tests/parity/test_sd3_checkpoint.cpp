// SD3 / SD3.5 transformers from single-file checkpoints of Stability AI's
// original (MMDiT) layout (models/sd3_checkpoint.h): the tiny SD3.5 (dual
// attention, qk RMSNorm) written in that layout by
// tools/goldens/make_sd3_gguf.py, whose inverse diffusers' own converter
// checked. Weights bit for bit from a single-file safetensors; the image
// of the Q8_0 GGUF against diffusers loading the same file
// (from_single_file), with and without a LoRA merged into it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/safetensors.h"
#include "lora_request.h"
#include "models/sd3_checkpoint.h"
#include "nn/lora.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

std::string data(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/sd3_checkpoint/" + name;
}

std::string folder() {
  return std::string(XDIT_MODELS) + "/sd35-tiny";
}

models::OriginalCheckpointWeights open(const std::string& file, int64_t inner, int64_t last) {
  return models::OriginalCheckpointWeights(
      std::make_shared<io::CheckpointFile>(data(file)), "SD3",
      [inner, last](const std::string& n) { return models::sd3_original_rows(n, inner, last); });
}

TEST(Sd3Checkpoint, OriginalLayoutGivesTheFoldersWeights) {
  const io::WeightStore store(folder() + "/transformer");
  const int64_t inner = store.shape("transformer_blocks.0.attn.to_q.weight")[0], last = 2;
  ASSERT_TRUE(store.has("transformer_blocks.2.norm1_context.linear.weight"));
  ASSERT_FALSE(store.has("transformer_blocks.3.norm1.linear.weight"));
  for (const char* file : {"sd35_tiny_f32.safetensors", "sd35_tiny_q8_0.gguf"}) {
    SCOPED_TRACE(file);
    const bool exact = std::string(file).find("f32") != std::string::npos;
    const auto w = open(file, inner, last);
    int rounded = 0;
    for (const std::string& name : store.names()) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(w.has(name));
      const Shape s = store.shape(name);
      ASSERT_EQ(w.shape(name), s);
      const std::vector<float> want = store.get(name, s).to(DType::kF32).to_vector();
      const std::vector<float> got = w.get(name, s).to(DType::kF32).to_vector();
      float most = 0;
      for (float x : want) most = std::max(most, std::abs(x));
      bool same = true;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_LE(std::abs(got[i] - want[i]), exact ? 0.0f : most / 127) << i;
        same = same && got[i] == want[i];
      }
      rounded += same ? 0 : 1;
    }
    if (!exact) {
      EXPECT_GT(rounded, 50);  // Q8_0 and F16 matrices round
    }
  }
  // Names SD3 has not, or a block past the last.
  for (const char* n :
       {"transformer_blocks.0.attn.norm_q.bias", "single_transformer_blocks.0.proj_out.weight",
        "transformer_blocks.3.attn.to_q.weight", "x_embedder.weight"})
    EXPECT_FALSE(models::sd3_original_rows(n, inner, last).has_value()) << n;
  // The last block's context modulation and the final one: halves swapped.
  EXPECT_TRUE(
      models::sd3_original_rows("transformer_blocks.2.norm1_context.linear.bias", inner, last)
          ->swap_halves);
  EXPECT_FALSE(
      models::sd3_original_rows("transformer_blocks.1.norm1_context.linear.bias", inner, last)
          ->swap_halves);
  EXPECT_TRUE(models::sd3_original_rows("norm_out.linear.weight", inner, last)->swap_halves);
}

// xdit generate --model sd35-tiny --transformer FILE: diffusers' image of
// the same GGUF within 1/255, its Q8_0 matrices kept in blocks; the F32
// single file gives the folder's image exactly.
TEST(Sd3Checkpoint, ImageFromGgufIsDiffusers) {
  const auto want = io::read_safetensors_f32(data("sd35_tiny_q8_0_images.safetensors"));
  const pipeline::ImageRequest r = test::sd35_lora_request();
  const auto image = [&](const std::string& file) {
    pipeline::Pipeline pipe(folder(), DType::kF32);
    if (!file.empty()) pipe.set_transformer_file(data(file));
    return pipe.generate(r).rgb;
  };
  const auto q8 = image("sd35_tiny_q8_0.gguf");
  EXPECT_LE(test::worst_pixel_difference(q8, want.at("image").data<float>()), 1);
  const auto base = image("");
  EXPECT_EQ(image("sd35_tiny_f32.safetensors"), base);
  EXPECT_NE(q8, base);  // (Q8_0 and F16 round the weights)
}

// A LoRA merged into a --transformer file's weights: diffusers' image of
// the GGUF with the LoRA (peft beside its layers) within 1/255; the
// matrices the LoRA leaves alone stay in their Q8_0 blocks.
TEST(Sd3Checkpoint, LoraMergesIntoTheFile) {
  const auto want = io::read_safetensors_f32(data("sd35_tiny_q8_0_images.safetensors"));
  const auto lora = [] {
    return std::vector<nn::LoraUse>{
        {std::make_shared<nn::LoraFile>(std::string(XDIT_TEST_DATA) + "/lora/sd35_a.safetensors"),
         1.0}};
  };
  pipeline::Pipeline pipe(folder(), DType::kF32);
  pipe.set_transformer_file(data("sd35_tiny_q8_0.gguf"));
  pipe.set_loras(lora());
  const auto got = pipe.generate(test::sd35_lora_request()).rgb;
  EXPECT_LE(test::worst_pixel_difference(got, want.at("lora_a").data<float>()), 1);
  EXPECT_GT(test::worst_pixel_difference(got, want.at("image").data<float>()), 1)
      << "the LoRA must change the picture";
  pipeline::Pipeline folder_lora(folder(), DType::kF32);
  folder_lora.set_loras(lora());
  folder_lora.load();
  EXPECT_LT(pipe.linear_weight_bytes(), folder_lora.linear_weight_bytes());
}

}  // namespace
}  // namespace xdit
