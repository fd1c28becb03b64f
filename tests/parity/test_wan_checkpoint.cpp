// Wan's original layout under diffusers' names (models/wan_checkpoint.h),
// on the tiny Wan2.1 written in that layout by the inverse of diffusers'
// converter (tools/goldens/make_wan_gguf.py, which checks the converter
// gives the folder back): every weight from its original tensor, and the
// video from --transformer's GGUF within 1/255 of diffusers' video of the
// same file (WanTransformer3DModel.from_single_file with
// GGUFQuantizationConfig, f32), with CFG over five frames and without over
// one. Wan2.2's two experts refuse one file in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/checkpoint_file.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/original_checkpoint.h"
#include "models/wan_checkpoint.h"
#include "pipeline/pipeline.h"
#include "pipeline_goldens.h"
#include "test_util.h"

namespace xdit {
namespace {

std::string data(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/wan_checkpoint/" + name;
}

std::string folder() {
  return std::string(XDIT_MODELS) + "/wan21-tiny";
}

TEST(WanCheckpoint, OriginalLayoutIsTheFoldersWeights) {
  const io::WeightStore store(folder() + "/transformer");
  const models::OriginalCheckpointWeights w(
      std::make_shared<io::CheckpointFile>(data("wan_tiny_q8_0.gguf")), "Wan",
      models::wan_original_rows);
  int quantized = 0;
  for (const std::string& name : store.names()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(w.has(name));
    const Shape s = store.shape(name);
    const std::vector<float> want = store.get(name, s).to(DType::kF32).to_vector();
    const std::vector<float> got = w.get(name, s).to(DType::kF32).to_vector();
    float most = 0;
    for (float x : want) most = std::max(most, std::abs(x));
    bool same = true;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_LE(std::abs(got[i] - want[i]), most / 127) << i;
      same = same && got[i] == want[i];
    }
    quantized += same ? 0 : 1;
  }
  EXPECT_EQ(quantized, 2);  // the two embedders of whole 32-value rows; the rest F32, exact
  EXPECT_EQ(models::wan_original_rows("blocks.3.attn2.to_out.0.weight")->name,
            "blocks.3.cross_attn.o.weight");
  EXPECT_EQ(models::wan_original_rows("blocks.0.norm2.bias")->name, "blocks.0.norm3.bias");
  EXPECT_EQ(models::wan_original_rows("scale_shift_table")->name, "head.modulation");
  EXPECT_EQ(models::wan_original_rows("blocks.1.scale_shift_table")->name, "blocks.1.modulation");
}

pipeline::ImageRequest request(bool cfg) {
  pipeline::ImageRequest r;  // make_wan_pipeline.py's CASES[1] and CASES[2]
  r.num_inference_steps = 3;
  if (cfg) {
    r.prompts = {"Two cats, sitting on a mat!"};
    r.negative_prompt = "blurry, &lt;low&gt; quality";
    r.height = 32;
    r.width = 48;
    r.num_frames = 6;
    r.guidance_scale = 4.0;
    r.seed = 7;
    r.max_sequence_length = 16;
  } else {
    r.prompts = {"an astronaut riding a horse"};
    r.height = 64;
    r.width = 32;
    r.num_frames = 1;
    r.guidance_scale = 1.0;
    r.seed = 3;
    r.max_sequence_length = 12;
  }
  return r;
}

TEST(WanCheckpoint, VideoFromGgufIsDiffusers) {
  const auto want = io::read_safetensors_f32(data("wan_tiny_q8_0_video.safetensors"));
  pipeline::Pipeline pipe(folder(), DType::kF32);
  pipe.set_transformer_file(data("wan_tiny_q8_0.gguf"));
  for (const bool cfg : {true, false}) {
    SCOPED_TRACE(cfg ? "CFG, 5 frames" : "no CFG, 1 frame");
    test::expect_video_frames(pipe.generate(request(cfg)), want.at(cfg ? "video" : "video_1"));
  }
  const std::string two = test::error_message([&] {
    pipeline::Pipeline(std::string(XDIT_MODELS) + "/wan22-tiny", DType::kF32)
        .set_transformer_file(data("wan_tiny_q8_0.gguf"));
  });
  EXPECT_NE(two.find("two experts"), std::string::npos) << two;
  EXPECT_EQ(two.find('\n'), std::string::npos) << two;
}

}  // namespace
}  // namespace xdit
