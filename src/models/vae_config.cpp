// VaeConfig: vae/config.json as diffusers reads it (AutoencoderKL), bounded
// and checked, and the decoder weights it implies.
#include "core/error.h"
#include "models/vae.h"
#include "nn/weight_specs.h"

namespace xdit::models {

VaeConfig VaeConfig::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  // Bounds far beyond any AutoencoderKL (4 blocks of at most 512 channels).
  constexpr int64_t kChannels = 1 << 14;
  constexpr size_t kMaxBlocks = 8;  // a scale factor of at most 128
  VaeConfig c;
  const std::string cls = io::string_or(j, "_class_name", "AutoencoderKL", w);
  XDIT_CHECK(cls == "AutoencoderKL", w, ": VAE class ", cls, " is not supported (AutoencoderKL)");
  c.in_channels = io::int_in(j, "in_channels", 3, 1, kChannels, w);
  c.out_channels = io::int_in(j, "out_channels", 3, 1, kChannels, w);
  c.latent_channels = io::int_in(j, "latent_channels", 4, 1, kChannels, w);
  c.block_out_channels =
      io::int_list_in(j, "block_out_channels", {64}, kMaxBlocks, 1, kChannels, w);
  c.layers_per_block = io::int_in(j, "layers_per_block", 1, 1, 64, w);
  c.norm_num_groups = io::int_in(j, "norm_num_groups", 32, 1, kChannels, w);
  c.scaling_factor = io::number_or(j, "scaling_factor", 0.18215, w);
  c.shift_factor = io::number_or(j, "shift_factor", 0.0, w);
  c.use_post_quant_conv = io::bool_or(j, "use_post_quant_conv", true, w);
  c.mid_block_add_attention = io::bool_or(j, "mid_block_add_attention", true, w);
  if (j.contains("up_block_types") && !j["up_block_types"].is_null()) {
    const io::Json& types = j["up_block_types"];
    XDIT_CHECK(types.is_array() && types.size() == c.block_out_channels.size(), w,
               ": up_block_types must list one block type per block_out_channels entry (",
               c.block_out_channels.size(), ")");
    for (const auto& t : types)
      XDIT_CHECK(t == "UpDecoderBlock2D", w, ": up block ",
                 t.dump(-1, ' ', false, io::Json::error_handler_t::replace).substr(0, 40),
                 " is not supported (UpDecoderBlock2D)");
  }
  XDIT_CHECK(io::string_or(j, "act_fn", "silu", w) == "silu", w,
             ": only act_fn \"silu\" is supported");
  for (int64_t ch : c.block_out_channels)
    XDIT_CHECK(ch % c.norm_num_groups == 0, w, ": block channels ", ch,
               " must be a multiple of norm_num_groups ", c.norm_num_groups);
  XDIT_CHECK(c.scaling_factor != 0.0, w, ": scaling_factor must not be 0");
  // Per-channel latent statistics (decode with latents·std/scaling + mean) are
  // another pipeline's convention; refused rather than ignored.
  for (const char* key : {"latents_mean", "latents_std"})
    XDIT_CHECK(!j.contains(key) || j[key].is_null(), w, ": ", key, " is not supported yet");
  return c;
}

io::WeightSpecs VaeConfig::decoder_weight_specs() const {
  const int64_t lc = latent_channels, top = block_out_channels.back();
  io::WeightSpecs s;
  auto conv = [&](const std::string& p, int64_t in, int64_t out, int64_t k) {
    s.emplace_back(p + ".weight", Shape{out, in, k, k});
    s.emplace_back(p + ".bias", Shape{out});
  };
  auto norm = [&](const std::string& p, int64_t ch) {
    s.emplace_back(p + ".weight", Shape{ch});
    s.emplace_back(p + ".bias", Shape{ch});
  };
  auto resnet = [&](const std::string& p, int64_t in, int64_t out) {
    norm(p + ".norm1", in);
    conv(p + ".conv1", in, out, 3);
    norm(p + ".norm2", out);
    conv(p + ".conv2", out, out, 3);
    if (in != out) conv(p + ".conv_shortcut", in, out, 1);
  };
  if (use_post_quant_conv) conv("post_quant_conv", lc, lc, 1);
  conv("decoder.conv_in", lc, top, 3);
  resnet("decoder.mid_block.resnets.0", top, top);
  if (mid_block_add_attention) {
    const std::string a = "decoder.mid_block.attentions.0";
    norm(a + ".group_norm", top);
    nn::attention_specs(s, a, top, 1, top, 0, true);
  }
  resnet("decoder.mid_block.resnets.1", top, top);
  int64_t prev = top;
  const size_t n = block_out_channels.size();
  for (size_t i = 0; i < n; ++i) {
    const int64_t out = block_out_channels[n - 1 - i];
    const std::string p = "decoder.up_blocks." + std::to_string(i);
    for (int64_t r = 0; r <= layers_per_block; ++r)
      resnet(p + ".resnets." + std::to_string(r), r == 0 ? prev : out, out);
    if (i + 1 < n) conv(p + ".upsamplers.0.conv", out, out, 3);
    prev = out;
  }
  norm("decoder.conv_norm_out", prev);
  conv("decoder.conv_out", prev, out_channels, 3);
  return s;
}

int64_t VaeConfig::decoder_parameter_count() const {
  return nn::parameter_count(decoder_weight_specs());
}

double VaeConfig::decoder_flops(int64_t batch, int64_t h, int64_t w) const {
  auto conv = [](double px, int64_t i, int64_t o, int64_t k) { return 2.0 * px * i * o * k * k; };
  auto resnet = [&](double px, int64_t i, int64_t o) {
    return conv(px, i, o, 3) + conv(px, o, o, 3) + (i != o ? conv(px, i, o, 1) : 0.0);
  };
  const int64_t top = block_out_channels.back();
  double px = static_cast<double>(h * w);
  double f = conv(px, latent_channels, latent_channels, 1) + conv(px, latent_channels, top, 3);
  f += 2 * resnet(px, top, top) + 4 * 2.0 * px * top * top + 4.0 * px * px * top;  // + attention
  int64_t prev = top;
  for (size_t i = 0; i < block_out_channels.size(); ++i) {
    const int64_t out = block_out_channels[block_out_channels.size() - 1 - i];
    for (int64_t r = 0; r <= layers_per_block; ++r) f += resnet(px, r == 0 ? prev : out, out);
    if (i + 1 < block_out_channels.size()) {
      px *= 4;
      f += conv(px, out, out, 3);
    }
    prev = out;
  }
  return batch * (f + conv(px, prev, out_channels, 3));
}

}  // namespace xdit::models
