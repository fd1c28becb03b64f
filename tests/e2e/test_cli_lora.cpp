// xdit generate --lora end to end: two LoRAs at their scales give the
// library's image (= diffusers', tests/parity/test_lora.cpp) and name
// themselves in the PNG text; every bad file, scale or model is one line
// before any weight loads, and writes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_generate.h"
#include "io/png.h"
#include "nn/lora.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;

std::string lora(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/lora/" + name;
}

class CliLora : public test::GenerateCli {
 protected:
  CliLora()
      : GenerateCli("lora", "flux-schnell-tiny",
                    "--prompt 'a red fox' --height 48 --width 80 --num_inference_steps 4 --seed 3 "
                    "--dtype f32") {}
};

TEST_F(CliLora, TwoLorasAtTheirScalesAreTheLibrarysImage) {
  const test::CommandResult r = generate("--lora '" + lora("flux_a.safetensors") +
                                         ":0.7' --lora '" + lora("flux_b.safetensors") + ":-0.4'");
  ASSERT_EQ(r.code, 0) << r.err;
  const io::PngImage png = io::read_png(out());
  EXPECT_EQ(png.text.at("lora"), "flux_a.safetensors:0.7, flux_b.safetensors:-0.4");
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/flux-schnell-tiny", DType::kF32);
  pipe.set_loras({{std::make_shared<nn::LoraFile>(lora("flux_a.safetensors")), 0.7},
                  {std::make_shared<nn::LoraFile>(lora("flux_b.safetensors")), -0.4}});
  pipeline::ImageRequest req;
  req.prompts = {"a red fox"};
  req.height = 48;
  req.width = 80;
  req.num_inference_steps = 4;
  req.seed = 3;
  const pipeline::ImageResult want = pipe.generate(req);
  EXPECT_EQ(test::worst_pixel_difference(want.rgb.at(0), png.rgb), 0);
  // Without a scale: 1.
  fs::remove(out());
  ASSERT_EQ(generate("--lora '" + lora("flux_a.safetensors") + "'").code, 0);
  EXPECT_EQ(io::read_png(out()).text.at("lora"), "flux_a.safetensors:1");
}

// --lora_mode side: the same LoRAs beside the weights (serve's side paths)
// give the merged image within 1/255 (f32: the same sums in another order),
// text-encoder adapters (flux_te: the transformer and CLIP) included, and
// label the PNG the same way.
TEST_F(CliLora, SidePathsGiveTheMergedImage) {
  for (const std::string& loras : {"--lora '" + lora("flux_a.safetensors") + ":0.7' --lora '" +
                                       lora("flux_b.safetensors") + ":-0.4'",
                                   "--lora '" + lora("flux_te.safetensors") + ":0.8'"}) {
    SCOPED_TRACE(loras);
    fs::remove(out());
    ASSERT_EQ(generate(loras).code, 0);
    const io::PngImage merged = io::read_png(out());
    fs::remove(out());
    const test::CommandResult r = generate(loras + " --lora_mode side");
    ASSERT_EQ(r.code, 0) << r.err;
    const io::PngImage side = io::read_png(out());
    EXPECT_LE(test::worst_pixel_difference(merged.rgb, side.rgb), 1);
    EXPECT_EQ(side.text.at("lora"), merged.text.at("lora"));
  }
  fs::remove(out());
  expect_error(
      "--lora '" + lora("flux_a.safetensors") + "' --lora_mode side --lora_ignore_unmatched",
      "--lora_mode side takes whole LoRAs only");
  expect_error("--lora '" + lora("flux_a.safetensors") + "' --lora_mode side", "LoRA", "sd3-tiny");
}

TEST_F(CliLora, BadInputIsOneLineBeforeAnyWeightLoads) {
  expect_error("--lora '" + (dir_ / "missing.safetensors").string() + "'", "no file");
  expect_error("--lora '" + lora("flux_a.safetensors") + ":nan'", "is not a finite number");
  expect_error("--lora '" + lora("flux_a.safetensors") + ":abc'", "is not a scale");
  // A FLUX LoRA on SD3: its modules do not fit.
  expect_error("--lora '" + lora("flux_a.safetensors") + "'", "LoRA", "sd3-tiny");
  const fs::path cut = dir_ / "cut.safetensors";
  fs::copy_file(lora("flux_a.safetensors"), cut);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  expect_error("--lora '" + cut.string() + "'", "cut.safetensors");
}

// xdit bench lora: one row per dtype with the load, the merged load, the
// side paths' apply time and the forward with and without them.
TEST_F(CliLora, BenchRowsMergeAgainstSidePaths) {
  const fs::path rows_file = dir_ / "rows.json";  // (run_command drops stdout)
  const test::CommandResult r = test::run_command(
      std::string("sh -c \"env XDIT_QUIET=1 ") + XDIT_BINARY +
          " bench lora --json --dtypes f32 --lora_rank 4 > " + rows_file.string() + "\"",
      (dir_ / "stderr.txt").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<nlohmann::json> rows = test::json_lines(rows_file);
  ASSERT_EQ(rows.size(), 1u) << r.err;
  const nlohmann::json& row = rows[0];
  EXPECT_EQ(row["dtype"], "f32");
  EXPECT_EQ(row["rank"], 4);
  EXPECT_EQ(row["matrices"], 12);
  for (const char* k : {"load_seconds", "load_with_lora_seconds", "side_apply_seconds",
                        "forward_seconds", "forward_with_side_seconds"})
    EXPECT_GT(row[k].get<double>(), 0) << k;
  EXPECT_GT(row["lora_file_bytes"].get<double>(), 0);
  EXPECT_TRUE(row.contains("side_resident_bytes"));  // (RSS: may be 0 where pooled memory serves)
}

}  // namespace
}  // namespace xdit
