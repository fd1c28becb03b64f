#include "pipeline/memory_estimate.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace xdit::pipeline {

double MemoryEstimate::peak() const {
  const double kept = transformer_freed_for_decode ? 0 : transformer;
  return std::max({text_encoder, transformer + denoise, kept + decode + output});
}

std::string MemoryEstimate::describe() const {
  std::string s;
  auto part = [&](const char* name, double b) {
    if (b <= 0) return;
    s += (s.empty() ? "" : ", ") + std::string(name) + " " + human_size(b);
  };
  part("text encoder", text_encoder);
  part("transformer", transformer);
  part("denoising", denoise);
  part("VAE decode", decode);
  part("images", output);
  return s;
}

MemoryEstimate estimate_memory(const models::PixArtConfig& cfg, const MemoryQuery& q) {
  return estimate_memory(cfg.spec(), cfg.parameter_count(), q);
}

MemoryEstimate estimate_memory(const models::DiTSpec& c, int64_t parameters, const MemoryQuery& q) {
  // All in double: the sizes asked for may be absurd, and must not overflow.
  const double wb = q.dtype == DType::kF32 ? 4.0 : 2.0, f = 4.0;
  const double P = std::ceil(static_cast<double>(q.prompts) / std::max(1, q.data_parallel));
  MemoryEstimate e;
  e.transformer_freed_for_decode = q.one_shot;
  const double L = static_cast<double>(q.text_tokens);
  if (q.t5 != nullptr) {
    const models::T5Config& t = *q.t5;
    const double n = P * (q.cfg ? 2 : 1), d = static_cast<double>(t.d_model);
    // The embedding stays whole (as stored, at most f32); the blocks split,
    // and streamed only the one running and the one it replaces are held.
    const double emb = static_cast<double>(t.vocab_size) * d,
                 blocks = static_cast<double>(t.parameter_count()) - emb;
    const double held =
        q.text_streamed ? std::min(blocks, 2 * blocks / static_cast<double>(t.num_layers)) : blocks;
    e.text_encoder = emb * f + held * wb / std::max(1, q.text_parallel) +
                     n * L * (8 * d + 3 * static_cast<double>(t.d_ff)) * f  // states, q/k/v, ff
                     + static_cast<double>(t.num_heads) * L * L * f;        // position bias
  }
  if (q.qwen != nullptr) {
    const models::QwenTextConfig& t = *q.qwen;
    const double n = P * (q.cfg ? 2 : 1), d = static_cast<double>(t.hidden_size);
    // The embedding stays whole (as stored, at most f32); the layers split,
    // and streamed only the one running and the one it replaces are held.
    const double emb = static_cast<double>(t.vocab_size) * d;
    double layers = 0;
    for (const auto& [name, shape] : t.weight_specs(q.qwen_layers))
      layers += static_cast<double>(shape_numel(shape));
    layers -= emb;
    const double per = layers / static_cast<double>(std::max<int64_t>(1, q.qwen_layers));
    const double held = q.text_streamed ? std::min(layers, 2 * per) : layers;
    const double heads = static_cast<double>(t.num_heads);
    e.text_encoder += emb * f + held * wb / std::max(1, q.text_parallel) +
                      n * L * (10 * d + 3 * static_cast<double>(t.intermediate_size)) * f +
                      heads * L * L * f;  // the causal mask
  }
  if (q.clip != nullptr) {
    const models::ClipTextConfig& t = *q.clip;
    const double n = P * (q.cfg ? 2 : 1), d = static_cast<double>(t.hidden_size);
    e.text_encoder += static_cast<double>(t.parameter_count()) * wb +
                      n * static_cast<double>(t.max_position_embeddings) *
                          (8 * d + 3 * static_cast<double>(t.intermediate_size)) * f;
  }
  // Tensor parallelism leaves modulation and embeddings whole: the split
  // share is a lower bound, as the estimate is meant to be.
  const double tb =
      q.transformer_bytes_per_parameter > 0 ? std::min(q.transformer_bytes_per_parameter, wb) : wb;
  e.transformer = static_cast<double>(parameters) * tb / std::max(1, q.pipeline_stages) /
                  std::max(1, q.tensor_parallel);
  const double vsf = static_cast<double>(q.vae_scale_factor);
  const double h = static_cast<double>(q.run_height) / vsf,
               w = static_cast<double>(q.run_width) / vsf;
  const double p = static_cast<double>(c.patch), d = static_cast<double>(c.hidden);
  const double batch = P * (q.cfg && !q.cfg_parallel ? 2 : 1);
  const double lf = static_cast<double>(q.latent_frames), frames = static_cast<double>(q.frames);
  const double tokens =
      lf * (h / p) * (w / p) / std::max(1, q.sequence_parallel) + (c.text_stream ? L : 0);
  // Residual, norm, fused q/k/v, attention output and the 4x MLP hidden
  // layer (about 12 widths per token), the text and the latents with the
  // scheduler's history.
  e.denoise = batch * tokens * d * f * 12 + batch * L * d * f * 2 +
              P * static_cast<double>(c.latent_channels) * lf * h * w * f * 4 + 2 * q.input_bytes;
  const double H = static_cast<double>(q.run_height), W = static_cast<double>(q.run_width);
  if (q.vae != nullptr) {
    const models::VaeConfig& v = *q.vae;
    const double top = static_cast<double>(v.block_out_channels.back());
    const double first = static_cast<double>(v.block_out_channels.front());
    // The full-resolution stage holds about four maps of the first block's
    // channels; the mid block's attention runs over every latent pixel. A
    // band of the patch-parallel VAE holds its share of both.
    e.decode = static_cast<double>(v.decoder_parameter_count()) * wb +
               P * (H * W * first * f * 4 + h * w * top * f * 4) / std::max(1, q.vae_bands);
    const double OH = static_cast<double>(q.out_height), OW = static_cast<double>(q.out_width);
    // Frame by frame: the decoded frames, resized, RGB + PNG.
    e.output = P * frames * (H * W * 3 * f + OH * OW * 3 * f + OH * OW * 3 * 2);
  }
  if (q.wan_vae != nullptr) {
    const models::WanVaeConfig& v = *q.wan_vae;
    double params = 0;
    for (const auto& [name, shape] : v.decoder_weight_specs())
      params += static_cast<double>(shape_numel(shape));
    const std::vector<int64_t> dims = v.level_dims();
    const double first = static_cast<double>(dims.back()), top = static_cast<double>(dims.front());
    const double tf = static_cast<double>(v.temporal_factor());
    // Wan2.2's last level runs at a patch² of the pixels (conv_out's
    // channels are patch × patch pixels each).
    const double pp = static_cast<double>(v.patch * v.patch);
    // One latent frame at a time: its output frames at full resolution with
    // about six maps of the last level's channels (a causal convolution's
    // three stacked frames among them), every convolution's two-frame
    // history, and the mid block's attention over one frame's latent pixels.
    // A band of the patch-parallel decoder holds its share (the attention's
    // scores too: its rows against every band's keys).
    e.decode = params * wb + P *
                                 ((tf * H * W * first * f * 6 + H * W * first * f * 2 * 8) / pp +
                                  h * w * top * f * 4 + h * w * h * w * f) /
                                 std::max(1, q.vae_bands);
    // The video [P, 3, F, H, W], its frames reordered, RGB + the encoded file.
    e.output = P * frames * H * W * 3 * (f + f + 2);
  }
  return e;
}

void check_memory(const MemoryEstimate& e, int local_ranks) {
  std::string source;
  const double available = static_cast<double>(available_memory_bytes(&source));
  if (available <= 0) return;  // unknown: nothing to compare with
  const double need = e.peak() * std::max(1, local_ranks);
  XDIT_CHECK(need <= available, "this request needs about ", human_size(need), " of memory (",
             e.describe(), local_ranks > 1 ? ", per process x " + std::to_string(local_ranks) : "",
             ") but ", human_size(available), " is available (", source,
             "): use a smaller size, fewer prompts or a shorter --max_sequence_length");
}

}  // namespace xdit::pipeline
