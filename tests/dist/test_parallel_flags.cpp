// Each parallel flag acts or is refused, and what a layout's metadata says
// (issue 42): ParallelConfig alone, no ranks needed.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "dist/layouts.h"
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
  dynamic.patch_weights = {1, 0.5};  // as the mesh holds it after a re-split
  EXPECT_EQ(dynamic.label(S),
            "dp=1 cfg=1 pp=1 ulysses=1 ring=2 tp=1; patch_weights dynamic (now 1,0.5); exact");
}

// Each method's flags are refused where the method is not in the layout,
// with the method they belong to.
TEST(ParallelFlags, RefusedOutsideTheirMethod) {
  const auto& message = test::error_message;
  const auto refused = [](const std::function<void(ParallelConfig&)>& set, ParallelConfig c,
                          const std::string& want) {
    set(c);
    const std::string m = message([&] { c.validate(c.world()); });
    EXPECT_NE(m.find(want), std::string::npos) << want << " <- " << m;
  };
  refused([](ParallelConfig& c) { c.num_pipeline_patch = 4; }, layout(1, false, 2, 1),
          "--num_pipeline_patch applies to PipeFusion");
  refused(
      [](ParallelConfig& c) {
        c.attn_layer_num_for_pp = {1, 1};
      },
      layout(1, false, 1, 2), "--attn_layer_num_for_pp applies to PipeFusion");
  refused([](ParallelConfig& c) { c.patch_mode = "naive"; }, layout(1, false, 2, 1),
          "--patch_mode applies to patch parallelism");
  refused([](ParallelConfig& c) { c.warmup_steps = 2; }, layout(1, true, 2, 1),
          "--warmup_steps applies to PipeFusion and DistriFusion");
  refused(
      [](ParallelConfig& c) {
        c.patch_mode = "naive";
        c.warmup_steps = 2;
      },
      patch(1, false, 2, false), "--warmup_steps applies to PipeFusion and DistriFusion");
  refused([](ParallelConfig& c) { c.full_sync = true; }, layout(1, false, 1, 2),
          "--sync_mode full_sync applies to PipeFusion and DistriFusion");
  refused([](ParallelConfig& c) { c.warmup_steps = 2; }, patch(1, false, 2, true),
          "every step is synchronous already");
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
