// The FLUX.1 LoRA formats people download, against diffusers' reading of
// them (tools/goldens/make_lora_formats.py): kohya / sd-scripts, Black Forest
// Labs' names and XLabs' files on the tiny FLUX.1 [schnell] give diffusers'
// images, alone and mixed with a diffusers file; at FLUX.1's real widths a
// kohya file's fused linear1 (block-sparse), qkv, final layer (swapped
// halves, alpha ignored) and embedders give the products diffusers'
// converter gives.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/rng.h"
#include "io/safetensors.h"
#include "lora_request.h"
#include "nn/lora.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

std::string data(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/lora/" + name;
}

std::shared_ptr<const nn::LoraFile> file(const std::string& name) {
  return std::make_shared<nn::LoraFile>(data("flux_" + name + ".safetensors"));
}

TEST(LoraFormats, AreDetectedFromTheKeys) {
  const std::map<std::string, std::pair<size_t, size_t>> want = {
      // transformer modules (a fused qkv adapts three), CLIP modules
      {"kohya", {2 * 14 + 3 * 2, 3 * 2}},
      {"bfl", {2 * 14 + 3 * 2, 3 * 2}},
      {"xlabs", {2 * 8 + 3 * 4, 0}},
      {"a", {0, 0}}};  // diffusers: counted by its own test
  for (const auto& [name, counts] : want) {
    SCOPED_TRACE(name);
    const auto f = file(name);
    EXPECT_EQ(f->format(), name == "a" ? "diffusers" : name);
    EXPECT_TRUE(f->unread().empty()) << f->unread().front();  // bfl's T5 adapter is all zeros
    if (name == "a") continue;
    EXPECT_EQ(f->modules("transformer").size(), counts.first);
    EXPECT_EQ(f->modules("text_encoder").size(), counts.second);
  }
  // A fused qkv: each of q, k, v takes its third of B's rows and all of A.
  const auto kohya_file = file("kohya");
  const auto& kohya = kohya_file->modules("transformer");
  const nn::LoraModule& k = kohya.at("transformer_blocks.0.attn.to_k");
  EXPECT_EQ(k.up, "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight");
  EXPECT_EQ(k.up_begin, k.out);
  EXPECT_EQ(kohya.at("transformer_blocks.0.attn.to_v").up_begin, 2 * k.out);
}

// diffusers' converter at FLUX.1's widths: for every module it makes,
// B·A (alpha baked in) equals ours scaled by alpha / rank, on sampled
// entries (the products are up to 12288 × 3072).
TEST(LoraFormats, KohyaAtRealWidthsIsDiffusersConversion) {
  const nn::LoraFile f(data("flux_kohya_real.safetensors"));
  const auto want = io::read_safetensors_f32(data("flux_kohya_real_converted.safetensors"));
  const auto& ours = f.modules("transformer");
  std::set<std::string> modules;
  for (const auto& [key, t] : want) {
    const std::string tail = ".lora_A.weight";
    if (key.size() < tail.size() || key.compare(key.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    std::string module = key.substr(0, key.size() - tail.size());
    if (module.rfind("transformer.", 0) == 0) module = module.substr(12);
    modules.insert(module);
    SCOPED_TRACE(module);
    ASSERT_TRUE(ours.count(module));
    const nn::LoraModule& m = ours.at(module);
    const Tensor& da = t;
    const Tensor& db = want.at(key.substr(0, key.size() - tail.size()) + ".lora_B.weight");
    const Tensor a = f.down(m), b = f.up(m);
    ASSERT_EQ(b.dim(0), db.dim(0));
    ASSERT_EQ(a.dim(1), da.dim(1));
    const double factor = m.alpha / static_cast<double>(m.rank);
    TorchGenerator rng(7);
    double worst = 0, scale = 0;
    for (int s = 0; s < 400; ++s) {
      const int64_t i = static_cast<int64_t>(rng.random64() % b.dim(0));
      const int64_t j = static_cast<int64_t>(rng.random64() % a.dim(1));
      double got = 0, ref = 0;
      for (int64_t r = 0; r < m.rank; ++r)
        got += b.data<float>()[i * m.rank + r] * a.data<float>()[r * a.dim(1) + j];
      for (int64_t r = 0; r < da.dim(0); ++r)
        ref += db.data<float>()[i * da.dim(0) + r] * da.data<float>()[r * da.dim(1) + j];
      worst = std::max(worst, std::abs(factor * got - ref));
      scale = std::max(scale, std::abs(ref));
    }
    EXPECT_GT(scale, 0);
    EXPECT_LE(worst, 1e-5 * scale);
  }
  EXPECT_EQ(modules.size(), ours.size());
  EXPECT_EQ(modules.size(), 4u + 3u + 2u + 2u);  // linear1, qkv, final layer, img_in + time_in
}

// Prompt to image (make_lora.py's FLUX.1 request) against diffusers with
// each file loaded and set_adapters' weights: within 1/255.
TEST(LoraFormats, ImagesAreDiffusers) {
  const auto want = io::read_safetensors_f32(data("flux_formats_images.safetensors"));
  const std::map<std::string, std::vector<nn::LoraUse>> cases = {
      {"kohya", {{file("kohya"), 0.8}}},
      {"bfl", {{file("bfl"), 1.0}}},
      {"xlabs", {{file("xlabs"), 0.6}}},
      {"kohya_a", {{file("kohya"), 0.8}, {file("a"), 0.5}}},
      // FLUX.1's T5 encoder with peft's adapters (diffusers' loaders adapt no
      // T5), in diffusers' key names and, its T5 part, in sd-scripts'.
      {"t5", {{file("t5"), 1.0}}},
      {"t5_kohya", {{file("t5_kohya"), 1.0}, {file("t5_transformer"), 1.0}}}};
  std::map<std::string, std::vector<uint8_t>> got;
  for (const auto& [name, loras] : cases) {
    SCOPED_TRACE(name);
    pipeline::Pipeline pipe(test::models_dir() + "/flux-schnell-tiny", DType::kF32);
    pipe.set_loras(loras);
    const pipeline::ImageRequest r = test::flux_lora_request();
    const pipeline::ImageResult out = pipe.generate(r);
    ASSERT_EQ(out.rgb.size(), 1u);
    const std::string golden = name == "t5_kohya" ? "t5" : name;
    EXPECT_LE(test::worst_pixel_difference(out.rgb, want.at(golden).data<float>()), 1)
        << "largest per-pixel difference (of 255)";
    got[name] = out.rgb[0];
  }
  EXPECT_NE(got["kohya"], got["bfl"]);
  EXPECT_NE(got["kohya"], got["kohya_a"]);
  EXPECT_NE(got["t5"], got["kohya"]);
}

}  // namespace
}  // namespace xdit
