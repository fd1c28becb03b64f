// Each parallel flag acts or is refused, and what a layout's metadata says
// (issue 42): ParallelConfig alone, no ranks needed.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "dist/layouts.h"
#include "parallel/calibrate.h"
#include "parallel/config.h"
#include "test_util.h"

namespace xdit {
namespace {

using namespace test::layouts;

// What the metadata says of a layout (PNG text, serve's answer, the log,
// the trace): the method, its warm-up, patches and sync mode, and whether
// the image is the serial run's.
TEST(ParallelConfigLabel, NamesEverythingThatChangesTheNumbers) {
  const int64_t S = 20;
  EXPECT_EQ(layout(1, true, 2, 1).label(S), "dp=1 cfg=2 pp=1 ulysses=2 ring=1 tp=1; exact");
  EXPECT_EQ(layout(1, false, 1, 1, 2, 4, 3).label(S),
            "dp=1 cfg=1 pp=2 ulysses=1 ring=1 tp=1; pipefusion patches 4; sync_mode async, "
            "warmup 3 of 20 steps; stale");
  ParallelConfig pf = layout(1, false, 1, 1, 2);
  pf.warmup_steps.reset();  // xDiT's PipeFusion default: 1
  EXPECT_EQ(pf.sync_steps(S), 1);
  EXPECT_EQ(pf.exactness(1), "exact");  // one step: nothing stale
  pf.full_sync = true;
  EXPECT_EQ(pf.label(S),
            "dp=1 cfg=1 pp=2 ulysses=1 ring=1 tp=1; pipefusion patches 2; sync_mode full_sync, "
            "warmup 20 of 20 steps; exact");
  ParallelConfig distri = patch(1, false, 2, false);
  distri.warmup_steps.reset();  // xDiT's patch-parallel default: 4
  EXPECT_EQ(distri.sync_steps(S), 4);
  EXPECT_EQ(distri.label(S),
            "dp=1 cfg=1 pp=1 ulysses=1 ring=1 tp=1 patch=2 (displaced) parallel_vae; sync_mode "
            "async, warmup 4 of 20 steps; stale");
  EXPECT_EQ(distri.exactness(4), "exact");
  ParallelConfig naive = patch(1, false, 2, false);
  naive.warmup_steps.reset();
  naive.patch_mode = "naive";
  EXPECT_EQ(naive.exactness(S), "approximate");
  EXPECT_EQ(naive.sync_steps(S), S);  // nothing stale, nothing synchronous to wait for
  EXPECT_EQ(weighted(layout(1, false, 2, 1), {3, 1}).label(S),
            "dp=1 cfg=1 pp=1 ulysses=2 ring=1 tp=1; patch_weights 3,1; exact");
  ParallelConfig dynamic = layout(1, false, 1, 2);
  dynamic.dynamic_weights = true;
  EXPECT_EQ(dynamic.label(S),
            "dp=1 cfg=1 pp=1 ulysses=1 ring=2 tp=1; patch_weights dynamic; exact");
  ParallelConfig stages = layout(1, false, 1, 1, 2, 2, 1);
  stages.auto_stage_blocks = true;
  EXPECT_EQ(stages.label(S),
            "dp=1 cfg=1 pp=2 ulysses=1 ring=1 tp=1; pipefusion patches 2; stage blocks auto; "
            "sync_mode async, warmup 1 of 20 steps; stale");
  stages.attn_layer_num_for_pp = {20, 8};  // as the mesh holds it after the calibration
  EXPECT_EQ(stages.label(S),
            "dp=1 cfg=1 pp=2 ulysses=1 ring=1 tp=1; pipefusion patches 2; stage blocks auto (now "
            "20,8); sync_mode async, warmup 1 of 20 steps; stale");
  // With the run's token rows, the patches PipeFusion used: 3 rows hold 3 of 4.
  EXPECT_NE(layout(1, false, 1, 1, 2, 4, 1).label(S, 3).find("pipefusion patches 3"),
            std::string::npos);
  dynamic.patch_weights = {1, 0.5};  // as the mesh holds it after a re-split
  EXPECT_EQ(dynamic.label(S),
            "dp=1 cfg=1 pp=1 ulysses=1 ring=2 tp=1; patch_weights dynamic (now 1,0.5); exact");
}

// --attn_layer_num_for_pp auto: blocks in proportion to the stages' speeds,
// at least one each, summing to the model's.
TEST(StageBlocks, FollowTheSpeedsWithOneBlockAtLeast) {
  using parallel::blocks_from_speeds;
  EXPECT_EQ(blocks_from_speeds(5, {1.0, 1.0 / 3}), (std::vector<int>{4, 1}));
  EXPECT_EQ(blocks_from_speeds(28, {1.0, 1.0, 1.0}), (std::vector<int>{10, 9, 9}));
  EXPECT_EQ(blocks_from_speeds(28, {1.0, 0.5}), (std::vector<int>{19, 9}));
  EXPECT_EQ(blocks_from_speeds(5, {1.0, 1e-6}),
            (std::vector<int>{4, 1}));  // a sliver still gets one
  EXPECT_EQ(blocks_from_speeds(57, {0.2, 1.0, 0.7, 0.4}), (std::vector<int>{5, 25, 17, 10}));
  EXPECT_NE(test::error_message([] {
              blocks_from_speeds(2, {1.0, 1.0, 1.0});
            }).find("2 blocks cannot give each of the 3 stages one"),
            std::string::npos);
}

// A method's flags where the method is not in the layout, and a warm-up
// under full_sync, change nothing: accepted (with a note line), as xDiT's
// scripts pass them; xdit's own row-weight flags are refused outside their
// method, with the method they belong to.
TEST(ParallelFlags, ConsistentNoOpsAcceptedOthersRefusedOutsideTheirMethod) {
  const auto& message = test::error_message;
  const auto refused = [](const std::function<void(ParallelConfig&)>& set, ParallelConfig c,
                          const std::string& want) {
    set(c);
    const std::string m = message([&] { c.validate(c.world()); });
    EXPECT_NE(m.find(want), std::string::npos) << want << " <- " << m;
  };
  // Accepted, with exactly one note line naming the flag.
  const auto accepted = [](const std::function<void(ParallelConfig&)>& set, ParallelConfig c,
                           const std::string& note) {
    EXPECT_TRUE(c.ignored_flags().empty()) << c.describe();
    set(c);
    EXPECT_NO_THROW(c.validate(c.world())) << note;
    const std::vector<std::string> lines = c.ignored_flags();
    EXPECT_EQ(lines.size(), 1u) << note;
    if (!lines.empty()) EXPECT_EQ(lines[0].rfind(note, 0), 0u) << note << " <- " << lines[0];
    return c;
  };
  accepted([](ParallelConfig& c) { c.num_pipeline_patch = 4; }, layout(1, false, 2, 1),
           "--num_pipeline_patch applies to PipeFusion");
  accepted(
      [](ParallelConfig& c) {
        c.attn_layer_num_for_pp = {1, 1};
      },
      layout(1, false, 1, 2), "--attn_layer_num_for_pp applies to PipeFusion");
  accepted([](ParallelConfig& c) { c.auto_stage_blocks = true; }, layout(1, false, 2, 1),
           "--attn_layer_num_for_pp applies to PipeFusion");
  accepted([](ParallelConfig& c) { c.patch_mode = "naive"; }, layout(1, false, 2, 1),
           "--patch_mode applies to patch parallelism");
  // xDiT's scripts pass --warmup_steps 1 to USP runs too.
  accepted([](ParallelConfig& c) { c.warmup_steps = 2; }, layout(1, true, 2, 1),
           "--warmup_steps applies to PipeFusion and DistriFusion");
  accepted(
      [](ParallelConfig& c) {
        c.patch_mode = "naive";
        c.warmup_steps = 2;
      },
      patch(1, false, 2, false), "--warmup_steps applies to PipeFusion and DistriFusion");
  accepted([](ParallelConfig& c) { c.full_sync = true; }, layout(1, false, 1, 2),
           "--sync_mode full_sync applies to PipeFusion and DistriFusion");
  // --warmup_steps N --sync_mode full_sync: every step synchronous, exact.
  const ParallelConfig both =
      accepted([](ParallelConfig& c) { c.warmup_steps = 2; }, patch(1, false, 2, true),
               "--warmup_steps 2 with --sync_mode full_sync: every step is synchronous already");
  EXPECT_EQ(both.sync_steps(20), 20);
  EXPECT_EQ(both.exactness(20), "exact");
  // Contradictions and malformed values stay refused.
  refused([](ParallelConfig& c) { c.warmup_steps = -1; }, patch(1, false, 2, false),
          "--warmup_steps must be at least 0");
  refused([](ParallelConfig& c) { c.num_pipeline_patch = 1; }, layout(1, false, 1, 1, 2),
          "PipeFusion needs at least one patch per stage");
  refused([](ParallelConfig& c) { c.dynamic_weights = true; }, layout(1, true, 1, 1),
          "--patch_weights dynamic re-splits the rows of the ranks that split them");
  refused([](ParallelConfig& c) { c.dynamic_weights = true; }, layout(1, false, 2, 1, 2, 2, 3),
          "and no PipeFusion");
  refused(
      [](ParallelConfig& c) {
        c.dynamic_weights = true;
        c.patch_weights = {1, 2};
      },
      layout(1, false, 2, 1), "--patch_weights is either auto, dynamic or numbers");
  refused([](ParallelConfig& c) { c.patch_weights = {2}; }, layout(1, true, 1, 1),
          "--patch_weights applies to the ranks that split the image's rows");
  // The command the auto refusal suggests under PipeFusion is one that runs.
  ParallelConfig suggested = weighted(layout(1, false, 2, 1, 2), {2, 1});
  EXPECT_NO_THROW(suggested.validate(4));
}

}  // namespace
}  // namespace xdit
