// AutoencoderKL's decoder (diffusers models/autoencoders/autoencoder_kl.py,
// vae.py Decoder): post_quant_conv, conv_in, the mid block (ResNet, single-head
// self-attention, ResNet), the up blocks (ResNets, nearest ×2 + conv), then
// GroupNorm + SiLU + conv_out. Computed channels-last (NHWC) on oneDNN
// convolutions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "io/weights.h"
#include "kernels/conv.h"
#include "nn/attention.h"
#include "nn/row_bands.h"

namespace xdit::models {

struct VaeConfig {
  int64_t in_channels = 3, out_channels = 3, latent_channels = 4;
  std::vector<int64_t> block_out_channels{128, 256, 512, 512};
  int64_t layers_per_block = 2;
  int64_t norm_num_groups = 32;
  double scaling_factor = 0.18215;
  double shift_factor = 0.0;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;

  // Reads diffusers' vae/config.json, bounding every size (at most 8 blocks,
  // channels divisible by norm_num_groups); throws one line naming `where`
  // and the key.
  static VaeConfig from_json(const io::Json& j, const std::string& where);
  // Pixels per latent pixel: 2^(number of blocks − 1).
  int64_t scale_factor() const { return int64_t{1} << (block_out_channels.size() - 1); }
  // The weights the decoder reads.
  io::WeightSpecs decoder_weight_specs() const;
  int64_t decoder_parameter_count() const;
  // FLOPs (2 × multiply-adds) of decoding a batch of h×w latents.
  double decoder_flops(int64_t batch, int64_t h, int64_t w) const;
};

class VaeDecoder {
 public:
  VaeDecoder(const VaeConfig& cfg, const io::WeightSource& weights, DType compute);
  ~VaeDecoder();
  const VaeConfig& config() const { return cfg_; }
  // vae.decode(z): z [B, latent_channels, h, w] (already divided by the
  // scaling factor) → image [B, out_channels, h·f, w·f], roughly in [−1, 1].
  // With `bands` (the patch-parallel decoder) this rank decodes its band of
  // latent rows: 3×3 convolutions take halo rows from the neighbouring bands,
  // GroupNorm adds every band's statistics, the mid-block attention runs over
  // every band's tokens, and the bands are gathered at the end, so every
  // rank returns the whole image. Every rank passes the whole of z.
  Tensor decode(const Tensor& z, nn::RowBands* bands = nullptr);
  // What the pipelines decode from the denoising loop's latents:
  // decode(latents / scaling_factor + shift_factor), in f32 as torch does
  // (FLUX.1 and SD3 have a shift; the SD/PixArt VAE's is 0).
  Tensor decode_latents(const Tensor& latents, nn::RowBands* bands = nullptr);

 private:
  struct Resnet;
  struct UpBlock;
  struct Padded;
  // Where decoding stands: this band's rows and the image's at the current
  // resolution.
  struct Band {
    nn::RowBands& bands;
    int64_t batch, rows, width, total_rows;
  };
  void resnet(const Resnet& r, Tensor& x, Band& bd);
  // GroupNorm statistics of x [B, rows, W, channels] summed over every band.
  std::vector<double> moments(const float* x, int64_t channels, Band& bd);
  // GroupNorm of x into y [B, rows, W, channels].
  void norm(const float* x, int64_t channels, const Tensor& gamma, const Tensor& beta, Band& bd,
            float* y);
  // GroupNorm + SiLU into a convolution's input `p`, halo rows exchanged.
  void norm_silu_into(const float* x, int64_t channels, const Tensor& gamma, const Tensor& beta,
                      Band& bd, Padded& p);
  VaeConfig cfg_;
  nn::ComputeType ct_;
  kernels::Conv2d post_quant_, conv_in_, conv_out_;
  std::vector<std::unique_ptr<Resnet>> mid_resnets_;
  Tensor attn_norm_w_, attn_norm_b_;
  nn::Attention mid_attn_;
  bool has_attn_ = false;
  std::vector<std::unique_ptr<UpBlock>> up_;
  Tensor norm_out_w_, norm_out_b_;
  nn::AttentionScratch attn_scratch_;
  Device device_ = current_device();  // where it was built: its weights and its calls
};

// diffusers' VaeImageProcessor.postprocess to uint8: x/2 + 0.5, clamp to
// [0, 1], ×255, round. image [B, 3, H, W] → HWC bytes per batch item.
std::vector<std::vector<uint8_t>> image_to_rgb8(const Tensor& image);

}  // namespace xdit::models
