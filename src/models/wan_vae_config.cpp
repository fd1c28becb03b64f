// WanVaeConfig: vae/config.json of an AutoencoderKLWan as diffusers reads it,
// bounded and checked, and the decoder weights it implies.
#include "core/error.h"
#include "models/wan_vae.h"

namespace xdit::models {

std::vector<int64_t> WanVaeConfig::level_dims() const {
  std::vector<int64_t> d{base_dim * dim_mult.back()};
  for (auto it = dim_mult.rbegin(); it != dim_mult.rend(); ++it) d.push_back(base_dim * *it);
  return d;
}

std::pair<int64_t, WanVaeConfig::UpMode> WanVaeConfig::up_block(size_t i) const {
  const auto d = level_dims();
  const int64_t in = i > 0 && !residual ? d[i] / 2 : d[i];
  if (i + 1 == dim_mult.size()) return {in, UpMode::kNone};
  // The decoder's temperal_upsample is the encoder's temperal_downsample reversed.
  const bool time = temperal_downsample[temperal_downsample.size() - 1 - i];
  return {in, time ? UpMode::k3d : UpMode::k2d};
}

WanVaeConfig WanVaeConfig::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  WanVaeConfig c;
  const std::string cls = io::string_or(j, "_class_name", "AutoencoderKLWan", w);
  // Qwen-Image's AutoencoderKLQwenImage is Wan2.1's architecture under its own
  // names for two keys (input_channels; no residual variant).
  const bool qwen = cls == "AutoencoderKLQwenImage";
  XDIT_CHECK(cls == "AutoencoderKLWan" || qwen, w, ": VAE class ", cls,
             " is not AutoencoderKLWan or AutoencoderKLQwenImage");
  c.base_dim = io::int_in(j, "base_dim", 96, 2, 1 << 12, w);
  if (j.contains("decoder_base_dim") && !j["decoder_base_dim"].is_null())
    c.base_dim = io::int_in(j, "decoder_base_dim", c.base_dim, 2, 1 << 12, w);
  c.z_dim = io::int_in(j, "z_dim", 16, 1, 1 << 12, w);
  c.dim_mult = io::int_list_in(j, "dim_mult", {1, 2, 4, 4}, 8, 1, 64, w);
  XDIT_CHECK(c.dim_mult.size() >= 2, w, ": dim_mult needs at least 2 levels");
  c.num_res_blocks = io::int_in(j, "num_res_blocks", 2, 0, 16, w);
  c.out_channels = io::int_in(j, qwen ? "input_channels" : "out_channels", 3, 1, 64, w);
  c.temperal_downsample.clear();
  if (j.contains("temperal_downsample")) {
    for (const auto& v : j["temperal_downsample"]) {
      XDIT_CHECK(v.is_boolean(), w, ": temperal_downsample must hold booleans");
      c.temperal_downsample.push_back(v.get<bool>());
    }
  } else {
    c.temperal_downsample = {false, true, true};
  }
  XDIT_CHECK(c.temperal_downsample.size() + 1 == c.dim_mult.size(), w,
             ": temperal_downsample needs one value per level but the last (",
             c.dim_mult.size() - 1, "), found ", c.temperal_downsample.size());
  c.residual = !qwen && io::bool_or(j, "is_residual", false, w);
  const auto d = c.level_dims();
  if (!c.residual)
    for (const int64_t l : d)
      XDIT_CHECK(l % 2 == 0, w, ": level width ", l, " must be even (the upsampling halves it)");
  for (size_t i = 0; c.residual && i + 2 < d.size(); ++i) {
    // DupUp3D spreads the block's input channels over 2 × 2 pixels (× 2 frames).
    const int64_t spread = d[i + 1] * 4 * (c.up_block(i).second == UpMode::k3d ? 2 : 1);
    XDIT_CHECK(spread % d[i] == 0, w, ": up block ", i, "'s shortcut spreads ", d[i],
               " channels over ", spread, " values, not a multiple");
  }
  if (j.contains("patch_size") && !j["patch_size"].is_null())
    c.patch = io::int_in(j, "patch_size", 1, 1, 8, w);
  XDIT_CHECK(c.out_channels % (c.patch * c.patch) == 0, w, ": out_channels ", c.out_channels,
             " are not the video's channels × patch_size² (", c.patch, "²)");
  if (j.contains("scale_factor_spatial") && !j["scale_factor_spatial"].is_null())
    XDIT_CHECK(io::int_in(j, "scale_factor_spatial", 8, 1, 1 << 10, w) == c.spatial_factor(), w,
               ": scale_factor_spatial ", j["scale_factor_spatial"].dump(), " is not the ",
               c.spatial_factor(), " its levels and patch_size make");
  const auto list = [&](const char* key) {
    std::vector<double> v;
    XDIT_CHECK(j.contains(key) && j[key].is_array(), w, ": ", key, " is missing");
    for (const auto& x : j[key]) {
      XDIT_CHECK(x.is_number(), w, ": ", key, " must hold numbers");
      v.push_back(x.get<double>());
    }
    XDIT_CHECK(static_cast<int64_t>(v.size()) == c.z_dim, w, ": ", key, " holds ", v.size(),
               " values for z_dim ", c.z_dim);
    return v;
  };
  c.latents_mean = list("latents_mean");
  c.latents_std = list("latents_std");
  for (double s : c.latents_std) XDIT_CHECK(s > 0, w, ": latents_std must be positive");
  return c;
}

int64_t WanVaeConfig::temporal_factor() const {
  int64_t f = 1;
  for (bool t : temperal_downsample) f *= t ? 2 : 1;
  return f;
}

io::WeightSpecs WanVaeConfig::decoder_weight_specs() const {
  const auto d = level_dims();
  io::WeightSpecs s;
  const auto conv = [&](const std::string& p, int64_t in, int64_t out, Shape k) {
    Shape shape{out, in};
    shape.insert(shape.end(), k.begin(), k.end());
    s.emplace_back(p + ".weight", shape);
    s.emplace_back(p + ".bias", Shape{out});
  };
  const auto resnet = [&](const std::string& p, int64_t in, int64_t out) {
    s.emplace_back(p + ".norm1.gamma", Shape{in, 1, 1, 1});
    conv(p + ".conv1", in, out, {3, 3, 3});
    s.emplace_back(p + ".norm2.gamma", Shape{out, 1, 1, 1});
    conv(p + ".conv2", out, out, {3, 3, 3});
    if (in != out) conv(p + ".conv_shortcut", in, out, {1, 1, 1});
  };
  conv("post_quant_conv", z_dim, z_dim, {1, 1, 1});
  conv("decoder.conv_in", z_dim, d[0], {3, 3, 3});
  resnet("decoder.mid_block.resnets.0", d[0], d[0]);
  s.emplace_back("decoder.mid_block.attentions.0.norm.gamma", Shape{d[0], 1, 1});
  conv("decoder.mid_block.attentions.0.to_qkv", d[0], 3 * d[0], {1, 1});
  conv("decoder.mid_block.attentions.0.proj", d[0], d[0], {1, 1});
  resnet("decoder.mid_block.resnets.1", d[0], d[0]);
  for (size_t i = 0; i + 1 < d.size(); ++i) {
    const std::string p = "decoder.up_blocks." + std::to_string(i);
    auto [in, mode] = up_block(i);
    const int64_t out = d[i + 1];
    for (int64_t r = 0; r <= num_res_blocks; ++r, in = out)
      resnet(p + ".resnets." + std::to_string(r), in, out);
    // Wan2.2's residual blocks keep the width through their `upsampler`.
    const std::string up = p + (residual ? ".upsampler" : ".upsamplers.0");
    if (mode != UpMode::kNone) conv(up + ".resample.1", out, residual ? out : out / 2, {3, 3});
    if (mode == UpMode::k3d) conv(up + ".time_conv", out, 2 * out, {3, 1, 1});
  }
  s.emplace_back("decoder.norm_out.gamma", Shape{d.back(), 1, 1, 1});
  conv("decoder.conv_out", d.back(), out_channels, {3, 3, 3});
  return s;
}

}  // namespace xdit::models
