// xdit bench cache: the step caches on a real model, each against the
// uncached run of the same request in the same process — denoising time,
// the fraction of transformer blocks run, and the image's PSNR and largest
// pixel difference against the uncached image (docs/caches.md). The curve
// (work, PSNR) per setting is what a user picks from.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/bench_util.h"
#include "app/commands.h"
#include "app/startup.h"
#include "core/error.h"
#include "pipeline/pipeline.h"

namespace xdit::app::bench {

namespace {

// PSNR (dB) and the largest difference of two RGB8 image lists.
std::pair<double, int> image_distance(const pipeline::ImageResult& a,
                                      const pipeline::ImageResult& b) {
  double se = 0;
  int64_t n = 0;
  int worst = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i)
    for (size_t k = 0; k < a.rgb[i].size(); ++k) {
      const int d = static_cast<int>(a.rgb[i][k]) - static_cast<int>(b.rgb[i][k]);
      se += static_cast<double>(d) * d;
      worst = std::max(worst, std::abs(d));
      ++n;
    }
  const double mse = se / static_cast<double>(std::max<int64_t>(n, 1));
  return {mse == 0 ? INFINITY : 10.0 * std::log10(255.0 * 255.0 / mse), worst};
}

}  // namespace

int run_bench_cache(const BenchOptions& o) {
  const std::string folder = o.model.empty() ? default_model_dir() : o.model;
  // (--dtypes' default lists both: the first one runs)
  const Device device = parse_device(o.device);
  check_device(device);
  pipeline::Pipeline pipe(folder, parse_dtype(o.dtypes.at(0)));
  pipe.set_device(device);
  pipe.set_keep_text_encoder(true);  // one encoder for every run
  pipeline::ImageRequest r;
  r.prompts = {o.prompt};
  r.num_inference_steps = o.steps > 0 ? o.steps : pipeline::kDefaultSteps;
  r.seed = 42;
  struct Setting {
    pipeline::CacheSettings cache;
  };
  std::vector<Setting> settings{{}};
  const std::vector<double> thresholds =
      o.cache_thresholds.empty()
          ? std::vector<double>{pipeline::CacheSettings::kFirstBlockThreshold,
                                pipeline::CacheSettings::kXDiTThreshold, 0.2}
          : o.cache_thresholds;
  for (const double t : thresholds) {
    pipeline::CacheSettings c;
    c.kind = pipeline::CacheKind::kFirstBlock;
    c.threshold = t;
    c.validate();  // before any run
    settings.push_back({c});
  }
  for (const double t : o.teacache_thresholds) {
    pipeline::CacheSettings c;
    c.kind = pipeline::CacheKind::kTeaCache;
    c.threshold = t;
    c.validate();
    settings.push_back({c});
  }
  for (const int64_t interval : o.taylorseer_intervals) {  // TaylorSeer at diffusers' W and K
    pipeline::CacheSettings c;
    c.kind = pipeline::CacheKind::kTaylorSeer;
    c.interval = interval;
    c.validate();
    settings.push_back({c.resolved()});
  }
  pipe.generate(pipe.plan(r));  // warm-up: first-touch of weights and buffers
  pipeline::ImageResult uncached;
  if (!o.json)
    std::printf(
        "%s, \"%s\", %s; against the uncached run in this process\n%-28s %9s %8s %12s "
        "%10s %8s %9s\n",
        folder.c_str(), o.prompt.c_str(), o.dtypes[0].c_str(), "cache", "denoise s", "speed-up",
        "steps full", "blocks run", "PSNR dB", "max diff");
  for (const Setting& s : settings) {
    r.cache = s.cache;
    const pipeline::ImageResult res = pipe.generate(pipe.plan(r));
    const pipeline::CacheStats st = pipe.cache_report().stats;
    if (!s.cache.on()) uncached = res;
    const auto [psnr, worst] = image_distance(res, uncached);
    const double blocks = st.blocks > 0 ? static_cast<double>(st.blocks_run) / st.blocks : 1.0;
    const std::string full =
        st.steps > 0 ? std::to_string(st.full_steps) + "/" + std::to_string(st.steps) : "all";
    nlohmann::json row = {{"cache", s.cache.label()},
                          {"denoise_seconds", res.denoise_seconds},
                          {"speedup", uncached.denoise_seconds / res.denoise_seconds},
                          {"full_steps", st.full_steps},
                          {"steps", st.steps},
                          {"blocks_fraction", blocks},
                          {"psnr_db", std::isfinite(psnr) ? psnr : 999.0},
                          {"max_pixel_diff", worst}};
    if (o.json) {
      std::cout << row.dump() << std::endl;
      continue;
    }
    char db[16] = "equal";
    if (std::isfinite(psnr)) std::snprintf(db, sizeof db, "%.1f", psnr);
    std::printf("%-28s %9.2f %7.2fx %12s %9.0f%% %8s %9d\n", s.cache.label().c_str(),
                res.denoise_seconds, uncached.denoise_seconds / res.denoise_seconds, full.c_str(),
                100 * blocks, db, worst);
  }
  return 0;
}

}  // namespace xdit::app::bench
