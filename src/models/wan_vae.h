// AutoencoderKLWan's decoder (diffusers models/autoencoders/autoencoder_kl_wan.py,
// WanDecoder3d), Wan2.1's video VAE: causal 3-D convolutions over time (each
// output frame sees its input frame and the two before it, zeros before the
// video), RMS norms over channels, a single-head attention per frame in the
// mid block, up blocks with nearest ×2 in space and, where the config says,
// a time convolution that turns each frame into two. Decoded frame by frame
// as diffusers does (one latent frame per chunk with each convolution's
// cache of its last two input frames; the first chunk skips the time
// upsampling), so latent frame 0 gives 1 frame and each later one 2^k.
// Computed channels-last (NHWC) on the 2-D convolutions: a 3×3×3 causal
// convolution is one 3×3 convolution over the three frames' channels stacked.
// Wan2.2's VAE (is_residual, patch_size 2: TI2V-5B's 48 channels, 16× in
// space) adds to each up block a shortcut that spreads the block's input
// channels over the upsampled pixels and frames (DupUp3D), keeps the widths
// between blocks, and unpatchifies conv_out's 3·p² channels into p × p pixels.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "io/weights.h"
#include "kernels/conv.h"
#include "nn/attention.h"
#include "nn/row_bands.h"

namespace xdit::models {

struct WanVaeConfig {
  int64_t base_dim = 96;
  int64_t z_dim = 16;
  std::vector<int64_t> dim_mult{1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  std::vector<bool> temperal_downsample{false, true, true};
  std::vector<double> latents_mean, latents_std;  // z_dim values each
  int64_t out_channels = 3;                       // of conv_out: the video's channels × patch²
  bool residual = false;                          // Wan2.2's residual up blocks (is_residual)
  int64_t patch = 1;  // patch_size: conv_out's pixels are patch × patch video pixels

  // Reads diffusers' vae/config.json (Wan2.1's, or Wan2.2's residual one
  // with patch_size); throws one line naming `where` and the key.
  static WanVaeConfig from_json(const io::Json& j, const std::string& where);
  int64_t spatial_factor() const { return patch << (dim_mult.size() - 1); }
  int64_t video_channels() const { return out_channels / (patch * patch); }
  int64_t temporal_factor() const;
  // Frames decoded from `latent_frames`: 1 + temporal_factor · (F − 1).
  int64_t frames(int64_t latent_frames) const {
    return 1 + temporal_factor() * (latent_frames - 1);
  }
  io::WeightSpecs decoder_weight_specs() const;
  // The decoder's level widths: base·dim_mult[-1], then base·dim_mult reversed.
  std::vector<int64_t> level_dims() const;
  // Up block i's input width (Wan2.1: half the level's after the first, as
  // its upsampling halves the width; Wan2.2: the level's) and what it
  // upsamples (the decoder's temperal_upsample is temperal_downsample reversed).
  enum class UpMode { kNone, k2d, k3d };
  std::pair<int64_t, UpMode> up_block(size_t i) const;
};

class WanVaeDecoder {
 public:
  WanVaeDecoder(const WanVaeConfig& cfg, const io::WeightSource& weights, DType compute);
  ~WanVaeDecoder();
  const WanVaeConfig& config() const { return cfg_; }
  // vae.decode(z).sample: z [B, z_dim, F, h, w] → video [B, video_channels,
  // frames(F), h·s, w·s] clamped to [−1, 1], on the host. With `bands` (the
  // patch-parallel decoder) this rank decodes its band of latent rows of
  // every frame: each 3×3 convolution takes a halo row from the neighbouring
  // bands (the causal history is per band: every rank walks the same frames),
  // the RMS norms are per pixel, the mid block's attention runs over every
  // band's tokens, and each output frame is gathered, so every rank returns
  // the whole video. Every rank passes the whole of z.
  Tensor decode(const Tensor& z, nn::RowBands* bands = nullptr);
  // What WanPipeline decodes from the loop's latents: z·latents_std + latents_mean.
  Tensor decode_latents(const Tensor& latents, nn::RowBands* bands = nullptr);

 private:
  struct Causal;
  struct Resnet;
  struct Up;
  // One frame [B, h, w, c] (NHWC) through the decoder's layers.
  using Frames = std::vector<Tensor>;
  void resnet(Resnet& r, Frames& x);
  void attention(Frames& x);
  Frames up_block(Up& u, Frames x, bool first_chunk);
  // Conv_out's frame [B, oc, H/p, W/p] as the video's [B, oc/p², H, W] (unpatchify).
  Tensor unpatchify(const Tensor& planar) const;
  // conv over `parts` [B, rows, w, in] each (null: zeros) stacked along the
  // channels, on this band with its halo rows from the neighbours.
  Tensor banded_conv(const kernels::Conv2d& conv, const std::vector<const Tensor*>& parts,
                     int64_t in);
  WanVaeConfig cfg_;
  nn::ComputeType ct_;
  kernels::Conv2d post_quant_;
  std::unique_ptr<Causal> conv_in_, conv_out_;
  std::vector<std::unique_ptr<Resnet>> mid_;
  Tensor attn_gamma_;
  kernels::Conv2d attn_qkv_, attn_proj_;
  std::vector<std::unique_ptr<Up>> up_;
  Tensor norm_out_;
  std::vector<Causal*> causals_;   // every causal convolution, its history cleared per decode
  nn::RowBands* bands_ = nullptr;  // the decode's bands (null: the whole frame)
  Tensor halo_f32_, halo_bf16_;    // a banded convolution's input with its halo rows
};

}  // namespace xdit::models
