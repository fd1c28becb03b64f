#include "models/zimage_config.h"

#include "core/error.h"
#include "models/rope_axes.h"
#include "nn/weight_specs.h"

namespace xdit::models {

ZImageConfig ZImageConfig::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  constexpr int64_t kSize = 1 << 12, kWide = 1 << 16;
  ZImageConfig c;
  const std::string cls = io::string_or(j, "_class_name", "ZImageTransformer2DModel", w);
  XDIT_CHECK(cls == "ZImageTransformer2DModel", w, ": transformer class ", cls,
             " is not ZImageTransformer2DModel");
  const auto one = [&](const char* key, int64_t fallback) {
    const std::vector<int64_t> v = io::int_list_in(j, key, {fallback}, 8, 1, 16, w);
    XDIT_CHECK(v.size() == 1, w, ": ", key, " lists ", v.size(),
               " patch sizes; xdit runs Z-Image's one (2 x 2, one frame)");
    return v[0];
  };
  c.patch = one("all_patch_size", 2);
  c.frame_patch = one("all_f_patch_size", 1);
  XDIT_CHECK(c.frame_patch == 1, w, ": all_f_patch_size ", c.frame_patch,
             " is not supported (images: 1)");
  c.in_channels = io::int_in(j, "in_channels", c.in_channels, 1, kSize, w);
  c.dim = io::int_in(j, "dim", c.dim, 1, kWide, w);
  c.n_layers = io::int_in(j, "n_layers", c.n_layers, 1, kSize, w);
  c.n_refiner_layers = io::int_in(j, "n_refiner_layers", c.n_refiner_layers, 0, kSize, w);
  c.n_heads = io::int_in(j, "n_heads", c.n_heads, 1, kSize, w);
  XDIT_CHECK(c.dim % c.n_heads == 0, w, ": dim ", c.dim, " does not divide into ", c.n_heads,
             " heads");
  const int64_t kv = io::int_in(j, "n_kv_heads", c.n_heads, 1, kSize, w);
  XDIT_CHECK(kv == c.n_heads, w, ": n_kv_heads ", kv, " differs from n_heads ", c.n_heads,
             " (diffusers' Z-Image attention has as many key/value heads as query heads)");
  c.norm_eps = io::number_or(j, "norm_eps", 1e-5, w);
  XDIT_CHECK(c.norm_eps >= 0, w, ": norm_eps must be >= 0");
  c.qk_norm = io::bool_or(j, "qk_norm", true, w);
  c.cap_feat_dim = io::int_in(j, "cap_feat_dim", c.cap_feat_dim, 1, kWide, w);
  c.rope_theta = io::number_or(j, "rope_theta", 256.0, w);
  XDIT_CHECK(c.rope_theta > 1, w, ": rope_theta must be > 1");
  c.t_scale = io::number_or(j, "t_scale", 1000.0, w);
  XDIT_CHECK(c.t_scale > 0, w, ": t_scale must be > 0");
  c.axes_dims = read_rope_axes(j, "axes_dims", c.axes_dims, c.head_dim(), w);
  c.axes_lens = io::int_list_in(j, "axes_lens", c.axes_lens, 3, 1, 1 << 20, w);
  XDIT_CHECK(c.axes_lens.size() == 3, w, ": axes_lens needs 3 values (caption/frame, row, column)");
  XDIT_CHECK(c.qk_norm, w, ": qk_norm false is not supported (Z-Image's blocks norm q and k)");
  XDIT_CHECK(!j.contains("siglip_feat_dim") || j["siglip_feat_dim"].is_null(), w,
             ": siglip_feat_dim (Z-Image Omni's image conditioning) is not supported");
  return c;
}

ZImageConfig ZImageConfig::turbo() {
  return ZImageConfig{};
}

io::WeightSpecs ZImageConfig::weight_specs(const DiTStage& stage) const {
  const int64_t d = dim, a = adaln_dim(), f = ffn_dim(), hd = head_dim();
  const int64_t b0 = stage.block_begin, b1 = stage.block_end < 0 ? blocks() : stage.block_end;
  const std::string ps = std::to_string(patch) + "-" + std::to_string(frame_patch);
  const int64_t pix = frame_patch * patch * patch * in_channels;
  io::WeightSpecs s;
  const auto block = [&](const std::string& p, bool modulated) {
    if (modulated) nn::linear_specs(s, p + ".adaLN_modulation.0", a, 4 * d, true);
    for (const char* m : {"to_q", "to_k", "to_v"})
      nn::linear_specs(s, p + ".attention." + m, d, d, false);
    nn::linear_specs(s, p + ".attention.to_out.0", d, d, false);
    if (qk_norm) {
      s.emplace_back(p + ".attention.norm_q.weight", Shape{hd});
      s.emplace_back(p + ".attention.norm_k.weight", Shape{hd});
    }
    for (const char* n : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"})
      s.emplace_back(p + "." + n + ".weight", Shape{d});
    nn::linear_specs(s, p + ".feed_forward.w1", d, f, false);
    nn::linear_specs(s, p + ".feed_forward.w2", f, d, false);
    nn::linear_specs(s, p + ".feed_forward.w3", d, f, false);
  };
  nn::linear_specs(s, "t_embedder.mlp.0", kAdaLnMax, kTimeHidden, true);
  nn::linear_specs(s, "t_embedder.mlp.2", kTimeHidden, a, true);
  if (stage.first) {
    nn::linear_specs(s, "all_x_embedder." + ps, pix, d, true);
    s.emplace_back("cap_embedder.0.weight", Shape{cap_feat_dim});
    nn::linear_specs(s, "cap_embedder.1", cap_feat_dim, d, true);
    s.emplace_back("cap_pad_token", Shape{1, d});
    s.emplace_back("x_pad_token", Shape{1, d});
    for (int64_t i = 0; i < n_refiner_layers; ++i)
      block("context_refiner." + std::to_string(i), false);
  }
  for (int64_t i = b0; i < b1; ++i)
    block(i < n_refiner_layers ? "noise_refiner." + std::to_string(i)
                               : "layers." + std::to_string(i - n_refiner_layers),
          true);
  if (stage.last) {
    nn::linear_specs(s, "all_final_layer." + ps + ".adaLN_modulation.1", a, d, true);
    nn::linear_specs(s, "all_final_layer." + ps + ".linear", d, pix, true);
  }
  return s;
}

DiTSpec ZImageConfig::spec() const {
  DiTSpec s;
  s.blocks = blocks();
  s.heads = n_heads;
  s.hidden = dim;
  s.latent_channels = in_channels;
  s.out_channels = in_channels;
  s.patch = patch;
  s.timestep_divisor = 1000.0;  // ZImagePipeline: (1000 - t) / 1000
  s.timestep_reversed = true;
  s.text_stream = true;
  s.max_patch_rows = axes_lens[1];
  s.max_patch_cols = axes_lens[2];
  return s;
}

int64_t ZImageConfig::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, shape] : weight_specs()) n += shape_numel(shape);
  return n;
}

}  // namespace xdit::models
