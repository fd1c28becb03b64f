// Step caches against diffusers' own hooks (tools/goldens/make_caches.py):
// First-Block-Cache from prompt to image on the tiny FLUX.1 [schnell],
// FLUX.1 [dev] with true CFG (the halves decide apart), SD3, SD3.5 and
// PixArt-α, at thresholds where some steps run in full and some skip: the
// same steps skip, and the images are equal within 1/255 per pixel. Also
// the settings' checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "io/json.h"
#include "io/safetensors.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

using pipeline::CacheKind;
using pipeline::CacheSettings;

// The largest difference (of 255) between RGB8 images and diffusers' [B, H,
// W, 3] in [0, 1].
int worst_pixel(const pipeline::ImageResult& out, const Tensor& want) {
  int worst = 0;
  size_t off = 0;
  for (const auto& img : out.rgb)
    for (uint8_t px : img) {
      const int ref = static_cast<int>(std::nearbyint(want.data<float>()[off++] * 255.0f));
      worst = std::max(worst, std::abs(ref - static_cast<int>(px)));
    }
  return worst;
}

TEST(FirstBlockCache, MatchesDiffusersOnEveryFamily) {
  const std::string file = std::string(XDIT_TEST_DATA) + "/goldens/fbcache_pipeline.safetensors";
  io::SafeTensorsFile sf(file);
  auto g = io::read_safetensors_f32(file);
  const int cases = std::stoi(sf.metadata().at("cases"));
  ASSERT_EQ(cases, 5);
  for (int k = 0; k < cases; ++k) {
    const std::string c = "case" + std::to_string(k);
    const io::Json m = io::parse_json_text(sf.metadata().at(c), c);
    SCOPED_TRACE(m["model"].get<std::string>() + " threshold " +
                 std::to_string(m["threshold"].get<double>()));
    pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/" + m["model"].get<std::string>(),
                            DType::kF32);
    pipeline::ImageRequest r;
    r.prompts = {m["prompt"].get<std::string>()};
    if (!m["negative_prompt"].is_null())
      r.negative_prompt = m["negative_prompt"].get<std::string>();
    r.height = m["height"].get<int64_t>();
    r.width = m["width"].get<int64_t>();
    r.num_inference_steps = m["steps"].get<int64_t>();
    r.guidance_scale = m["guidance_scale"].get<double>();
    r.true_cfg_scale = m["true_cfg_scale"].get<double>();
    r.seed = m["seed"].get<uint64_t>();
    r.max_sequence_length = m["max_sequence_length"].get<int64_t>();
    r.resolution_binning = false;
    r.cache.kind = CacheKind::kFirstBlock;
    r.cache.threshold = m["threshold"].get<double>();
    const pipeline::ImageResult out = pipe.generate(r);

    // The same steps ran in full, per context. diffusers' contexts sorted by
    // name ("cond" < "uncond"; or the one "cond_uncond"), xdit's by batch
    // half ([uncond; cond]).
    const auto names = m["contexts"].get<std::vector<std::string>>();
    const Tensor& full = g[c + ".full"];
    const auto& got = pipe.cache_report().stats.full;
    ASSERT_EQ(got.size(), names.size());
    const int64_t steps = r.num_inference_steps;
    int64_t skipped = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const size_t mine = names[i] == "uncond" ? 0 : names.size() - 1;
      ASSERT_EQ(static_cast<int64_t>(got[mine].size()), steps);
      for (int64_t s = 0; s < steps; ++s) {
        const bool want = full.data<float>()[static_cast<int64_t>(i) * steps + s] > 0.5f;
        EXPECT_EQ(got[mine][static_cast<size_t>(s)], want)
            << "context " << names[i] << " step " << s;
        skipped += want ? 0 : 1;
      }
    }
    EXPECT_GE(skipped, 2) << "the golden must skip some steps";
    const Tensor& want = g[c + ".image"];
    ASSERT_EQ(out.rgb.size(), 1u);
    ASSERT_EQ(out.height, want.dim(1));
    ASSERT_EQ(out.width, want.dim(2));
    EXPECT_LE(worst_pixel(out, want), 1) << "largest per-pixel difference (of 255)";
    EXPECT_NE(out.cache.find("fbcache threshold"), std::string::npos) << out.cache;
  }
}

TEST(CacheSettings, RefusesBadSettingsInOneLine) {
  CacheSettings s;
  s.kind = CacheKind::kFirstBlock;
  for (const double bad : {0.0, -0.1, std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity()}) {
    s.threshold = bad;
    const std::string e = test::error_message([&] { s.validate(); });
    EXPECT_NE(e.find("threshold must be a finite number above 0"), std::string::npos) << e;
  }
  CacheSettings none;
  none.threshold = 0.1;
  EXPECT_NE(test::error_message([&] { none.validate(); }).find("needs a cache"), std::string::npos);
  const std::string e = test::error_message([] { (void)CacheSettings::parse("fastcache"); });
  EXPECT_NE(e.find("unknown step cache 'fastcache'"), std::string::npos) << e;
  EXPECT_EQ(CacheSettings::parse("fbcache"), CacheKind::kFirstBlock);
}

TEST(CacheSettings, FillsTheDefaultsOfDiffusers) {
  CacheSettings s;
  s.kind = CacheKind::kFirstBlock;
  EXPECT_EQ(*s.resolved().threshold, 0.05);  // FirstBlockCacheConfig's default
  EXPECT_EQ(s.label(), "fbcache threshold 0.05");
  EXPECT_EQ(CacheSettings{}.label(), "none");
}

}  // namespace
}  // namespace xdit
