// Step caches against diffusers' own hooks (tools/goldens/make_caches.py)
// and a reimplementation of xDiT's TeaCache on diffusers' pipelines
// (make_teacache.py): First-Block-Cache, TeaCache and TaylorSeer from prompt
// to image on the tiny FLUX.1 [schnell], FLUX.1 [dev] with true CFG (the
// halves decide apart), SD3, SD3.5 and PixArt-α, at settings where some
// steps run in full and some skip: the same steps skip, and the images are
// equal within 1/255 per pixel. Also the settings' checks.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "io/json.h"
#include "parity/pipeline_goldens.h"
#include "pipeline/first_block_cache.h"
#include "pipeline/pipeline.h"
#include "pipeline/taylorseer_cache.h"
#include "pipeline/teacache.h"
#include "test_util.h"

namespace xdit {
namespace {

using pipeline::CacheKind;
using pipeline::CacheSettings;

// The request a golden case records (without its cache).
pipeline::ImageRequest case_request(const io::Json& m) {
  pipeline::ImageRequest r = test::image_request(m);
  r.true_cfg_scale = m["true_cfg_scale"].get<double>();
  r.resolution_binning = false;
  return r;
}

// Calls f(case metadata, a pipeline of its model, the goldens, the case's
// prefix) for each of the five cases of tests/data/goldens/<stem>_pipeline.
void for_each_case(
    const std::string& stem,
    const std::function<void(const io::Json&, pipeline::Pipeline&, std::map<std::string, Tensor>&,
                             const std::string&)>& f) {
  int cases = 0;
  test::for_each_pipeline_case(
      stem, [&](const std::string& c, const io::Json& m, std::map<std::string, Tensor>& g) {
        pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/" + m["model"].get<std::string>(),
                                DType::kF32);
        f(m, pipe, g, c);
        ++cases;
      });
  EXPECT_EQ(cases, 5);
}

// A deciding cache (`kind` at each golden case's threshold) against the
// goldens of tools/goldens/<stem>: the same steps ran in full per context,
// the indicator within 1e-3 relative where the golden has one, the image
// within 1/255.
void expect_decisions_match(const std::string& stem, CacheKind kind, const char* indicators) {
  for_each_case(stem, [&](const io::Json& m, pipeline::Pipeline& pipe,
                          std::map<std::string, Tensor>& g, const std::string& c) {
    pipeline::ImageRequest r = case_request(m);
    r.cache.kind = kind;
    r.cache.threshold = m["threshold"].get<double>();
    const pipeline::ImageResult out = pipe.generate(r);
    // diffusers' contexts sorted by name ("cond" < "uncond"; or the one
    // "cond_uncond"), xdit's by batch half ([uncond; cond]).
    const auto names = m["contexts"].get<std::vector<std::string>>();
    const Tensor& full = g[c + ".full"];
    const pipeline::CacheStats& st = pipe.cache_report().stats;
    ASSERT_EQ(st.full.size(), names.size());
    const int64_t steps = r.num_inference_steps;
    int64_t skipped = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const size_t mine = names[i] == "uncond" ? 0 : names.size() - 1;
      ASSERT_EQ(static_cast<int64_t>(st.full[mine].size()), steps);
      const io::Json& ind = m[indicators][i];
      for (int64_t s = 0; s < steps; ++s) {
        const bool want = full.data<float>()[static_cast<int64_t>(i) * steps + s] > 0.5f;
        EXPECT_EQ(st.full[mine][static_cast<size_t>(s)], want)
            << "context " << names[i] << " step " << s;
        skipped += want ? 0 : 1;
        const double got = st.indicator[mine][static_cast<size_t>(s)];
        if (ind[s].is_null()) {
          EXPECT_EQ(got, -1.0) << "context " << names[i] << " step " << s << ": no reference";
        } else {
          const double w = ind[s].get<double>();
          EXPECT_NEAR(got, w, 1e-3 * std::abs(w)) << "context " << names[i] << " step " << s;
        }
      }
    }
    EXPECT_GE(skipped, 2) << "the golden must skip some steps";
    const Tensor& want = g[c + ".image"];
    ASSERT_EQ(out.rgb.size(), 1u);
    ASSERT_EQ(out.height, want.dim(1));
    ASSERT_EQ(out.width, want.dim(2));
    EXPECT_LE(test::worst_pixel_difference(out.rgb, want.data<float>()), 1)
        << "largest per-pixel difference (of 255)";
    EXPECT_NE(out.cache.find(r.cache.name() + std::string(" threshold")), std::string::npos)
        << out.cache;
  });
}

TEST(FirstBlockCache, MatchesDiffusersOnEveryFamily) {
  expect_decisions_match("fbcache", CacheKind::kFirstBlock, "ratios");
}

// TeaCache against a Python reimplementation of xDiT's rule on diffusers'
// pipelines (tools/goldens/make_teacache.py): FLUX.1's rescaling
// polynomial, the identity elsewhere, the last step forced (flux-schnell's
// case accumulates below its threshold there).
TEST(TeaCache, MatchesTheReferenceOnEveryFamily) {
  expect_decisions_match("teacache", CacheKind::kTeaCache, "indicators");
}

TEST(TeaCache, RescalesFluxWithThePublishedPolynomial) {
  const auto flux = pipeline::TeaCache::rescale_for("FLUX");
  ASSERT_EQ(flux.size(), 5u);
  // 498.651651·0.1⁴ − 283.781631·0.1³ + 55.8554382·0.1² − 3.82021401·0.1 + 0.264230861
  EXPECT_NEAR(pipeline::TeaCache::rescaled(flux, 0.1), 0.2068473761, 1e-9);
  EXPECT_NEAR(pipeline::TeaCache::rescaled(flux, 0.0), 0.264230861, 1e-12);
  EXPECT_TRUE(pipeline::TeaCache::rescale_for("SD3").empty());
  EXPECT_EQ(pipeline::TeaCache::rescaled({}, 0.37), 0.37);
}

// TaylorSeer with f32 factors at settings that cover orders 0 to 3, the
// forecast of step W itself and runs that end on forecast steps; PixArt's
// attn1 and attn2 forecast (xdit's rule: diffusers' defaults match no
// PixArt module).
TEST(TaylorSeer, MatchesDiffusersOnEveryFamily) {
  for_each_case("taylorseer", [](const io::Json& m, pipeline::Pipeline& pipe,
                                 std::map<std::string, Tensor>& g, const std::string& c) {
    pipeline::ImageRequest r = case_request(m);
    r.cache.kind = CacheKind::kTaylorSeer;
    r.cache.interval = m["taylorseer_interval"].get<int64_t>();
    r.cache.warmup = m["taylorseer_warmup"].get<int64_t>();
    r.cache.order = m["taylorseer_order"].get<int64_t>();
    const pipeline::ImageResult out = pipe.generate(r);
    const pipeline::CacheStats& st = pipe.cache_report().stats;
    int64_t full = 0;
    for (int64_t s = 0; s < r.num_inference_steps; ++s)
      full += pipeline::TaylorSeerCache::computes(s, *r.cache.interval, *r.cache.warmup) ? 1 : 0;
    EXPECT_EQ(st.full_steps, full);
    EXPECT_LT(st.full_steps, st.steps) << "the case must forecast some steps";
    EXPECT_LT(st.blocks_run, st.blocks);
    const Tensor& want = g[c + ".image"];
    ASSERT_EQ(out.height, want.dim(1));
    ASSERT_EQ(out.width, want.dim(2));
    EXPECT_LE(test::worst_pixel_difference(out.rgb, want.data<float>()), 1)
        << "largest per-pixel difference (of 255)";
  });
}

TEST(TaylorSeer, ScheduleIsDiffusers) {
  // W = 3, I = 5: full at 0, 1, 2; forecast 3; full 4; forecast 5-8; full 9.
  std::vector<int> got;
  for (int s = 0; s < 10; ++s) got.push_back(pipeline::TaylorSeerCache::computes(s, 5, 3));
  EXPECT_EQ(got, (std::vector<int>{1, 1, 1, 0, 1, 0, 0, 0, 0, 1}));
  for (int s = 0; s < 6; ++s) EXPECT_TRUE(pipeline::TaylorSeerCache::computes(s, 1, 0));
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
  EXPECT_NE(test::error_message([&] { none.validate(); }).find("needs --cache fbcache or teacache"),
            std::string::npos);
  const std::string e = test::error_message([] { (void)CacheSettings::parse("fastcache"); });
  EXPECT_NE(e.find("unknown step cache 'fastcache'"), std::string::npos) << e;
  EXPECT_EQ(CacheSettings::parse("fbcache"), CacheKind::kFirstBlock);
  EXPECT_EQ(CacheSettings::parse("teacache"), CacheKind::kTeaCache);
  CacheSettings tea;
  tea.kind = CacheKind::kTeaCache;
  tea.threshold = -1;
  EXPECT_NE(test::error_message([&] { tea.validate(); }).find("threshold must be"),
            std::string::npos);
  tea.threshold.reset();
  tea.interval = 2;
  EXPECT_NE(test::error_message([&] { tea.validate(); }).find("need --cache taylorseer"),
            std::string::npos);
  CacheSettings t;
  t.kind = CacheKind::kTaylorSeer;
  t.order = 4;
  EXPECT_NE(test::error_message([&] { t.validate(); }).find("order must be 0 to 3"),
            std::string::npos);
  t.order = -1;
  EXPECT_NE(test::error_message([&] { t.validate(); }).find("order must be 0 to 3"),
            std::string::npos);
  t.order.reset();
  t.interval = 0;
  EXPECT_NE(test::error_message([&] { t.validate(); }).find("interval must be 1 or more"),
            std::string::npos);
  t.interval = 4;
  t.warmup = 0;
  EXPECT_NE(test::error_message([&] { t.validate(); }).find("warm-up must be 1 or more"),
            std::string::npos);
  t.warmup.reset();
  t.threshold = 0.1;
  EXPECT_NE(test::error_message([&] { t.validate(); }).find("needs --cache fbcache or teacache"),
            std::string::npos);
  CacheSettings f;
  f.kind = CacheKind::kFirstBlock;
  f.interval = 3;
  EXPECT_NE(test::error_message([&] { f.validate(); }).find("need --cache taylorseer"),
            std::string::npos);
}

TEST(CacheSettings, FillsTheDefaultsOfDiffusers) {
  CacheSettings s;
  s.kind = CacheKind::kFirstBlock;
  EXPECT_EQ(*s.resolved().threshold, 0.05);  // FirstBlockCacheConfig's default
  EXPECT_EQ(s.label(), "fbcache threshold 0.05");
  EXPECT_EQ(CacheSettings{}.label(), "none");
  CacheSettings t;
  t.kind = CacheKind::kTaylorSeer;  // TaylorSeerCacheConfig's defaults
  EXPECT_EQ(t.label(), "taylorseer interval 5 warmup 3 order 1");
  CacheSettings tea;
  tea.kind = CacheKind::kTeaCache;  // xDiT's rel_l1_thresh
  EXPECT_EQ(tea.label(), "teacache threshold 0.12");
}

}  // namespace
}  // namespace xdit

namespace xdit::pipeline {
namespace {

// One step's call of a First-Block-Cache over token rows [r0, r1) (3 tokens
// of width 4 each), the head adding `r` to every value; whether the step
// ran every block.
bool fbc_step(FirstBlockCache& fbc, int64_t step, int64_t r0, int64_t r1, float r) {
  fbc.before_step({step, 3, 0.0});
  models::DiTInputs in;
  in.row_begin = r0;
  in.row_end = r1;
  models::Streams s;
  s.x = Tensor::from_vector(test::randn((r1 - r0) * 3 * 4, 100 + step), {1, (r1 - r0) * 3, 4});
  fbc.begin_call(in, s);
  for (int64_t i = 0; i < s.x.numel(); ++i) s.x.data<float>()[i] += r;  // the head
  fbc.after_block(0, s);
  const bool full = fbc.before_block(1, s).end < 0;
  if (full) fbc.after_block(2, s);
  fbc.end_call(s);
  return full;
}

// --patch_weights dynamic moves rows between ranks: rows a rank held at an
// older full step, then again, are no reference, so the step runs in full
// even where the stale values would say skip.
TEST(FirstBlockCache, RowsBackFromAnOlderFullStepAreNoReference) {
  CacheSetup setup;
  setup.blocks = 3;
  setup.stage = models::DiTStage(0, 3, true, true);
  setup.token_rows = 2;
  FirstBlockCache fbc(1.0, setup);
  EXPECT_TRUE(fbc_step(fbc, 0, 0, 2, 1.0f));  // no reference yet
  EXPECT_TRUE(fbc_step(fbc, 1, 0, 1, 5.0f));  // row 0 only: ratio 4 > 1
  // Rows 0 and 1: against row 0 (5) and row 1's stale 1 the ratio is
  // 4 / 6 < 1, but row 1 is from step 0, not the last full step.
  EXPECT_TRUE(fbc_step(fbc, 2, 0, 2, 1.0f));
  EXPECT_FALSE(fbc_step(fbc, 3, 0, 2, 1.0f)) << "a full reference now: ratio 0 skips";
}

// TaylorSeer on a forecast step: rows that have factors forecast, rows that
// have none (a PipeFusion patch after the whole-image warm-up, a re-split)
// run the module and start theirs.
TEST(TaylorSeer, RowsWithoutFactorsRunOnAForecastStep) {
  CacheSetup setup;
  setup.blocks = 2;
  setup.stage = models::DiTStage(0, 2, true, true);
  setup.token_rows = 4;
  TaylorSeerCache ts(/*interval=*/5, /*warmup=*/1, /*order=*/0, setup);
  std::vector<float> y(6, 0.5f), out(6, 0.0f);
  const auto call = [&](int64_t step, int64_t r0, int64_t r1) {
    ts.before_step({step, 4, 0.0});
    models::DiTInputs in;
    in.row_begin = r0;
    in.row_end = r1;
    ts.begin_call(in, {});
    const bool forecast = ts.replace(0, 0, out.data(), 6);
    if (!forecast) ts.ran(0, 0, y.data(), 6);
    models::Streams s;
    ts.end_call(s);
    return forecast;
  };
  EXPECT_FALSE(call(0, 0, 4));  // the warm-up: the whole image runs
  EXPECT_TRUE(call(1, 0, 4)) << "step 1 = W is forecast where factors exist";
  EXPECT_EQ(out, y);                                 // order 0: the last output
  ASSERT_FALSE(TaylorSeerCache::computes(3, 5, 1));  // steps 3 and 4 forecast
  ASSERT_FALSE(TaylorSeerCache::computes(4, 5, 1));
  EXPECT_FALSE(call(3, 0, 2)) << "rows [0, 2) have no factors of their own: they run";
  EXPECT_TRUE(call(4, 0, 2)) << "and forecast from then on";
}

}  // namespace
}  // namespace xdit::pipeline
