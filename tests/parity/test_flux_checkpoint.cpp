// FLUX.1's original (BFL) layout under diffusers' names
// (models/flux_checkpoint.h) against diffusers' own converter at FLUX.1's
// real widths (tools/goldens/make_flux_checkpoint.py): every weight of two
// double and two single blocks, the embedders and the final layer comes
// from the same original tensor, rows and halves.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/weights.h"
#include "lora_request.h"
#include "models/flux_checkpoint.h"
#include "nn/lora.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

TEST(FluxCheckpoint, OriginalRowsAreDiffusersConversion) {
  std::ifstream in(std::string(XDIT_TEST_DATA) + "/flux_checkpoint/rows.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  const int64_t inner = golden["inner_dim"], mlp = golden["mlp_hidden"];
  ASSERT_GE(golden["rows"].size(), 100u);
  for (const auto& [name, want] : golden["rows"].items()) {
    SCOPED_TRACE(name);
    const auto got = models::flux_original_rows(name, inner, mlp);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->name, want[0].get<std::string>());
    EXPECT_EQ(got->begin, want[1].get<int64_t>());
    EXPECT_EQ(got->count < 0 ? want[4].get<int64_t>() : got->count, want[2].get<int64_t>());
    EXPECT_EQ(got->swap_halves, want[3].get<bool>());
  }
  // Names FLUX.1 has not.
  for (const char* n : {"transformer_blocks.0.attn.norm_q.bias", "pos_embed.weight",
                        "single_transformer_blocks.1.ff.net.2.weight", "proj_out"})
    EXPECT_FALSE(models::flux_original_rows(n, inner, mlp).has_value()) << n;
}

std::string data(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/flux_checkpoint/" + name;
}

models::OriginalCheckpointWeights flux_file(std::shared_ptr<const io::CheckpointFile> file,
                                            int64_t inner, int64_t mlp) {
  return models::OriginalCheckpointWeights(
      std::move(file), "FLUX.1",
      [inner, mlp](const std::string& n) { return models::flux_original_rows(n, inner, mlp); });
}

// The tiny FLUX.1 as a GGUF of the original layout
// (tools/goldens/make_flux_gguf.py): in BF16 it gives every weight of the
// diffusers folder bit for bit; in Q8_0 within the quantization's step.
TEST(FluxCheckpoint, GgufOfTheOriginalLayoutIsTheFoldersWeights) {
  const io::WeightStore folder(std::string(XDIT_MODELS) + "/flux-schnell-tiny/transformer");
  const int64_t inner = folder.shape("x_embedder.weight")[0];
  const int64_t mlp = folder.shape("single_transformer_blocks.0.proj_mlp.weight")[0];
  for (const char* file : {"flux_tiny_bf16.gguf", "flux_tiny_q8_0.gguf"}) {
    SCOPED_TRACE(file);
    const bool exact = std::string(file).find("bf16") != std::string::npos;
    const auto w = flux_file(std::make_shared<io::CheckpointFile>(data(file)), inner, mlp);
    int quantized = 0;
    for (const std::string& name : folder.names()) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(w.has(name));
      const Shape s = folder.shape(name);
      const std::vector<float> want = folder.get(name, s).to(DType::kF32).to_vector();
      const Tensor got_t = w.get(name, s);
      quantized += got_t.dtype() == DType::kF32 && !exact ? 1 : 0;
      const std::vector<float> got = got_t.to(DType::kF32).to_vector();
      w.drop_pages(name);  // the pages go; a read after gives the same values
      EXPECT_EQ(w.get(name, s).to(DType::kF32).to_vector(), got);
      float most = 0;
      for (float x : want) most = std::max(most, std::abs(x));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_LE(std::abs(got[i] - want[i]), exact ? 0.0f : most / 127) << i;
    }
    if (!exact) {
      EXPECT_GT(quantized, 40);  // most matrices are Q8_0
    }
  }
}

// xdit generate --transformer's path: the tiny FLUX.1 with its transformer
// from the Q8_0 GGUF (its weights kept in Q8_0 blocks) gives diffusers'
// image with gguf-py's dequantized weights, and with diffusers' own GGUF
// dequantization, within 1/255 (f32); the BF16 GGUF and the single-file
// safetensors give the folder's image exactly.
TEST(FluxCheckpoint, ImageFromGgufIsDiffusers) {
  const std::string folder = std::string(XDIT_MODELS) + "/flux-schnell-tiny";
  const auto want = io::read_safetensors_f32(data("flux_tiny_q8_0_image.safetensors"));
  const pipeline::ImageRequest r = test::flux_lora_request();  // make_lora.py's
  const auto image = [&](const std::string& file) {
    pipeline::Pipeline pipe(folder, DType::kF32);
    if (!file.empty()) pipe.set_transformer_file(data(file));
    return pipe.generate(r).rgb;
  };
  const auto q8 = image("flux_tiny_q8_0.gguf");
  {  // Q8_0 matrices stay in their blocks: ~34 bytes a 32 weights, not f32's 128
    pipeline::Pipeline f32(folder, DType::kF32), blocks(folder, DType::kF32);
    blocks.set_transformer_file(data("flux_tiny_q8_0.gguf"));
    f32.load();
    blocks.load();
    EXPECT_LT(blocks.linear_weight_bytes(), f32.linear_weight_bytes() / 2);
  }
  EXPECT_LE(test::worst_pixel_difference(q8, want.at("image").data<float>()), 1);
  // diffusers' own GGUF dequantization (f16 arithmetic) too.
  EXPECT_LE(test::worst_pixel_difference(q8, want.at("diffusers_image").data<float>()), 1);
  const auto base = image("");
  EXPECT_EQ(image("flux_tiny_bf16.gguf"), base);
  EXPECT_EQ(image("flux_tiny_bf16.safetensors"), base);  // a single-file safetensors
  EXPECT_NE(q8, base);                                   // (Q8_0 rounds the weights)
  // A family without single-file support, another model's file, or a file
  // of another kind: one line.
  const std::string pixart = test::error_message([&] {
    pipeline::Pipeline(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", DType::kF32)
        .set_transformer_file(data("flux_tiny_q8_0.gguf"));
  });
  EXPECT_NE(pixart.find("FLUX.1, SD3 / SD3.5, Z-Image, Qwen-Image and Wan only so far"),
            std::string::npos)
      << pixart;
  const std::string sd3 = test::error_message([&] {
    pipeline::Pipeline(std::string(XDIT_MODELS) + "/sd3-tiny", DType::kF32)
        .set_transformer_file(data("flux_tiny_q8_0.gguf"));
  });
  EXPECT_NE(sd3.find("a checkpoint of another model?"), std::string::npos) << sd3;
  EXPECT_EQ(sd3.find('\n'), std::string::npos) << sd3;
  const std::string st = test::error_message(
      [&] { pipeline::Pipeline(folder, DType::kF32).set_transformer_file(data("rows.json")); });
  EXPECT_NE(st.find("a GGUF (.gguf) or safetensors"), std::string::npos) << st;
}

// A LoRA merged into a --transformer file's weights: from the BF16 GGUF
// (the folder's values) the image of the folder with the same LoRA merged,
// exactly (diffusers' image: tests/parity/test_lora.cpp).
TEST(FluxCheckpoint, LoraMergesIntoTheFile) {
  const std::string folder = std::string(XDIT_MODELS) + "/flux-schnell-tiny";
  const auto lora = [] {
    return std::vector<nn::LoraUse>{
        {std::make_shared<nn::LoraFile>(std::string(XDIT_TEST_DATA) + "/lora/flux_a.safetensors"),
         0.7}};
  };
  const pipeline::ImageRequest r = test::flux_lora_request();
  pipeline::Pipeline file(folder, DType::kF32), want(folder, DType::kF32),
      plain(folder, DType::kF32);
  file.set_transformer_file(data("flux_tiny_bf16.gguf"));
  file.set_loras(lora());
  want.set_loras(lora());
  const auto got = file.generate(r).rgb;
  EXPECT_EQ(got, want.generate(r).rgb);
  EXPECT_NE(got, plain.generate(r).rgb);  // the LoRA changes the picture
}

// A folder with the transformer's config but not its weights (a GGUF
// downloaded instead): the file gives the folder's image; without it, one
// line before anything loads.
TEST(FluxCheckpoint, FolderWithoutTransformerWeightsTakesTheFile) {
  namespace fs = std::filesystem;
  const fs::path src = std::string(XDIT_MODELS) + "/flux-schnell-tiny";
  const fs::path dir =
      fs::temp_directory_path() / ("xdit_no_weights_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(dir / "transformer"))
    if (e.path().extension() == ".safetensors") fs::remove(e.path());
  const pipeline::ImageRequest r = test::flux_lora_request();
  pipeline::Pipeline want(src.string(), DType::kF32), got(dir.string(), DType::kF32);
  got.set_transformer_file(data("flux_tiny_bf16.gguf"));
  EXPECT_EQ(got.generate(r).rgb, want.generate(r).rgb);
  pipeline::Pipeline none(dir.string(), DType::kF32);
  const std::string e = test::error_message([&] { none.check_transformer_weights(); });
  EXPECT_NE(e.find("give them as one file with --transformer FILE"), std::string::npos) << e;
  EXPECT_NE(test::error_message([&] { none.generate(r); }).find("--transformer FILE"),
            std::string::npos);
  fs::remove_all(dir);
}

// A GGUF of another width, and NaN scales: one line each.
TEST(FluxCheckpoint, BadCheckpointsAreOneLine) {
  const io::WeightStore folder(std::string(XDIT_MODELS) + "/flux-schnell-tiny/transformer");
  const auto file = std::make_shared<io::GgufFile>(data("flux_tiny_q8_0.gguf"));
  const auto wider = flux_file(std::make_shared<io::CheckpointFile>(file), 64, 256);
  const std::string name = "single_transformer_blocks.0.proj_mlp.weight";
  const std::string e = test::error_message([&] { wider.get(name, folder.shape(name)); });
  EXPECT_NE(e.find("a checkpoint of another width?"), std::string::npos) << e;
  // A Q8_0 block's f16 scale made NaN.
  std::ifstream in(data("flux_tiny_q8_0.gguf"), std::ios::binary);
  auto bytes = std::make_shared<std::string>(std::istreambuf_iterator<char>(in),
                                             std::istreambuf_iterator<char>());
  const io::GgufTensor& t = file->tensors().at("single_blocks.0.linear2.weight");
  ASSERT_EQ(t.type, io::GgmlType::kQ8_0);
  const uint16_t nan = 0x7E00;  // f16 NaN as the first block's scale
  std::memcpy(bytes->data() + file->offset_of(t), &nan, 2);
  const auto broken =
      flux_file(std::make_shared<io::CheckpointFile>(std::make_shared<io::GgufFile>(
                    std::shared_ptr<const void>(bytes, bytes->data()), bytes->size(), "nan.gguf")),
                folder.shape("x_embedder.weight")[0],
                folder.shape("single_transformer_blocks.0.proj_mlp.weight")[0]);
  const std::string p = "single_transformer_blocks.0.proj_out.weight";
  // Dequantized (get) or kept in blocks (quantized, what layers take).
  for (const std::string& n :
       {test::error_message([&] { broken.get(p, folder.shape(p)); }),
        test::error_message([&] { broken.quantized(p, folder.shape(p)); })}) {
    EXPECT_NE(n.find("NaN or Inf"), std::string::npos) << n;
    EXPECT_EQ(n.find('\n'), std::string::npos) << n;
  }
}

}  // namespace
}  // namespace xdit
