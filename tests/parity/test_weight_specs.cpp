// Each model's weight list (what validate() checks against the safetensors
// headers before loading) equals, name for name and shape for shape, what
// its constructor reads — over configurations that switch every optional
// part on and off — and the shipped tiny models pass the check.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "io/model_folder.h"
#include "io/weights.h"
#include "models/flux.h"
#include "models/pixart.h"
#include "models/sd3.h"
#include "models/t5.h"
#include "models/vae.h"
#include "test_util.h"

namespace xdit {
namespace {

// Random weights of whatever shape is asked for, remembering each request.
class Recording : public io::WeightSource {
 public:
  bool has(const std::string& name) const override { return name != "shared.weight" || shared_; }
  size_t stored_bytes() const override { return 0; }
  std::map<std::string, Shape> asked() const { return asked_; }
  bool shared_ = true;

 protected:
  Tensor read(const std::string& name, const Shape& shape) const override {
    EXPECT_TRUE(asked_.emplace(name, shape).second) << name << " read twice (or whole and sliced)";
    return random_.get(name, shape);
  }
  // A weight may be read in several slices (FLUX's proj_out by its two
  // column blocks), each naming the whole shape; never whole as well.
  Tensor read_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                    int64_t count) const override {
    if (sliced_.insert(name).second)
      EXPECT_TRUE(asked_.emplace(name, shape).second) << name << " read whole and sliced";
    else
      EXPECT_EQ(asked_.at(name), shape) << name << " sliced with two shapes";
    return random_.get_slice(name, shape, dim, begin, count);
  }

 private:
  mutable std::set<std::string> sliced_;
  io::RandomWeights random_{7};
  mutable std::map<std::string, Shape> asked_;
};

std::map<std::string, Shape> as_map(const io::WeightSpecs& specs) {
  std::map<std::string, Shape> m;
  for (const auto& [n, s] : specs) EXPECT_TRUE(m.emplace(n, s).second) << n << " listed twice";
  return m;
}

void expect_same(const std::map<std::string, Shape>& listed,
                 const std::map<std::string, Shape>& read) {
  EXPECT_EQ(listed.size(), read.size());
  for (const auto& [n, s] : read) {
    auto it = listed.find(n);
    ASSERT_NE(it, listed.end()) << n << " is read but not listed";
    EXPECT_EQ(it->second, s) << n;
  }
}

// Under tensor parallelism a rank reads shares of the same weights: the
// names and whole shapes it asks for are the list's (loading only: no
// group); rank 0 reads all, the others all but the row-parallel biases.
void expect_shares(const std::map<std::string, Shape>& listed,
                   const std::map<std::string, Shape>& read, int rank) {
  if (rank == 0) return expect_same(listed, read);
  for (const auto& [n, s] : read) {
    auto it = listed.find(n);
    ASSERT_NE(it, listed.end()) << n << " is read but not listed";
    EXPECT_EQ(it->second, s) << n;
  }
  int biases = 0;
  for (const auto& [n, s] : listed)
    if (!read.count(n)) {
      EXPECT_TRUE(n.ends_with("to_out.0.bias") || n.ends_with("net.2.bias") ||
                  n.ends_with("proj_out.bias") || n.ends_with("to_add_out.bias"))
          << n << " is listed but rank " << rank << " does not read it";
      ++biases;
    }
  EXPECT_GT(biases, 0);
}

TEST(WeightSpecs, TensorParallelSharesReadTheListedWeights) {
  for (int rank : {0, 1}) {
    models::DiTStage stage;
    stage.tp = {rank, 2, nullptr};
    SCOPED_TRACE(::testing::Message() << "tp rank " << rank << " of 2");
    models::PixArtConfig p;
    p.num_layers = 2;
    p.num_attention_heads = 2;
    p.attention_head_dim = 6;
    p.cross_attention_dim = 12;
    p.caption_channels = 10;
    p.sample_size = 16;
    Recording pw;
    models::PixArtTransformer pt(p, pw, DType::kF32, stage);
    expect_shares(as_map(p.weight_specs()), pw.asked(), rank);
    models::FluxConfig f;
    f.in_channels = 12;
    f.num_layers = 1;
    f.num_single_layers = 2;
    f.attention_head_dim = 8;
    f.num_attention_heads = 2;
    f.joint_attention_dim = 10;
    f.pooled_projection_dim = 6;
    f.axes_dims_rope = {2, 2, 4};
    Recording fw;
    models::FluxTransformer ft(f, fw, DType::kF32, stage);
    expect_shares(as_map(f.weight_specs()), fw.asked(), rank);
  }
}

TEST(WeightSpecs, PixArtListsWhatItsConstructorReads) {
  for (bool micro : {true, false})
    for (bool bias : {true, false})
      for (models::DiTStage stage :
           {models::DiTStage{}, models::DiTStage{0, 2, true, false},
            models::DiTStage{1, 3, false, true}, models::DiTStage{1, 2, false, false}}) {
        models::PixArtConfig c;
        c.num_layers = 3;
        c.num_attention_heads = 3;
        c.attention_head_dim = 4;
        c.cross_attention_dim = 12;
        c.caption_channels = 10;
        c.in_channels = 5;
        c.out_channels = 7;
        c.patch_size = 3;
        c.sample_size = 16;
        c.use_additional_conditions = micro;
        c.attention_bias = bias;
        Recording w;
        models::PixArtTransformer t(c, w, DType::kF32, stage);
        SCOPED_TRACE(::testing::Message() << "micro " << micro << " bias " << bias << " blocks "
                                          << stage.block_begin << "-" << stage.block_end);
        expect_same(as_map(c.weight_specs(stage)), w.asked());
      }
}

TEST(WeightSpecs, FluxListsWhatItsConstructorReadsForEveryStage) {
  // Blocks by flat index: 2 double-stream (0, 1), then 3 single-stream (2-4).
  for (bool guidance : {true, false})
    for (models::DiTStage stage :
         {models::DiTStage{}, models::DiTStage{0, 2, true, false},
          models::DiTStage{1, 4, false, false}, models::DiTStage{2, 5, false, true}}) {
      models::FluxConfig c;
      c.in_channels = 12;
      c.num_layers = 2;
      c.num_single_layers = 3;
      c.attention_head_dim = 8;
      c.num_attention_heads = 2;
      c.joint_attention_dim = 10;
      c.pooled_projection_dim = 6;
      c.guidance_embeds = guidance;
      c.axes_dims_rope = {2, 2, 4};
      Recording w;
      models::FluxTransformer t(c, w, DType::kF32, stage);
      SCOPED_TRACE(::testing::Message() << "guidance " << guidance << " blocks "
                                        << stage.block_begin << "-" << stage.block_end);
      expect_same(as_map(c.weight_specs(stage)), w.asked());
    }
}

TEST(WeightSpecs, Sd3ListsWhatItsConstructorReadsForEveryStage) {
  // 4 blocks, the last context_pre_only; dual attention on 0 and 3.
  for (bool qk : {true, false})
    for (bool dual : {true, false})
      for (models::DiTStage stage :
           {models::DiTStage{}, models::DiTStage{0, 2, true, false},
            models::DiTStage{1, 3, false, false}, models::DiTStage{2, 4, false, true}}) {
        models::SD3Config c;
        c.sample_size = 8;
        c.patch_size = 2;
        c.in_channels = 6;
        c.out_channels = 5;
        c.num_layers = 4;
        c.attention_head_dim = 4;
        c.num_attention_heads = 3;
        c.joint_attention_dim = 10;
        c.caption_projection_dim = 12;
        c.pooled_projection_dim = 7;
        c.pos_embed_max_size = 6;
        c.qk_norm = qk;
        if (dual) c.dual_attention_layers = {0, 3};
        Recording w;
        models::SD3Transformer t(c, w, DType::kF32, stage);
        SCOPED_TRACE(::testing::Message() << "qk " << qk << " dual " << dual << " blocks "
                                          << stage.block_begin << "-" << stage.block_end);
        expect_same(as_map(c.weight_specs(stage)), w.asked());
      }
}

TEST(WeightSpecs, T5ListsWhatItsConstructorReads) {
  for (bool gated : {true, false})
    for (bool shared : {true, false}) {
      models::T5Config c;
      c.vocab_size = 37;
      c.d_model = 12;
      c.d_kv = 5;
      c.num_heads = 3;
      c.d_ff = 19;
      c.num_layers = 2;
      c.gated_gelu = gated;
      Recording w;
      w.shared_ = shared;
      models::T5Encoder t5(c, w, DType::kF32);
      expect_same(as_map(c.weight_specs(shared ? "shared.weight" : "encoder.embed_tokens.weight")),
                  w.asked());
    }
}

TEST(WeightSpecs, VaeListsWhatItsConstructorReads) {
  for (bool post_quant : {true, false})
    for (bool attention : {true, false})
      for (int64_t layers : {1, 2}) {
        models::VaeConfig c;
        c.latent_channels = 3;
        c.out_channels = 2;
        c.block_out_channels = {4, 8, 8};
        c.norm_num_groups = 2;
        c.layers_per_block = layers;
        c.use_post_quant_conv = post_quant;
        c.mid_block_add_attention = attention;
        Recording w;
        models::VaeDecoder vae(c, w, DType::kF32);
        expect_same(as_map(c.decoder_weight_specs()), w.asked());
      }
}

TEST(WeightSpecs, ShippedModelsPassTheHeaderCheck) {
  for (const char* m : {"pixart-alpha-tiny", "pixart-sigma-tiny"}) {
    io::ModelFolder f(std::string(XDIT_MODELS) + "/" + m);
    const auto tc = models::PixArtConfig::from_json(
        f.component_config("transformer", "config.json"), "transformer");
    io::WeightStore(f.component("transformer")).check_shapes(tc.weight_specs());
    const auto vc = models::VaeConfig::from_json(f.component_config("vae", "config.json"), "vae");
    io::WeightStore(f.component("vae")).check_shapes(vc.decoder_weight_specs());
    const auto t5 =
        models::T5Config::from_json(f.component_config("text_encoder", "config.json"), "t5");
    io::WeightStore tw(f.component("text_encoder"));
    tw.check_shapes(
        t5.weight_specs(tw.has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight"));
  }
}

TEST(WeightSpecs, ACheckNamesTheFirstWeightTheHeadersContradict) {
  io::ModelFolder f(std::string(XDIT_MODELS) + "/pixart-alpha-tiny");
  io::WeightStore w(f.component("vae"));
  auto c = models::VaeConfig::from_json(f.component_config("vae", "config.json"), "vae");
  c.latent_channels = 5;
  EXPECT_NE(test::error_message([&] {
              w.check_shapes(c.decoder_weight_specs());
            }).find("has shape [4, 4, 1, 1] but config.json implies [5, 5, 1, 1]"),
            std::string::npos);
  c = models::VaeConfig::from_json(f.component_config("vae", "config.json"), "vae");
  c.layers_per_block = 3;
  EXPECT_NE(test::error_message([&] {
              w.check_shapes(c.decoder_weight_specs());
            }).find("'decoder.up_blocks.0.resnets.2.norm1.weight' is missing"),
            std::string::npos);
}

}  // namespace
}  // namespace xdit
