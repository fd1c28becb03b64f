// The DiT base's block seam (models/block_hook.h, docs/ARCHITECTURE.md):
// hooks see the boundaries they ask for and nothing else, a skipped range
// plus the residual it would have added gives the full forward back, a hook
// that observes changes nothing, and the base's skipped blocks (SD3's
// skip-layer guidance) equal a hook that skips the same block. On the four
// tiny families (Wan over 3 frames), random non-square inputs, f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "io/model_folder.h"
#include "io/weights.h"
#include "models/dit.h"
#include "pipeline/model_family.h"
#include "test_util.h"
#include "tiny_models.h"

namespace xdit::models {
namespace {

// A tiny model with random inputs: batch 2, a 10 × 6 latent, 7 text tokens.
struct Case {
  std::unique_ptr<pipeline::ModelFamily> family;
  std::unique_ptr<DiT> model;
  Tensor latents;
  Conditioning cond;
  DiTInputs in;
};

std::unique_ptr<Case> make_case(const std::string& name) {
  auto c = std::make_unique<Case>();
  io::ModelFolder folder(std::string(XDIT_MODELS) + "/" + name);
  c->family = pipeline::ModelFamily::from_folder(folder);
  io::WeightStore weights(folder.component("transformer"));
  c->model = c->family->make_transformer(weights, DType::kF32, {});
  const DiTSpec s = c->model->spec();
  const int64_t B = 2;
  TorchGenerator gen(7);
  c->latents = gen.randn({B, s.latent_channels, s.video ? 3 : 1, 10, 6});  // Wan: 3 frames
  c->in.latents = &c->latents;
  // The family's conditioning as a request of 80 x 48 px makes it.
  c->cond.set(kText, gen.randn({B, 7, c->family->text_width()}));
  if (c->family->pooled_width() > 0)
    c->cond.set(kPooled, gen.randn({B, c->family->pooled_width()}));
  c->family->add_request_conditioning(c->cond, 80, 48, 3.5);
  c->in.cond = &c->cond;
  const auto t = static_cast<float>(1.0 / s.timestep_divisor);
  c->in.timesteps = {700.0f * t, 250.0f * t};
  return c;
}

const std::vector<std::string> kModels = test::tiny_models_in(test::Suite::kBlockHook, "-tiny");

// Records what it is shown; optionally keeps x at boundaries.
struct Recorder : BlockHook {
  std::vector<int64_t> wanted;  // empty: every boundary
  std::vector<std::string> log;
  std::map<int64_t, Tensor> before, after;
  bool at_boundary(int64_t b) const override {
    return wanted.empty() || std::find(wanted.begin(), wanted.end(), b) != wanted.end();
  }
  void begin_call(const DiTInputs&, const Streams&) override { log.push_back("begin"); }
  void end_call(Streams&) override { log.push_back("end"); }
  BlockSkip before_block(int64_t b, Streams& s) override {
    log.push_back("before " + std::to_string(b));
    before[b] = s.x.clone();
    return {};
  }
  void after_block(int64_t b, Streams& s) override {
    log.push_back("after " + std::to_string(b));
    after[b] = s.x.clone();
  }
};

// Skips [begin, end) with a residual.
struct Skipper : BlockHook {
  int64_t begin = 0, end = 0;
  Tensor residual;
  bool at_boundary(int64_t b) const override { return b == begin; }
  BlockSkip before_block(int64_t b, Streams&) override {
    return {end, residual.defined() ? &residual : nullptr};
  }
};

TEST(BlockHook, SeesOnlyTheBoundariesItAsksFor) {
  auto c = make_case("flux-dev-tiny");
  const int64_t n = c->model->spec().blocks;
  ASSERT_GE(n, 4);
  Recorder r;
  r.wanted = {2, n};
  c->model->set_block_hooks({&r});
  c->model->forward(c->in);
  const std::vector<std::string> want = {"begin", "after 1", "before 2",
                                         "after " + std::to_string(n - 1), "end"};
  EXPECT_EQ(r.log, want);
}

TEST(BlockHook, ObservingChangesNothing) {
  for (const std::string& name : kModels) {
    SCOPED_TRACE(name);
    auto c = make_case(name);
    const std::vector<float> plain = c->model->forward(c->in).to_vector();
    Recorder r;  // every boundary: every block a run of its own
    c->model->set_block_hooks({&r});
    const std::vector<float> hooked = c->model->forward(c->in).to_vector();
    // FLUX and SD3 run block by block anyway: bit-identical. PixArt fuses a
    // block's last residual add with the next block's first norm, which a
    // boundary splits into two passes over the same values.
    if (name.rfind("pixart", 0) == 0)
      EXPECT_LE(test::rel_max_err(hooked, plain), 1e-6);
    else
      EXPECT_EQ(hooked, plain);
    EXPECT_EQ(r.before.size(), static_cast<size_t>(c->model->spec().blocks));
  }
}

TEST(BlockHook, SkippedRangePlusItsResidualGivesTheFullForward) {
  for (const std::string& name : kModels) {
    SCOPED_TRACE(name);
    auto c = make_case(name);
    // Blocks [1, 3), or [1, 2) of PixArt's two (FLUX: a double- and a
    // single-stream block).
    const int64_t end = std::min<int64_t>(3, c->model->spec().blocks);
    Recorder r;
    r.wanted = {1, end};
    c->model->set_block_hooks({&r});
    const std::vector<float> full = c->model->forward(c->in).to_vector();
    // What the range added: x after its last block − x before its first.
    Skipper k;
    k.begin = 1;
    k.end = end;
    k.residual = r.after.at(end - 1).clone();
    const std::vector<float> in1 = r.before.at(1).to_vector();
    for (int64_t i = 0; i < k.residual.numel(); ++i)
      k.residual.data<float>()[i] -= in1[static_cast<size_t>(i)];
    c->model->set_block_hooks({&k});
    const std::vector<float> skipped = c->model->forward(c->in).to_vector();
    EXPECT_LE(test::rel_max_err(skipped, full), 1e-5);
    // Without the residual the same skip is a different model.
    k.residual = Tensor();
    EXPECT_GT(test::rel_max_err(c->model->forward(c->in).to_vector(), full), 1e-3);
  }
}

TEST(BlockHook, SkipBlocksEqualAHookThatSkipsWithoutResidual) {
  for (const std::string& name : kModels) {
    SCOPED_TRACE(name);
    auto c = make_case(name);
    DiTInputs in = c->in;
    in.skip_blocks = {1};
    const std::vector<float> by_input = c->model->forward(in).to_vector();
    Skipper k;
    k.begin = 1;
    k.end = 2;
    c->model->set_block_hooks({&k});
    EXPECT_EQ(c->model->forward(c->in).to_vector(), by_input);
    c->model->set_block_hooks({});
    EXPECT_GT(test::rel_max_err(c->model->forward(c->in).to_vector(), by_input), 1e-3);
  }
}

TEST(BlockHook, SkipOutsideTheStageIsOneLine) {
  auto c = make_case("sd3-tiny");
  Skipper k;
  k.begin = 1;
  k.end = c->model->spec().blocks + 1;
  c->model->set_block_hooks({&k});
  EXPECT_NE(test::error_message([&] { c->model->forward(c->in); }).find("outside this stage's"),
            std::string::npos);
  DiTInputs in = c->in;
  in.skip_blocks = {c->model->spec().blocks};
  c->model->set_block_hooks({});
  EXPECT_NE(test::error_message([&] { c->model->forward(in); }).find("outside the model's"),
            std::string::npos);
}

}  // namespace
}  // namespace xdit::models
