#include "models/double_stream.h"

#include "kernels/kernels.h"

namespace xdit::models {

namespace {
constexpr float kBlockEps = 1e-6f;  // the blocks' LayerNorms
}  // namespace

DoubleStreamBlock::DoubleStreamBlock(const io::WeightSource& w, const std::string& prefix,
                                     const DoubleStreamNames& names,
                                     const nn::JointAttentionConfig& joint, nn::ComputeType ct,
                                     const nn::TensorParallel& tp)
    : dim_(joint.dim),
      mod_(nn::load_linear(w, prefix + "." + names.mod, joint.dim, 6 * joint.dim, true, ct)),
      mod_context_(
          nn::load_linear(w, prefix + "." + names.mod_context, joint.dim, 6 * joint.dim, true, ct)),
      attn_(w, prefix + "." + names.attn, joint, ct, tp),
      ff_(w, prefix + "." + names.ff, joint.dim, 4 * joint.dim, ct, tp),
      ff_context_(w, prefix + "." + names.ff_context, joint.dim, 4 * joint.dim, ct, tp) {}

void DoubleStreamBlock::forward(float* X, const float* st, int64_t B, int64_t L, int64_t N,
                                const Attend& attend, nn::Scratch& mod_s, nn::Scratch& normed,
                                nn::Scratch& tmp_s, nn::Scratch& hidden) const {
  const int64_t S = L + N, D = dim_;
  float* mod = mod_s.get(static_cast<size_t>(B * 12 * D));
  float* mi = mod;              // image: shift, scale, gate (attention), shift, scale, gate (MLP)
  float* mc = mod + B * 6 * D;  // text, the same
  mod_.forward(st, B, mi);
  mod_context_.forward(st, B, mc);
  float* nh = normed.get(static_cast<size_t>(B * S * D));
  float* tmp = tmp_s.get(static_cast<size_t>(B * S * D));
  float* ffh = hidden.get(static_cast<size_t>(B * S * ff_.inner()));
  // Per batch item: text rows [0, L), image rows [L, S) of X, nh, tmp.
  const auto text = [&](float* p, int64_t b) { return p + b * S * D; };
  const auto image = [&](float* p, int64_t b) { return p + (b * S + L) * D; };
  for (int64_t b = 0; b < B; ++b) {
    kernels::layer_norm_modulate(image(X, b), image(nh, b), 1, N, D, kBlockEps, mi + b * 6 * D,
                                 mi + b * 6 * D + D, 0);
    kernels::layer_norm_modulate(text(X, b), text(nh, b), 1, L, D, kBlockEps, mc + b * 6 * D,
                                 mc + b * 6 * D + D, 0);
  }
  attend(nh, tmp);  // (image, text) after to_out / to_add_out
  for (int64_t b = 0; b < B; ++b) {
    kernels::gated_residual_add(text(X, b), text(tmp, b), 1, L, D, mc + b * 6 * D + 2 * D, 0);
    kernels::gated_residual_add(image(X, b), image(tmp, b), 1, N, D, mi + b * 6 * D + 2 * D, 0);
    // MLPs: image, then text.
    kernels::layer_norm_modulate(image(X, b), image(nh, b), 1, N, D, kBlockEps, mi + b * 6 * D + 3 * D,
                                 mi + b * 6 * D + 4 * D, 0);
    ff_.forward(image(nh, b), N, image(tmp, b), ffh);
    kernels::gated_residual_add(image(X, b), image(tmp, b), 1, N, D, mi + b * 6 * D + 5 * D, 0);
    kernels::layer_norm_modulate(text(X, b), text(nh, b), 1, L, D, kBlockEps, mc + b * 6 * D + 3 * D,
                                 mc + b * 6 * D + 4 * D, 0);
    ff_context_.forward(text(nh, b), L, text(tmp, b), ffh);
    kernels::gated_residual_add(text(X, b), text(tmp, b), 1, L, D, mc + b * 6 * D + 5 * D, 0);
  }
}

void DoubleStreamBlock::modulated_image(const float* X, const float* st, int64_t B, int64_t L,
                                        int64_t N, float* out, nn::Scratch& mod_s) const {
  const int64_t S = L + N, D = dim_;
  float* mod = mod_s.get(static_cast<size_t>(B * 12 * D));
  mod_.forward(st, B, mod);  // shift, scale of the image stream's six
  for (int64_t i = 0; i < B; ++i)
    kernels::layer_norm_modulate(X + (i * S + L) * D, out + i * N * D, 1, N, D, kBlockEps,
                                 mod + i * 6 * D, mod + i * 6 * D + D, 0);
}

Tensor packed_output(const nn::AdaLayerNormContinuous& norm_out, const kernels::Linear& proj_out,
                     const float* st, const float* x, int64_t B, int64_t L, int64_t N, int64_t D,
                     int64_t C, int64_t rows, int64_t W, nn::Scratch& normed, nn::Scratch& mod,
                     nn::Scratch& packed) {
  float* nh = normed.get(static_cast<size_t>(B * (L + N) * D));
  norm_out.forward(st, B, x, L + N, L, N, nh, mod.get(static_cast<size_t>(B * 12 * D)));
  float* p = packed.get(static_cast<size_t>(B * N * 4 * C));
  proj_out.forward(nh, B * N, p);
  Tensor out = Tensor::empty({B, C, 2 * rows, W}, DType::kF32, current_device());
  kernels::pack_2x2(p, out.data<float>(), B, C, 2 * rows, W, 0, rows, false);
  return out;
}

}  // namespace xdit::models
