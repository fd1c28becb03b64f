// xdit generate's step-cache flags end to end: each cache writes its line
// into the PNG text and equals the same request through the library; bad
// combinations and values end with one line before any weights load and
// write nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_generate.h"
#include "io/png.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;

class CliCache : public test::GenerateCli {
 protected:
  CliCache()
      : GenerateCli("cache", "flux-dev-tiny",
                    "--prompt 'a red fox' --height 40 --width 64 --num_inference_steps 8 --seed 3 "
                    "--dtype f32") {}
};

TEST_F(CliCache, EachCacheRunsAndSaysWhatItDid) {
  for (const std::string flags :
       {"--cache fbcache --cache_threshold 0.3", "--use_fbcache",
        "--cache teacache --cache_threshold 0.3", "--use_teacache",
        "--cache taylorseer --taylorseer_interval 3 --taylorseer_warmup 2 --taylorseer_order 2"}) {
    SCOPED_TRACE(flags);
    const test::CommandResult r = generate(flags);
    ASSERT_EQ(r.code, 0) << r.err;
    const io::PngImage png = io::read_png(out());
    const std::string line = png.text.at("cache");
    // The same request through the library.
    pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/flux-dev-tiny", DType::kF32);
    pipeline::ImageRequest req;
    req.prompts = {"a red fox"};
    req.height = 40;
    req.width = 64;
    req.num_inference_steps = 8;
    req.seed = 3;
    if (flags.find("taylorseer") != std::string::npos) {
      req.cache.kind = pipeline::CacheKind::kTaylorSeer;
      req.cache.interval = 3;
      req.cache.warmup = 2;
      req.cache.order = 2;
      EXPECT_EQ(line.rfind("taylorseer interval 3 warmup 2 order 2: ", 0), 0u) << line;
    } else {
      const bool tea = flags.find("teacache") != std::string::npos;
      const bool xdit_flag = flags.rfind("--use_", 0) == 0;  // xDiT's threshold 0.12
      req.cache.kind = tea ? pipeline::CacheKind::kTeaCache : pipeline::CacheKind::kFirstBlock;
      req.cache.threshold = xdit_flag ? 0.12 : 0.3;
      EXPECT_EQ(line.rfind(std::string(tea ? "teacache" : "fbcache") + " threshold " +
                               (xdit_flag ? "0.12" : "0.3") + ": ",
                           0),
                0u)
          << line;
    }
    const pipeline::ImageResult want = pipe.generate(req);
    EXPECT_EQ(want.cache, line);
    EXPECT_EQ(test::worst_pixel_difference(want.rgb.at(0), png.rgb), 0);
    fs::remove(out());
  }
}

TEST_F(CliCache, BadSettingsAreOneLineBeforeAnyWeightLoads) {
  expect_error("--cache fbcache --cache fbcache", "--cache");
  expect_error("--cache fastcache", "unknown step cache 'fastcache'");
  expect_error("--cache fbcache --cache_threshold 0", "threshold must be a finite number above 0");
  expect_error("--cache fbcache --cache_threshold nan", "threshold");
  expect_error("--cache_threshold 0.2", "needs --cache fbcache or teacache");
  expect_error("--cache teacache --cache_threshold -1", "threshold must be a finite number");
  expect_error("--cache teacache --taylorseer_warmup 2", "need --cache taylorseer");
  expect_error("--use_teacache --cache fbcache", "--use_teacache is --cache teacache");
  expect_error("--use_fbcache --use_teacache", "name two step caches");
  expect_error("--taylorseer_interval 2", "need --cache taylorseer");
  expect_error("--cache taylorseer --taylorseer_order 4", "order must be 0 to 3");
  expect_error("--cache taylorseer --taylorseer_interval 0", "interval must be 1 or more");
  expect_error("--cache taylorseer --taylorseer_warmup 0", "warm-up must be 1 or more");
  expect_error("--use_fbcache --cache taylorseer", "--use_fbcache is --cache fbcache");
  expect_error("--use_fbcache --taylorseer_order 1", "takes no TaylorSeer setting");
}

// xdit bench cache: the uncached row first (equal to itself), then a row per
// setting with its label, whether it skipped, and its distance to uncached.
TEST_F(CliCache, BenchRowsEachCacheAgainstTheUncachedRun) {
  const fs::path rows_file = dir_ / "rows.json";  // (run_command drops stdout)
  const test::CommandResult r =
      test::run_command(std::string("sh -c \"env XDIT_QUIET=1 ") + XDIT_BINARY +
                            " bench cache --model " + XDIT_MODELS +
                            "/pixart-alpha-tiny --prompt fox --steps 6 --json --cache_thresholds "
                            "0.3 --teacache_thresholds 0.3,1000 --taylorseer_intervals 2 > " +
                            rows_file.string() + "\"",
                        (dir_ / "stderr.txt").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<nlohmann::json> rows = test::json_lines(rows_file);
  ASSERT_EQ(rows.size(), 5u) << r.err;
  EXPECT_EQ(rows[0]["cache"], "none");
  EXPECT_EQ(rows[0]["max_pixel_diff"], 0);
  EXPECT_EQ(rows[0]["blocks_fraction"], 1.0);
  const std::vector<std::string> labels{"fbcache threshold 0.3", "teacache threshold 0.3",
                                        "teacache threshold 1000",
                                        "taylorseer interval 2 warmup 3 order 1"};
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["cache"], labels[i - 1]);
    EXPECT_EQ(rows[i]["steps"], 6);
    EXPECT_LT(rows[i]["blocks_fraction"].get<double>(), 1.0) << rows[i].dump();
    EXPECT_GT(rows[i]["max_pixel_diff"].get<int>(), 0) << "a skip changes the image";
  }
  // A threshold no accumulation reaches: only the first and last steps run.
  EXPECT_EQ(rows[3]["full_steps"], 2);
}

}  // namespace
}  // namespace xdit
