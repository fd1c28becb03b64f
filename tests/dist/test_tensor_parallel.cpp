// Tensor parallelism under mpirun, model by model: PixArt (self- and
// cross-attention, micro-conditions), FLUX.1 (double- and single-stream
// blocks, guidance), SD3.5 (joint blocks, dual attention, qk-norm, the
// context_pre_only last block), Wan (q/k RMSNorm across the heads of every
// rank, 3-D rotary positions over frames), the T5 encoder and the decoder-LLM
// text encoders (Qwen2 / Qwen3: whole GQA groups per rank), each split over T ranks
// (T = the world size, and T x Ulysses on 4 ranks) against the whole model
// on the same random weights and inputs (f32, ≤ 1e-4 relative). Each rank's
// loaded weight bytes are checked: the shares of all ranks add up to what
// the whole model reads, less what stays whole (modulation, embeddings,
// norms), and one rank holds that whole part plus 1/T of the rest. The
// pipeline-level runs (TP x CFG, x PipeFusion, x data parallel, ...) are in
// test_parallel.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "core/rng.h"
#include "dist/world.h"
#include "io/json.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/flux.h"
#include "models/pixart.h"
#include "models/qwen_text.h"
#include "models/sd3.h"
#include "models/t5.h"
#include "models/wan.h"
#include "parallel/config.h"
#include "parallel/usp_attention.h"
#include "pipeline/model_family.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

using parallel::Mesh;
using parallel::ParallelConfig;
using test::world;

// The layout T x Ulysses U over the whole world; nullopt (the caller skips)
// when it does not fit.
std::optional<ParallelConfig> layout(int T, int U) {
  ParallelConfig pc;
  pc.tensor_parallel_degree = T;
  pc.ulysses_degree = U;
  if (pc.world() != world().size()) return std::nullopt;
  return pc;
}

// Random conditioning for a batch of 2 with odd sizes: latents [2, C, 1, H, W],
// text [2, 5, width], a padding mask, pooled [2, pooled], two timesteps.
struct Inputs {
  Tensor latents, text, mask, pooled, resolution, aspect;
  mutable models::Conditioning cond;  // what at() hands the model
  models::DiTInputs at(int64_t r0 = 0, int64_t r1 = 0, bool guidance = false) const {
    models::DiTInputs in;
    in.latents = &latents;
    in.timesteps = {0.31f, 0.77f};
    cond = {};
    if (guidance) cond.set(models::kGuidance, Tensor::from_vector({3.5f, 2.0f}, {2}));
    cond.set(models::kText, text);
    cond.set(models::kTextMask, mask);
    cond.set(models::kPooled, pooled);
    cond.set(models::kResolution, resolution);
    cond.set(models::kAspectRatio, aspect);
    in.cond = &cond;
    in.row_begin = r0;
    in.row_end = r1;
    return in;
  }
};

Inputs inputs(int64_t channels, int64_t H, int64_t W, int64_t text_width, int64_t pooled) {
  TorchGenerator g(21);
  Inputs in;
  in.latents = g.randn({2, channels, 1, H, W});
  in.text = g.randn({2, 5, text_width});
  if (pooled > 0) in.pooled = g.randn({2, pooled});
  return in;
}

// Bytes of all ranks' shares of the tensor-parallel group, summed.
double group_sum(comm::Communicator& c, double v) {
  c.allreduce_sum(&v, 1);
  return v;
}

// The loaded bytes of `part` (split over T ranks of `group`) against the
// `whole` model's: shares add up, and this rank holds its whole part plus
// about 1/T of the rest (row-parallel biases sit on rank 0).
void check_loaded(const io::WeightSource& part, const io::WeightSource& whole,
                  comm::Communicator& group, double max_whole_fraction) {
  const int T = group.size();
  const double total = static_cast<double>(whole.loaded().total);
  const double sliced = static_cast<double>(part.loaded().sliced);
  const double kept_whole = static_cast<double>(part.loaded().total) - sliced;
  EXPECT_EQ(group_sum(group, sliced) + kept_whole, total)
      << "the shares and the whole part must add up to the whole model's weights";
  EXPECT_LE(kept_whole / total, max_whole_fraction);
  const double ideal = kept_whole + (total - kept_whole) / T;
  EXPECT_NEAR(static_cast<double>(part.loaded().total), ideal, 0.02 * total)
      << "rank " << group.rank() << " of " << T;
  EXPECT_LT(static_cast<double>(part.loaded().total), (max_whole_fraction + 1.0 / T) * total)
      << "a rank holds about 1/T of the split weights";
}

// The whole model's output rows [r0, r1) (patch rows of `patch` latent rows).
std::vector<float> rows_of(const Tensor& out, int64_t r0, int64_t r1, int64_t patch) {
  const int64_t B = out.dim(0), C = out.dim(1), H = out.dim(2), W = out.dim(3);
  const int64_t y0 = r0 * patch, n = (r1 - r0) * patch;
  std::vector<float> v;
  for (int64_t bc = 0; bc < B * C; ++bc)
    v.insert(v.end(), out.data<float>() + (bc * H + y0) * W,
             out.data<float>() + (bc * H + y0 + n) * W);
  return v;
}

// One model split T ways (x Ulysses U over the image rows) against the whole.
template <class Model, class Config>
void check_split(const Config& cfg, const Inputs& in, int T, int U, int64_t grid_rows,
                 int64_t patch, bool guidance, double max_whole_fraction) {
  auto pc = layout(T, U);
  if (!pc) GTEST_SKIP() << "tp " << T << " x ulysses " << U << " needs " << T * U << " ranks";
  Mesh mesh(*pc, world());
  io::RandomWeights whole_w(5), part_w(5);
  Model whole(cfg, whole_w, DType::kF32);
  const Tensor want = whole.forward(in.at(0, 0, guidance));
  models::DiTStage stage;
  stage.tp = nn::TensorParallel::of(mesh.tp_group());
  Model split(cfg, part_w, DType::kF32, stage);
  // Ulysses: this SP rank's patch rows (the first ranks one more when uneven).
  const int64_t sp = mesh.coord().sp;
  const int64_t r0 = grid_rows * sp / U, r1 = grid_rows * (sp + 1) / U;
  parallel::UspAttention usp(mesh.ulysses_group(), mesh.ring_group());
  if (U > 1) {
    std::vector<int64_t> tokens;
    const int64_t gw = in.latents.dim(4) / patch;
    for (int k = 0; k < U; ++k)
      tokens.push_back((grid_rows * (k + 1) / U - grid_rows * k / U) * gw);
    usp.set_sequence_split(tokens);
    split.set_attention_backend(&usp);
  }
  const Tensor got = split.forward(in.at(U > 1 ? r0 : 0, U > 1 ? r1 : 0, guidance));
  const std::vector<float> w = U > 1 ? rows_of(want, r0, r1, patch) : want.to_vector();
  ASSERT_EQ(static_cast<size_t>(got.numel()), w.size());
  EXPECT_LE(test::rel_max_err(got.to_vector(), w), 1e-4)
      << "tp " << T << " x ulysses " << U << ", rank " << world().rank();
  check_loaded(part_w, whole_w, mesh.tp_group(), max_whole_fraction);
}

// 4 heads (split 2 and 4 ways; 2 x Ulysses 2), odd widths elsewhere.
models::PixArtConfig pixart() {
  models::PixArtConfig c;
  c.num_layers = 2;
  c.num_attention_heads = 4;
  c.attention_head_dim = 6;
  c.cross_attention_dim = 24;
  c.caption_channels = 10;
  c.in_channels = 4;
  c.out_channels = 8;
  c.patch_size = 2;
  c.sample_size = 16;
  c.use_additional_conditions = true;
  return c;
}
Inputs pixart_inputs() {
  Inputs in = inputs(4, 10, 6, 10, 0);  // 5 x 3 patches
  in.mask = Tensor::from_vector({1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {2, 5});
  in.resolution = Tensor::from_vector({80, 48, 80, 48}, {2, 2});
  in.aspect = Tensor::from_vector({80.0f / 48, 80.0f / 48}, {2, 1});
  return in;
}

models::FluxConfig flux() {
  models::FluxConfig c;
  c.in_channels = 16;
  c.num_layers = 1;
  c.num_single_layers = 2;
  c.attention_head_dim = 8;
  c.num_attention_heads = 4;
  c.joint_attention_dim = 12;
  c.pooled_projection_dim = 10;
  c.guidance_embeds = true;
  c.axes_dims_rope = {2, 2, 4};
  return c;
}

models::SD3Config sd35() {
  models::SD3Config c;
  c.sample_size = 8;
  c.patch_size = 2;
  c.in_channels = 4;
  c.out_channels = 4;
  c.num_layers = 3;  // the last context_pre_only
  c.attention_head_dim = 6;
  c.num_attention_heads = 4;
  c.joint_attention_dim = 12;
  c.caption_projection_dim = 24;
  c.pooled_projection_dim = 10;
  c.pos_embed_max_size = 8;
  c.qk_norm = true;
  c.dual_attention_layers = {0, 2};
  return c;
}

// 4 heads of 6 (rotary axes 2 / 2 / 2), 3 frames of 3 x 5 patches: the
// Ulysses split of the 9 frame-major token rows crosses a frame.
models::WanConfig wan() {
  models::WanConfig c;
  c.num_layers = 2;
  c.num_attention_heads = 4;
  c.attention_head_dim = 6;
  c.in_channels = c.out_channels = 4;
  c.text_dim = 12;
  c.freq_dim = 16;
  c.ffn_dim = 20;
  return c;
}
Inputs wan_inputs() {
  TorchGenerator g(22);
  Inputs in;
  in.latents = g.randn({2, 4, 3, 6, 10});
  in.text = g.randn({2, 5, 12});
  return in;
}

// What stays whole, as a share of these small models' weights (their
// modulation and embeddings are a larger share than at full size).
constexpr double kPixArtWhole = 0.55, kFluxWhole = 0.55, kSd3Whole = 0.6, kWanWhole = 0.6;

TEST(TensorParallel, PixArtSplitOverTheWorldEqualsWhole) {
  check_split<models::PixArtTransformer>(pixart(), pixart_inputs(), world().size(), 1, 5, 2, false,
                                         kPixArtWhole);
}
TEST(TensorParallel, PixArtTp2TimesUlysses2EqualsWhole) {
  check_split<models::PixArtTransformer>(pixart(), pixart_inputs(), 2, 2, 5, 2, false,
                                         kPixArtWhole);
}
TEST(TensorParallel, FluxSplitOverTheWorldEqualsWhole) {
  check_split<models::FluxTransformer>(flux(), inputs(4, 10, 6, 12, 10), world().size(), 1, 5, 2,
                                       true, kFluxWhole);
}
TEST(TensorParallel, FluxTp2TimesUlysses2EqualsWhole) {
  check_split<models::FluxTransformer>(flux(), inputs(4, 10, 6, 12, 10), 2, 2, 5, 2, true,
                                       kFluxWhole);
}
TEST(TensorParallel, Sd35SplitOverTheWorldEqualsWhole) {
  check_split<models::SD3Transformer>(sd35(), inputs(4, 10, 6, 12, 10), world().size(), 1, 5, 2,
                                      false, kSd3Whole);
}
TEST(TensorParallel, Sd35Tp2TimesUlysses2EqualsWhole) {
  check_split<models::SD3Transformer>(sd35(), inputs(4, 10, 6, 12, 10), 2, 2, 5, 2, false,
                                      kSd3Whole);
}
TEST(TensorParallel, WanSplitOverTheWorldEqualsWhole) {
  check_split<models::WanTransformer>(wan(), wan_inputs(), world().size(), 1, 9, 2, false,
                                      kWanWhole);
}
TEST(TensorParallel, WanTp2TimesUlysses2EqualsWhole) {
  check_split<models::WanTransformer>(wan(), wan_inputs(), 2, 2, 9, 2, false, kWanWhole);
}

// bf16 products: the split sums its shares in f32, so it stays within bf16's rounding.
TEST(TensorParallel, PixArtBf16StaysCloseToWhole) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "this CPU has no native bf16";
  ParallelConfig pc;
  pc.tensor_parallel_degree = world().size();
  Mesh mesh(pc, world());
  io::RandomWeights w(5);
  const Inputs in = pixart_inputs();
  models::PixArtTransformer whole(pixart(), w, DType::kBF16);
  models::DiTStage stage;
  stage.tp = nn::TensorParallel::of(mesh.tp_group());
  models::PixArtTransformer split(pixart(), w, DType::kBF16, stage);
  EXPECT_LE(
      test::rel_max_err(split.forward(in.at()).to_vector(), whole.forward(in.at()).to_vector()),
      3e-2);
}

// T5 v1.1 (gated GELU), the ReLU variant and UMT5 (a bias table per block),
// with and without the padding mask, from random weights; T splits the 4
// heads and d_ff = 28.
TEST(TensorParallel, T5EncoderSplitOverTheWorldEqualsWhole) {
  ParallelConfig pc;
  pc.tensor_parallel_degree = world().size();
  Mesh mesh(pc, world());
  for (const char* variant : {"gated-gelu", "relu", "umt5"}) {
    const bool gated = std::string(variant) != "relu";
    models::T5Config c;
    c.bias_per_block = std::string(variant) == "umt5";
    c.vocab_size = 50;
    c.d_model = 20;
    c.d_kv = 6;
    c.num_heads = 4;
    c.d_ff = 28;
    c.num_layers = 2;
    c.relative_attention_num_buckets = 8;
    c.relative_attention_max_distance = 16;
    c.gated_gelu = gated;
    io::RandomWeights whole_w(9), part_w(9);
    models::T5Encoder whole(c, whole_w, DType::kF32);
    models::T5Encoder split(c, part_w, DType::kF32, nn::TensorParallel::of(mesh.tp_group()));
    const std::vector<int32_t> ids{3, 17, 42, 8, 1, 0, 5, 9, 12, 33, 2, 1, 0, 0};
    const std::vector<uint8_t> mask{1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0};
    for (const auto& m : {mask, std::vector<uint8_t>{}})
      EXPECT_LE(test::rel_max_err(split.encode(ids, m, 2, 7).to_vector(),
                                  whole.encode(ids, m, 2, 7).to_vector()),
                1e-4)
          << variant << (m.empty() ? ", no mask" : ", masked");
    // The embedding table (50 x 20) stays whole.
    check_loaded(part_w, whole_w, mesh.tp_group(), 0.2);
  }
}

// The decoder-LLM text encoders (Qwen3 with q/k norms, Qwen2 with q/k/v
// biases), 8 query heads over 4 key/value heads: T ranks each take whole GQA
// groups and a share of the SwiGLU units, right-padded prompts, the states
// after the last layer (normed) and after the first.
TEST(TensorParallel, QwenTextEncoderSplitOverTheWorldEqualsWhole) {
  ParallelConfig pc;
  pc.tensor_parallel_degree = world().size();
  if (4 % world().size() != 0)
    GTEST_SKIP() << "4 key/value heads do not split " << world().size() << " ways";
  Mesh mesh(pc, world());
  for (const char* type : {"qwen3", "qwen2"}) {
    models::QwenTextConfig c;
    c.model_type = type;
    c.qk_norm = std::string(type) == "qwen3";
    c.qkv_bias = !c.qk_norm;
    c.vocab_size = 40;
    c.hidden_size = 24;
    c.intermediate_size = 32;
    c.num_layers = 2;
    c.num_heads = 8;
    c.num_kv_heads = 4;
    c.head_dim = 6;
    io::RandomWeights whole_w(11), part_w(11);
    models::QwenTextEncoder whole(c, whole_w, DType::kF32);
    models::QwenTextEncoder split(c, part_w, DType::kF32, -1,
                                  nn::TensorParallel::of(mesh.tp_group()));
    const std::vector<int32_t> ids{3, 17, 22, 8, 1, 0, 5, 9, 12, 33, 2, 1, 0, 0};
    const std::vector<uint8_t> mask{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
    for (const int64_t after : {int64_t{1}, c.num_layers})
      EXPECT_LE(test::rel_max_err(split.encode(ids, mask, 2, 7, after, after == 2).to_vector(),
                                  whole.encode(ids, mask, 2, 7, after, after == 2).to_vector()),
                1e-4)
          << type << " after " << after << " layers";
  }
}

// The tiny model folder's T5 from its safetensors file: each rank reads its
// shares (strided reads of the mapping) and encodes as the whole encoder.
TEST(TensorParallel, T5FromFileReadsOnlyItsShares) {
  ParallelConfig pc;
  pc.tensor_parallel_degree = world().size();
  const std::string dir = std::string(XDIT_MODELS) + "/pixart-sigma-tiny/text_encoder";
  const auto c = models::T5Config::from_json(io::read_json_file(dir + "/config.json"), dir);
  if (c.num_heads % pc.tensor_parallel_degree != 0)
    GTEST_SKIP() << "the tiny T5's " << c.num_heads << " heads do not split "
                 << pc.tensor_parallel_degree << " ways";
  Mesh mesh(pc, world());
  io::WeightStore whole_w(dir), part_w(dir);
  models::T5Encoder whole(c, whole_w, DType::kF32);
  models::T5Encoder split(c, part_w, DType::kF32, nn::TensorParallel::of(mesh.tp_group()));
  const std::vector<int32_t> ids{3, 17, 42, 8, 1, 0, 5, 9, 12, 33, 2, 1};
  EXPECT_LE(test::rel_max_err(split.encode(ids, {}, 2, 6).to_vector(),
                              whole.encode(ids, {}, 2, 6).to_vector()),
            1e-4);
  check_loaded(part_w, whole_w, mesh.tp_group(), 0.6);
}

// The pipeline checks the T5 encoder's split from its config, before any
// weight loads (the CLI runs the transformer's checks: test_cli_mpi).
TEST(TensorParallel, T5ThatCannotSplitIsNamed) {
  const io::ModelFolder folder(std::string(XDIT_MODELS) + "/pixart-sigma-tiny");
  auto family = pipeline::ModelFamily::from_folder(folder);
  family->check_tensor_parallel(3);  // the text side is not open yet: nothing to check
  family->open_text(folder);
  family->check_tensor_parallel(2);  // 4 heads, d_ff 48
  EXPECT_NE(test::error_message([&] { family->check_tensor_parallel(3); })
                .find("the 4 attention heads of the T5 text encoder are not divisible by "
                      "--tensor_parallel_degree 3"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] { family->check_tensor_parallel(8); })
                .find("--tensor_parallel_degree 8 is larger than the 4 attention heads of the "
                      "T5 text encoder"),
            std::string::npos);
}

// Issue 67: tensor parallelism whose degree divides the transformer's heads
// but not the text encoder's (the tiny PixArt-Σ's T5 made one-headed, under
// TP 2) runs that encoder whole on each rank, with a note, instead of
// refusing the run; the transformer stays split, and the embeddings and the
// final latents are the serial run's.
TEST(TensorParallel, ATextEncoderThatCannotSplitRunsWholeBesideTheSplitTransformer) {
  const int W = world().size();
  if (W != 2) GTEST_SKIP() << "the tiny PixArt-Σ's 2 heads split over 2 ranks, not " << W;
  namespace fs = std::filesystem;
  // One folder for the job's ranks (their parent: the same mpirun).
  const fs::path dir = fs::temp_directory_path() / ("xdit_tp_whole_" + std::to_string(::getppid()));
  if (world().rank() == 0) {
    fs::remove_all(dir);
    fs::copy(std::string(XDIT_MODELS) + "/pixart-sigma-tiny", dir, fs::copy_options::recursive);
    const fs::path te = dir / "text_encoder";
    io::Json cfg = io::read_json_file((te / "config.json").string());
    const int64_t inner = cfg["num_heads"].get<int64_t>() * cfg["d_kv"].get<int64_t>();
    cfg["num_heads"] = 1;
    cfg["d_kv"] = inner;  // the projections keep their shapes
    std::ofstream((te / "config.json").string(), std::ios::trunc) << cfg.dump(2);
    // The relative-attention bias [buckets, heads]: its first head's column.
    const std::string bias = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    const io::Json index = io::read_json_file((te / "model.safetensors.index.json").string());
    const std::string shard = (te / index["weight_map"][bias].get<std::string>()).string();
    std::map<std::string, Tensor> tensors = io::read_safetensors_f32(shard);
    const Tensor& b = tensors.at(bias);
    std::vector<float> column;
    for (int64_t i = 0; i < b.dim(0); ++i) column.push_back(b.data<float>()[i * b.dim(1)]);
    tensors[bias] = Tensor::from_vector(column, {b.dim(0), 1});
    io::write_safetensors(shard, {tensors.begin(), tensors.end()});
  }
  world().barrier();
  pipeline::ImageRequest r;
  r.prompts = {"a red fox in the snow"};
  r.negative_prompt = "blurry";
  r.height = 128;
  r.width = 96;
  r.resolution_binning = false;
  r.num_inference_steps = 2;
  pipeline::Pipeline serial(dir.string(), DType::kF32);
  const pipeline::Plan serial_plan = serial.plan(r);
  const pipeline::PromptEmbeddings want = serial.encode_prompts(serial_plan);
  const size_t whole_bytes = serial.family().t5_weights()->loaded().total;
  const Tensor want_latents = serial.generate_latents(serial_plan);
  ParallelConfig pc;
  pc.tensor_parallel_degree = W;
  Mesh mesh(pc, world());
  pipeline::Pipeline pipe(dir.string(), DType::kF32);
  pipe.set_mesh(&mesh);
  const pipeline::Plan plan = pipe.plan(r);  // (refused before)
  const pipeline::PromptEmbeddings got = pipe.encode_prompts(plan);
  EXPECT_LE(test::rel_max_err(got.cond.at(models::kText).to_vector(),
                              want.cond.at(models::kText).to_vector()),
            1e-5);
  EXPECT_EQ(pipe.family().t5_weights()->loaded().total, whole_bytes)
      << "the encoder is whole on each rank";
  EXPECT_LE(test::rel_max_err(pipe.generate_latents(plan).to_vector(), want_latents.to_vector()),
            1e-4);
  world().barrier();
  if (world().rank() == 0) fs::remove_all(dir);
}

// On the CPU every multi-rank layout splits the pipeline's T5 encoder over
// the ranks of a data-parallel replica (they all encode the same prompts),
// as far as its heads and feed-forward units divide, whatever the
// transformer's own layout: each rank reads its share of the weights and
// every rank gets the serial pipeline's embeddings.
TEST(TensorParallel, PipelineSplitsT5OverEachReplica) {
  const int W = world().size();
  const std::string folder = std::string(XDIT_MODELS) + "/pixart-sigma-tiny";
  pipeline::ImageRequest r;
  r.prompts = {"a red fox in the snow", "a cat"};
  r.negative_prompt = "blurry";
  r.height = 128;
  r.width = 96;
  r.resolution_binning = false;
  pipeline::Pipeline serial(folder, DType::kF32);
  const pipeline::PromptEmbeddings want = serial.encode_prompts(serial.plan(r));
  // Layouts and the split each gives the tiny T5 (4 heads, d_ff 48).
  std::vector<std::pair<ParallelConfig, int>> layouts;
  ParallelConfig cfg_sp;
  cfg_sp.use_cfg_parallel = true;
  cfg_sp.ulysses_degree = W / 2;
  layouts.emplace_back(cfg_sp, W);
  ParallelConfig dp_ring;
  dp_ring.data_parallel_degree = 2;
  dp_ring.ring_degree = W / 2;
  layouts.emplace_back(dp_ring, W / 2);
  ParallelConfig tp_pp;  // wider than the transformer's own split at 4 ranks
  tp_pp.tensor_parallel_degree = 2;
  tp_pp.pipefusion_parallel_degree = W / 2;
  layouts.emplace_back(tp_pp, W);
  for (const auto& [pc, split] : layouts) {
    SCOPED_TRACE(pc.describe());
    ASSERT_EQ(pc.world(), W) << "the test's layouts are for 2 or 4 ranks";
    Mesh mesh(pc, world());
    pipeline::Pipeline pipe(folder, DType::kF32);
    pipe.set_mesh(&mesh);
    const pipeline::PromptEmbeddings got = pipe.encode_prompts(pipe.plan(r));
    EXPECT_LE(test::rel_max_err(got.cond.at(models::kText).to_vector(),
                                want.cond.at(models::kText).to_vector()),
              1e-4);
    EXPECT_LE(test::rel_max_err(got.uncond.at(models::kText).to_vector(),
                                want.uncond.at(models::kText).to_vector()),
              1e-4);
    EXPECT_EQ(got.cond.at(models::kTextMask).to_vector(),
              want.cond.at(models::kTextMask).to_vector());
    const io::WeightStore& part = *pipe.family().t5_weights();
    const io::WeightStore& whole = *serial.family().t5_weights();
    if (split == 1)
      EXPECT_EQ(part.loaded().total, whole.loaded().total);
    else
      check_loaded(part, whole, mesh.text_group(split), 0.6);  // the embedding stays whole
  }
}

TEST(TensorParallel, MeshGroupsAreConsecutiveRanks) {
  if (world().size() < 4) GTEST_SKIP() << "needs 4 ranks for tp 2 inside cfg 2";
  ParallelConfig pc;
  pc.tensor_parallel_degree = 2;
  pc.use_cfg_parallel = true;
  pc.data_parallel_degree = world().size() / 4;
  if (pc.world() != world().size()) GTEST_SKIP() << "world size is not a multiple of 4";
  Mesh mesh(pc, world());
  EXPECT_EQ(mesh.tp_group().size(), 2);
  EXPECT_EQ(mesh.tp_group().rank(), world().rank() % 2);
  EXPECT_EQ(mesh.coord().cfg, (world().rank() / 2) % 2);
  // tp rank r of one CFG half meets tp rank r of the other in its CFG group.
  float v = static_cast<float>(world().rank());
  mesh.cfg_group().allreduce_sum(&v, 1);
  const int base = world().rank() % 2 + (world().rank() / 4) * 4;
  EXPECT_EQ(v, static_cast<float>(base + base + 2));
}

}  // namespace
}  // namespace xdit
