#include "pipeline/latent_decoder.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/weights.h"
#include "models/vae.h"
#include "models/wan_vae.h"

namespace xdit::pipeline {

namespace {

using Kind = ModelFamily::ComponentKind;

// A decoder model of config Config from a component's folder: the weight
// headers checked against the config when opened, the model built on the
// first decode.
template <class Config, class Model>
class FolderDecoder : public LatentDecoder {
 public:
  FolderDecoder(Config cfg, const std::string& dir) : cfg_(std::move(cfg)), weights_(dir) {
    weights_.check_shapes(cfg_.decoder_weight_specs());
  }

 protected:
  Model& model(DType dtype) {
    if (!model_) model_ = std::make_unique<Model>(cfg_, weights_, dtype);
    return *model_;
  }
  Config cfg_;

 private:
  io::WeightStore weights_;
  std::unique_ptr<Model> model_;
};

// diffusers' AutoencoderKL: each frame alone through the 2-D decoder.
class ImageVae : public FolderDecoder<models::VaeConfig, models::VaeDecoder> {
 public:
  using FolderDecoder::FolderDecoder;
  Factors factors() const override { return {cfg_.scale_factor(), 1}; }
  void describe(MemoryQuery& q) const override { q.vae = &cfg_; }

  Tensor decode(const Tensor& latents, DType dtype, nn::RowBands* bands) override {
    models::VaeDecoder& vae = model(dtype);
    const int64_t B = latents.dim(0), C = latents.dim(1), F = latents.dim(2), h = latents.dim(3),
                  w = latents.dim(4);
    if (F == 1) return vae.decode_latents(latents.reshape({B, C, h, w}), bands);
    // Frame by frame, into [B·F, 3, H, W].
    Tensor out, frame = Tensor::empty({B, C, h, w});
    const int64_t plane = h * w;
    for (int64_t f = 0; f < F; ++f) {
      for (int64_t bc = 0; bc < B * C; ++bc)
        std::memcpy(frame.data<float>() + bc * plane, latents.data<float>() + (bc * F + f) * plane,
                    static_cast<size_t>(plane) * 4);
      const Tensor image = vae.decode_latents(frame, bands);
      if (!out.defined()) out = Tensor::empty({B * F, image.dim(1), image.dim(2), image.dim(3)});
      const int64_t per = image.numel() / B;
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(out.data<float>() + (b * F + f) * per, image.data<float>() + b * per,
                    static_cast<size_t>(per) * 4);
    }
    return out;
  }
};

// AutoencoderKLWan: the whole video through the causal decoder, which keeps
// only its convolutions' last frames between latent frames; in row bands
// over a replica's ranks, every frame's band with its halo rows.
class WanVae : public FolderDecoder<models::WanVaeConfig, models::WanVaeDecoder> {
 public:
  using FolderDecoder::FolderDecoder;
  Factors factors() const override { return {cfg_.spatial_factor(), cfg_.temporal_factor()}; }
  void describe(MemoryQuery& q) const override { q.wan_vae = &cfg_; }

  Tensor decode(const Tensor& latents, DType dtype, nn::RowBands* bands) override {
    // [B, 3, F', H, W] → [B·F', 3, H, W].
    const Tensor video = model(dtype).decode_latents(latents, bands);
    const int64_t B = video.dim(0), ch = video.dim(1), F = video.dim(2),
                  plane = video.dim(3) * video.dim(4);
    Tensor out = Tensor::empty({B * F, ch, video.dim(3), video.dim(4)});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < ch; ++c)
        for (int64_t f = 0; f < F; ++f)
          std::memcpy(out.data<float>() + ((b * F + f) * ch + c) * plane,
                      video.data<float>() + ((b * ch + c) * F + f) * plane,
                      static_cast<size_t>(plane) * 4);
    return out;
  }
};

}  // namespace

std::unique_ptr<LatentDecoder> LatentDecoder::open(const io::ModelFolder& folder, Kind kind,
                                                   const std::string& component,
                                                   int64_t latent_channels) {
  const std::string dir = folder.component(component), where = dir + "/config.json";
  const io::Json cfg = folder.component_config(component, "config.json");
  const auto check_channels = [&](const char* key, int64_t channels) {
    XDIT_CHECK(channels == latent_channels, "VAE ", key, " ", channels,
               " does not match the transformer's ", latent_channels, " latent channels (", where,
               ")");
  };
  if (kind == Kind::kAutoencoderKLWan) {
    models::WanVaeConfig c = models::WanVaeConfig::from_json(cfg, where);
    check_channels("z_dim", c.z_dim);
    return std::make_unique<WanVae>(std::move(c), dir);
  }
  XDIT_CHECK(kind == Kind::kAutoencoderKL, "component ", component, " is not a VAE");
  models::VaeConfig c = models::VaeConfig::from_json(cfg, where);
  check_channels("latent_channels", c.latent_channels);
  return std::make_unique<ImageVae>(std::move(c), dir);
}

LatentDecoder::Factors LatentDecoder::read_factors(const io::ModelFolder& folder, Kind kind,
                                                   const std::string& component) {
  const std::string where = folder.root() + "/" + component + "/config.json";
  if (!std::filesystem::is_regular_file(where)) return {};
  const io::Json j = io::read_json_file(where);
  if (kind == Kind::kAutoencoderKLWan) {
    const models::WanVaeConfig c = models::WanVaeConfig::from_json(j, where);
    return {c.spatial_factor(), c.temporal_factor()};
  }
  return {models::VaeConfig::from_json(j, where).scale_factor(), 1};
}

}  // namespace xdit::pipeline
