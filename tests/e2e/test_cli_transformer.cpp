// xdit generate --transformer FILE and --weights_dtype end to end: the tiny
// FLUX.1 with its transformer from a GGUF of the original layout (or a
// single-file safetensors, or int8 weights) writes the library's image
// (tests/parity/test_flux_checkpoint.cpp: = diffusers'); a file that is no
// GGUF, a truncated one and another model's are one line before any weight
// loads, and write nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "cli_generate.h"
#include "io/png.h"
#include "kernels/linear.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;

std::string gguf(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/flux_checkpoint/" + name;
}

class CliTransformer : public test::GenerateCli {
 protected:
  CliTransformer()
      : GenerateCli("transformer", "flux-schnell-tiny",
                    "--prompt 'a red fox' --height 48 --width 80 --num_inference_steps 3 --seed 3 "
                    "--dtype f32") {}
};

// The library's image of the fixture's request: the transformer from
// `file` (none: the folder's), its float weights kept in `format`.
std::vector<uint8_t> library_image(const std::string& file,
                                   kernels::WeightFormat format = kernels::WeightFormat::kCompute) {
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/flux-schnell-tiny", DType::kF32);
  if (!file.empty()) pipe.set_transformer_file(file);
  pipe.set_weights_format(format);
  pipeline::ImageRequest req;
  req.prompts = {"a red fox"};
  req.height = 48;
  req.width = 80;
  req.num_inference_steps = 3;
  req.seed = 3;
  return pipe.generate(req).rgb.at(0);
}

TEST_F(CliTransformer, GgufGivesTheLibrarysImage) {
  const test::CommandResult r = generate("--transformer '" + gguf("flux_tiny_q8_0.gguf") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(io::read_png(out()).rgb, library_image(gguf("flux_tiny_q8_0.gguf")));
}

// --weights_dtype int8 and q8_0, and a single-file safetensors (= the
// folder): the library's images.
TEST_F(CliTransformer, WeightsDtypeAndSafetensorsGiveTheLibrarysImages) {
  test::CommandResult r = generate("--weights_dtype int8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(io::read_png(out()).rgb, library_image("", kernels::WeightFormat::kInt8));
  r = generate("--weights_dtype q8_0");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto q8_0 = library_image("", kernels::WeightFormat::kQ8_0);
  EXPECT_EQ(io::read_png(out()).rgb, q8_0);
  EXPECT_NE(q8_0, library_image(""));
  r = generate("--transformer '" + gguf("flux_tiny_bf16.safetensors") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(io::read_png(out()).rgb, library_image(""));
  fs::remove(out());
  expect_error("--weights_dtype int4", "--weights_dtype");
}

TEST_F(CliTransformer, BadFilesAreOneLineBeforeAnyWeightLoads) {
  expect_error("--transformer '" + (dir_ / "missing.gguf").string() + "'", "missing.gguf");
  const fs::path cut = dir_ / "cut.gguf";
  fs::copy_file(gguf("flux_tiny_q8_0.gguf"), cut);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  expect_error("--transformer '" + cut.string() + "'", "cut.gguf");
  expect_error("--transformer '" + gguf("rows.json") + "'", "a GGUF (.gguf) or safetensors");
  expect_error("--transformer '" + gguf("flux_tiny_q8_0.gguf") + "'",
               "a checkpoint of another model?", "sd3-tiny");
  expect_error("--transformer '" + gguf("flux_tiny_q8_0.gguf") + "'",
               "FLUX.1, SD3 / SD3.5, Z-Image, Qwen-Image and Wan only so far", "pixart-alpha-tiny");
}

}  // namespace
}  // namespace xdit
