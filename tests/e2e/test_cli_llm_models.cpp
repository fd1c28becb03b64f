// xdit generate end to end on the decoder-LLM pipelines' tiny folders
// (Z-Image, Qwen-Image): the PNG is the library's image of the same request
// (tests/parity: = diffusers'), with and without CFG, and from a Z-Image
// GGUF (--transformer);
// `xdit info` describes the Qwen text encoder and tokenizer; sizes refused
// (Z-Image) or floored (Qwen-Image) as diffusers does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli_generate.h"
#include "io/png.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

class CliZImage : public test::GenerateCli {
 protected:
  CliZImage()
      : GenerateCli("zimage", "zimage-tiny",
                    "--prompt 'a red fox in the snow' --height 32 --width 48 "
                    "--num_inference_steps 3 --seed 4 --max_sequence_length 24 --dtype f32") {}
};

// `transformer`: a --transformer file.
std::vector<uint8_t> library_image(const std::string& model, pipeline::ImageRequest r,
                                   const std::string& transformer = "") {
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/" + model, DType::kF32);
  if (!transformer.empty()) pipe.set_transformer_file(transformer);
  return pipe.generate(r).rgb.at(0);
}

pipeline::ImageRequest fox(double guidance) {
  pipeline::ImageRequest r;
  r.prompts = {"a red fox in the snow"};
  r.height = 32;
  r.width = 48;
  r.num_inference_steps = 3;
  r.seed = 4;
  r.max_sequence_length = 24;
  r.guidance_scale = guidance;
  return r;
}

TEST_F(CliZImage, GenerateWritesTheLibrarysImageWithAndWithoutCfg) {
  test::CommandResult r = generate("");
  ASSERT_EQ(r.code, 0) << r.err;
  io::PngImage png = io::read_png(out());
  EXPECT_EQ(png.rgb, library_image("zimage-tiny", fox(pipeline::kDefaultGuidance)));
  std::filesystem::remove(out());
  r = generate("--guidance_scale 1.5 --negative_prompt 'blurry'");
  ASSERT_EQ(r.code, 0) << r.err;
  pipeline::ImageRequest cfg = fox(1.5);
  cfg.negative_prompt = "blurry";
  EXPECT_EQ(io::read_png(out()).rgb, library_image("zimage-tiny", cfg));
  // ZImagePipeline's cfg_truncation and cfg_normalization, from the flags.
  std::filesystem::remove(out());
  r = generate(
      "--guidance_scale 1.5 --negative_prompt 'blurry' --cfg_truncation 0.2 "
      "--cfg_normalization 1.05");
  ASSERT_EQ(r.code, 0) << r.err;
  cfg.cfg_truncation = 0.2;
  cfg.cfg_normalization = 1.05;
  const std::vector<uint8_t> limited = library_image("zimage-tiny", cfg);
  EXPECT_EQ(io::read_png(out()).rgb, limited);
  cfg.cfg_truncation = 1.0;
  cfg.cfg_normalization = 0.0;
  EXPECT_NE(limited, library_image("zimage-tiny", cfg)) << "the options must change the image";
}

// --transformer: a Z-Image GGUF of the original layout
// (tests/parity/test_zimage_checkpoint.cpp: = diffusers' image of it).
TEST_F(CliZImage, TransformerFromAGgufWritesTheLibrarysImage) {
  const std::string gguf = std::string(XDIT_TEST_DATA) + "/zimage_checkpoint/zimage_tiny_q8_0.gguf";
  const test::CommandResult r = generate("--transformer '" + gguf + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<uint8_t> want =
      library_image("zimage-tiny", fox(pipeline::kDefaultGuidance), gguf);
  EXPECT_EQ(io::read_png(out()).rgb, want);
  EXPECT_NE(want, library_image("zimage-tiny", fox(pipeline::kDefaultGuidance)));
}

TEST_F(CliZImage, ASizeOffTheGridAndAnotherFamilysOptionAreOneLine) {
  expect_error("--height 36", "multiples of 8");  // (this VAE: 4 x the patch 2)
  expect_error("--cfg_truncation 0.5", "are Z-Image's", "flux-schnell-tiny");
}

TEST(CliLlmModels, InfoDescribesTheQwenTextSide) {
  const auto dir = test::make_test_dir("xdit_info_llm_");
  for (const char* model : {"zimage-tiny", "qwen-image-tiny"}) {
    const std::string info = (dir / "info.txt").string();
    const test::CommandResult r =
        test::run_command(std::string("sh -c \"'") + XDIT_BINARY + "' info --model '" +
                              XDIT_MODELS + "/" + model + "' > '" + info + "'\"",
                          (dir / "err.txt").string());
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream in(info);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("decoder LLM"), std::string::npos) << text;
    EXPECT_NE(text.find("Qwen2 byte-level BPE"), std::string::npos) << text;
  }
}

TEST(CliLlmModels, QwenImageFloorsASizeAndWritesTheLibrarysImage) {
  const auto dir = test::make_test_dir("xdit_qwen_image_");
  const std::string png = (dir / "out.png").string();
  const test::CommandResult r = test::run_command(
      std::string("env XDIT_QUIET=1 '") + XDIT_BINARY + "' generate --model '" + XDIT_MODELS +
          "/qwen-image-tiny' --prompt 'a red fox' --negative_prompt 'blurry' --height 44 "
          "--width 32 --num_inference_steps 2 --seed 6 --max_sequence_length 24 --dtype f32 -o '" +
          png + "'",
      (dir / "err.txt").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const io::PngImage out = io::read_png(png);
  EXPECT_EQ(out.height, 40);  // floored to a multiple of 8 (this VAE: 4 x 2)
  pipeline::ImageRequest req;
  req.prompts = {"a red fox"};
  req.negative_prompt = "blurry";
  req.height = 44;
  req.width = 32;
  req.num_inference_steps = 2;
  req.seed = 6;
  req.max_sequence_length = 24;
  EXPECT_EQ(out.rgb, library_image("qwen-image-tiny", req));  // true CFG at the default 4
}

}  // namespace
}  // namespace xdit
