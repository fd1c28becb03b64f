// ZImageTransformer2DModel (diffusers transformers/transformer_z_image.py),
// Z-Image-Turbo's single-stream DiT, as a DiT of this engine.
//
// diffusers pads each item's image tokens and caption tokens to a multiple
// of 32 with learned pad tokens, refines the image (noise_refiner:
// modulated blocks over the image and its pads) and the caption
// (context_refiner: unmodulated blocks over the caption and its pads), then
// runs the main layers over [image | caption] and its final layer. Attention
// here is order-free (positions live in the 3-axis RoPE ids: caption (1 + i,
// 0, 0), image (cap_len + 1, row, col), pads (0, 0, 0)), so the streams put
// what every rank holds whole in front, as the text of a joint attention:
//
//   per item [caption, padded to the batch's longest | image pads | image tokens]
//
// the caption (after the context refiner, which embed runs: it depends on
// the caption alone) and the image pads (held whole on every rank: the
// noise refiner's joint attention has them as its text). The flat blocks
// are the noise refiner's, then the main layers. Captions shorter than the
// batch's longest are masked as keys (AttentionSite::text_mask), and each
// item has its own RoPE table (its image's first id is its caption length).
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "io/weights.h"
#include "models/dit.h"
#include "models/zimage_config.h"
#include "nn/joint_attention.h"
#include "nn/layers.h"

namespace xdit::models {

// Inputs (DiTInputs): latents [B, in_channels, H, W] (H, W even); per batch
// item the timestep as ZImagePipeline passes it ((1000 − t) / 1000, the model
// multiplies by t_scale); text [B, L, cap_feat_dim] (Qwen3's states) with
// text_mask [B, L] (each item's caption a prefix; none: all L tokens).
// Output [B, in_channels, rows · 2, W]: the velocity the pipeline steps with,
// diffusers' model output negated (ZImagePipeline negates it after CFG,
// which is linear: the same).
class ZImageTransformer : public DiT {
 public:
  ZImageTransformer(const ZImageConfig& cfg, const io::WeightSource& weights, DType compute,
                    DiTStage stage = {});
  ~ZImageTransformer() override;
  const ZImageConfig& config() const { return cfg_; }
  DiTSpec spec() const override { return cfg_.spec(); }
  const char* name() const override { return "Z-Image"; }
  // The caption (padded to the batch's longest) and the image pads.
  int64_t stream_text_tokens(const DiTInputs& in) const override;

 protected:
  Streams embed(const DiTInputs& in) override;
  void run_blocks(Streams& s, int64_t b0, int64_t b1) override;
  Tensor finalize(const Streams& s) override;
  Tensor block_modulated_input(int64_t b, const Streams& s) override;

 private:
  struct Block;
  // The call's caption lengths (each item's, padded to 32), from the mask.
  std::vector<int64_t> caption_lengths(const DiTInputs& in, int64_t batch, int64_t L) const;
  // Block `blk` on x [call.batch, call.seq(), D] (modulated by the call's
  // timestep embedding when it has its adaLN), its attention through
  // `backend` at site call.layer (< 0: a local call, not offered to the
  // attention hook).
  void run_block(const Block& blk, float* x, const nn::JointCall& call,
                 nn::AttentionBackend& backend);
  const Block& block(int64_t b) const;  // flat block b of this stage

  ZImageConfig cfg_;
  nn::ComputeType ct_;
  kernels::Linear x_embedder_, cap_embedder_, t_mlp0_, t_mlp2_, final_mod_, final_linear_;
  Tensor cap_norm_, x_pad_, cap_pad_;
  std::vector<std::unique_ptr<Block>> context_refiner_;  // the first stage's
  std::vector<std::unique_ptr<Block>> blocks_;           // this stage's flat blocks
  // The current call: the caption part Lc (the batch's longest caption,
  // padded) and the image pads P of the streams, the timestep embedding c [B, adaln],
  // its SiLU, the per-item RoPE tables of the main layers [B, S, hd] and of
  // the noise refiner [B, P + N, hd] (host, then where the ops read them), the
  // text key mask [B, Lc + P] (empty: none).
  int64_t cap_part_ = 0, image_pads_ = 0;
  nn::Scratch c_, c_silu_;
  std::vector<float> cos_host_, sin_host_, rcos_host_, rsin_host_;
  Tensor cos_keep_, sin_keep_, rcos_keep_, rsin_keep_;
  const float *cos_ = nullptr, *sin_ = nullptr, *rcos_ = nullptr, *rsin_ = nullptr;
  std::vector<uint8_t> text_mask_;
  nn::Scratch mod_, zeros_, n_, tmp_, ff_, gather_, tproj_, cols_, slab_;
  nn::AttentionScratch attn_;
};

}  // namespace xdit::models
