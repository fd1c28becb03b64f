// The op set. Activations are f32 and contiguous unless a stride says
// otherwise; each op has a plain reference in kernels/reference.h that the op
// tests compare against. Matmul lives in kernels/linear.h (oneDNN inside).
// Each op runs on this thread's current device (core/device.h DeviceScope):
// the CPU implementations in kernels/cpu/, or, under a CUDA device, those of
// kernels/cuda/ops.h on device pointers. Exceptions, the same on every
// device: timestep and position tables take host inputs (they are computed
// on the host and copied), and GroupNorm's `moments` are host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"

namespace xdit::kernels {

// y = (x - mean) / sqrt(var + eps) [* gamma + beta] over the last `dim` values
// of each of `rows` rows. gamma/beta may be null (no affine). y may equal x.
void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps,
                const float* gamma = nullptr, const float* beta = nullptr);

// T5's RMSNorm: y = x / sqrt(mean(x²) + eps) · weight (no mean removal, no bias).
void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* weight);

// Gated GELU of a fused [gate | up] projection: x [rows, 2n] →
// y[r, j] = gelu_tanh(x[r, j]) · x[r, n + j], y [rows, n].
void gelu_tanh_gate(const float* x, float* y, int64_t rows, int64_t n);
// SwiGLU of a fused [gate | up] projection: y[r, j] = silu(x[r, j]) ·
// x[r, n + j] (Qwen's MLP, Z-Image's feed-forward), y [rows, n].
void silu_gate(const float* x, float* y, int64_t rows, int64_t n);

// GroupNorm over NHWC activations x [B, HW, C] with G groups (statistics per
// batch and group over HW × C/G values, in f64), affine, optionally followed
// by SiLU. y may equal x.
void group_norm_nhwc(const float* x, float* y, int64_t batch, int64_t hw, int64_t channels,
                     int64_t groups, float eps, const float* gamma, const float* beta, bool silu);

// The same with bf16 output (rounded to nearest even), the input of a bf16
// convolution (Conv2d::forward_bf16).
void group_norm_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t hw, int64_t channels,
                          int64_t groups, float eps, const float* gamma, const float* beta,
                          bool silu);

// GroupNorm in two halves, so that row bands on several ranks can add up
// their statistics before normalising (the patch-parallel VAE): Σx and Σx²
// of every (batch item, group) of x [B, HW, C] in f64 → moments [B, G, 2];
// then x normalised with moments summed over `count` values per group (all
// bands' pixels × C/G), affine, optionally SiLU. y's batch items lie
// `y_batch_stride` elements apart (0: HW·C), so that the output can fill the
// inside of a buffer with halo rows.
void group_norm_moments_nhwc(const float* x, int64_t batch, int64_t hw, int64_t channels,
                             int64_t groups, double* moments);
void group_norm_apply_nhwc(const float* x, float* y, int64_t batch, int64_t hw, int64_t channels,
                           int64_t groups, float eps, const float* gamma, const float* beta,
                           bool silu, const double* moments, double count,
                           int64_t y_batch_stride = 0);
void group_norm_apply_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t hw,
                                int64_t channels, int64_t groups, float eps, const float* gamma,
                                const float* beta, bool silu, const double* moments, double count,
                                int64_t y_batch_stride = 0);

// Nearest-neighbour ×2 upsampling of NHWC x [B, H, W, C] → y [B, 2H, 2W, C],
// y's batch items `y_batch_stride` elements apart (0: 4·H·W·C); the _bf16
// form writes bf16 (a bf16 convolution's input).
void upsample_nearest2x_nhwc(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                             int64_t channels, int64_t y_batch_stride = 0);
void upsample_nearest2x_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t h, int64_t w,
                                  int64_t channels, int64_t y_batch_stride = 0);

// f32 → bf16 (round to nearest even) over n values, threaded.
void to_bf16_array(const float* x, uint16_t* y, int64_t n);
// The same over `rows` rows of n values, `stride` elements apart in x,
// packed in y (rows · n), threaded over the rows.
void to_bf16_rows(const float* x, int64_t stride, int64_t rows, int64_t n, uint16_t* y);

// Elementwise; y may equal x.
void gelu_tanh(const float* x, float* y, int64_t n);   // 0.5x(1+tanh(√(2/π)(x+0.044715x³)))
void silu(const float* x, float* y, int64_t n);        // x·sigmoid(x)
void gelu_erf(const float* x, float* y, int64_t n);    // 0.5x(1+erf(x/√2)), torch's exact GELU
void quick_gelu(const float* x, float* y, int64_t n);  // x·sigmoid(1.702x), OpenAI CLIP's
void relu(const float* x, float* y, int64_t n);        // max(x, 0)
void tanh(const float* x, float* y, int64_t n);        // Z-Image's gates

// Softmax over each row of `cols` values, in place.
void softmax_rows(float* x, int64_t rows, int64_t cols);

// AdaLN modulation: y[b,t,:] = x[b,t,:] * (1 + scale_b) + shift_b, where
// shift_b = shift + b*mod_stride (same for scale). y may equal x.
void modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
              const float* shift, const float* scale, int64_t mod_stride);

// layer_norm (no affine) followed by modulate, in one pass over x.
void layer_norm_modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
                         float eps, const float* shift, const float* scale, int64_t mod_stride);
// The same written as bf16 (rounded to nearest even, as a bf16 linear layer
// rounds its f32 input): the layer reads it directly, with no f32 copy
// written, reread and converted in between.
void layer_norm_modulate(const float* x, uint16_t* y, int64_t batch, int64_t tokens, int64_t dim,
                         float eps, const float* shift, const float* scale, int64_t mod_stride);

// Gated residual: h[b,t,:] += gate_b * y[b,t,:] (gate_b = gate + b*gate_stride,
// or 1 when gate is null).
void gated_residual_add(float* h, const float* y, int64_t batch, int64_t tokens, int64_t dim,
                        const float* gate, int64_t gate_stride);
// The same, the new h also written as bf16 to h_bf16 (rounded to nearest
// even): the input of a bf16 layer that reads the residual stream itself
// (PixArt's cross-attention), converted in the pass that writes h.
void gated_residual_add(float* h, const float* y, int64_t batch, int64_t tokens, int64_t dim,
                        const float* gate, int64_t gate_stride, uint16_t* h_bf16);
// gated_residual_add, then layer_norm_modulate of the new h into `out`, in
// one pass over h (each row is normalised while it is still in cache); gate,
// shift and scale all `mod_stride` apart between batch items. f32 or bf16 out.
void residual_layer_norm_modulate(float* h, const float* y, int64_t batch, int64_t tokens,
                                  int64_t dim, const float* gate, float eps, const float* shift,
                                  const float* scale, int64_t mod_stride, float* out);
void residual_layer_norm_modulate(float* h, const float* y, int64_t batch, int64_t tokens,
                                  int64_t dim, const float* gate, float eps, const float* shift,
                                  const float* scale, int64_t mod_stride, uint16_t* out);

// PatchEmbed's p×p stride-p convolution as im2col: latent [B,C,H,W] →
// cols [B·(H/p)·(W/p), C·p·p] in (c, i, j) order, matching a conv weight
// [D,C,p,p] viewed as [D, C·p·p]; a Linear then finishes the convolution.
void patchify(const float* latent, int64_t batch, int64_t channels, int64_t height, int64_t width,
              int64_t p, float* cols);
// Inverse of the DiT output layout: x [B, h·w, p·p·C] in (p, q, c) order →
// out [B, C, h·p, w·p] (diffusers' einsum "nhwpqc->nchpwq").
void unpatchify(const float* x, int64_t batch, int64_t channels, int64_t h, int64_t w, int64_t p,
                float* out);

// y[r·y_stride + j] = x[r·x_stride + j] + b[r·b_stride + j] for `rows` rows
// of n values (b_stride 0: one row added to every row, e.g. AdaLN's table
// plus each batch item's timestep projection). y may equal x.
void add_rows(const float* x, int64_t x_stride, const float* b, int64_t b_stride, float* y,
              int64_t y_stride, int64_t rows, int64_t n);
// `rows` rows of n f32 values from src (`src_stride` apart) to dst
// (`dst_stride` apart): slices, concatenations. Rows must not overlap; with
// one row the strides are unused.
void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
               int64_t n);
// The same in bytes: `rows` rows of `row_bytes` from src (`src_pitch` bytes
// apart) to dst (`dst_pitch` apart), for buffers of any element type (the
// parallel layer's exchange buffers).
void copy_row_bytes(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, int64_t rows,
                    size_t row_bytes);

// `bytes` bytes from host memory to `dst` on this thread's device (a plain
// copy on the CPU): tables and masks a model makes on the host.
void copy_from_host(void* dst, const void* host, size_t bytes);

// y = x / divisor + shift over n values (y may equal x): latents unscaled as
// diffusers does it (a division, not a product with the reciprocal).
void affine_div(const float* x, float* y, int64_t n, float divisor, float shift);
// The denoising loop's elementwise work, on the latents' device.
// Classifier-free guidance: noise = u + g·(c − u) over n values (diffusers'
// order of operations).
void guidance_combine(const float* uncond, const float* cond, float g, float* noise, int64_t n);
// SD3's skip-layer guidance: noise += (c − skip)·scale.
void guidance_add(float* noise, const float* cond, const float* skip, float scale, int64_t n);
// Qwen-Image's true CFG: each token's guided noise rescaled to the norm of
// its cond prediction — noise *= ‖cond‖ / ‖noise‖ over the token's values,
// the p × p latent pixels of a patch in every channel. cond and noise are
// [C, rows, W] (rows and W multiples of p; the norms' sums in f64).
void cfg_renorm_patches(const float* cond, float* noise, int64_t channels, int64_t rows,
                        int64_t width, int64_t p);
// A step cache's indicator (pipeline/first_block_cache.h, teacache.h), on
// host memory whatever the current device: r = out − in over n values (out
// itself where `in` is null) and, when `prev` is given, sums[0] += Σ|r − prev| and sums[1] +=
// Σ|prev| (accumulated in double).
void residual_change(const float* out, const float* in, const float* prev, float* r, int64_t n,
                     double sums[2]);
// TaylorSeer (diffusers' hooks/taylorseer_cache.py, TaylorSeerState): the
// factors of n values, order k at factors + k·n. update: F0 ← y and, for
// the `have` orders already stored (up to max_order), F(j+1) ← (Fj_new −
// Fj_old) / delta, each rounded in f32 as torch does; predict: out = Σ_k
// Fk · coeff[k] over `orders` orders, accumulated from 0 in that order.
void taylor_update(const float* y, float* factors, int64_t have, float delta, int64_t n);
void taylor_predict(const float* factors, const float* coeff, int64_t orders, float* out,
                    int64_t n);
// Flow-Match Euler: sample += dt·model_output, the product rounded before the
// add (as torch computes it).
void flow_euler_step(const float* model_output, float* sample, float dt, int64_t n);
// DPM-Solver(++) multistep, per value: m0 = xa·x + xb·model_output (the
// converted prediction, stored in cur), x ← cs·x + c0·m0, and at second order
// + c1·(inv_r0·(m0 − prev)). `items` runs of n values: run i of model_output
// and sample at i·n, of cur and prev at i·hist_stride (the step's rows of
// the full-size history).
struct DpmUpdate {
  float xa = 1, xb = 0, cs = 0, c0 = 0, c1 = 0, inv_r0 = 0;
  bool second_order = false;
};
void dpm_solver_step(const float* model_output, float* sample, float* cur, const float* prev,
                     int64_t items, int64_t n, int64_t hist_stride, const DpmUpdate& k);
// UniPC multistep (predict_x0), per value: x0 = xa·x + xb·model_output;
// the corrector (when `correct`) xc = ca·last + cb·m0 − cg·(cr·(m1 − m0)·c_inv_r
// [c_second] + cl·(x0 − m0)), else xc = x; the predictor x ← pa·xc + pb·x0
// − pg·(0.5·(m0 − x0)·p_inv_r) [p_second]; then last ← xc and m1 ← x0 (the
// caller swaps cur and prev after the step). m0 is the last step's x0 (cur),
// m1 the one before (prev). Runs and strides as dpm_solver_step.
struct UniPcUpdate {
  float xa = 1, xb = 0;
  bool correct = false, c_second = false, p_second = false;
  float ca = 0, cb = 0, cg = 0, cr = 0, c_inv_r = 0, cl = 0;
  float pa = 0, pb = 0, pg = 0, p_inv_r = 0;
};
void unipc_step(const float* model_output, float* sample, const float* cur, float* prev,
                float* last, int64_t items, int64_t n, int64_t hist_stride, const UniPcUpdate& k);

// Layout changes: rows [r0, r0 + rows) of x [B, C, H, W] → y [B, rows, W, C];
// and x [B, HW, C] → y [B, C, HW].
void nchw_rows_to_nhwc(const float* x, int64_t batch, int64_t channels, int64_t height,
                       int64_t width, int64_t r0, int64_t rows, float* y);
void nhwc_to_nchw(const float* x, int64_t batch, int64_t hw, int64_t channels, float* y);
// `bytes` bytes of zeros (halo rows at an image's edge).
void zero_bytes(void* dst, size_t bytes);

// FLUX's 2×2 packing: latent rows [2·r0, 2·r1) of plain [B, C, H, W] ↔ the
// packed tokens of patch rows [r0, r1), [B, (r1 − r0)·(W/2), 4C], channel
// c·4 + dy·2 + dx of patch (row, col). Packing reads the whole plain tensor
// (H rows); unpacking writes the rows' [B, C, 2·(r1 − r0), W] (H ignored).
void pack_2x2(const float* src, float* dst, int64_t batch, int64_t channels, int64_t height,
              int64_t width, int64_t r0, int64_t r1, bool pack);

// Per-head RMSNorm of q and k, then rotary embedding, in place on fused
// [q | k | v] rows (3·heads·head_dim wide, `seq` rows per batch item) for
// rows [row_begin, row_begin + rows): q/k weights [head_dim], cos/sin
// tables [seq, head_dim] (each angle repeated for its interleaved pair:
// (x0, x1) → (x0·cos − x1·sin, x1·cos + x0·sin), each product rounded before
// the sum as torch computes it). FLUX's attention inputs; with cos null, the
// RMSNorm alone (SD3's qk norm).
void qk_norm_rope(float* qkv, int64_t batch, int64_t seq, int64_t row_begin, int64_t rows,
                  int64_t heads, int64_t head_dim, float eps, const float* wq, const float* wk,
                  const float* cos, const float* sin);
// RMSNorm across all heads of a q or k row (Wan: torch.nn.RMSNorm over
// heads·head_dim), then, with cos non-null, the interleaved rotary embedding
// of each head as qk_norm_rope. In two steps, so that tensor parallelism can
// sum the squares of every rank's heads in between: row_sum_squares writes
// each row's sum of squares of its `width` values (`stride` apart);
// rms_scale_rope scales x·w·rsqrt(sumsq/total_width + eps) and rotates, row r
// reading table row r % seq of cos/sin [seq, head_dim].
void row_sum_squares(const float* x, int64_t rows, int64_t stride, int64_t width, float* sumsq);
void rms_scale_rope(float* x, int64_t rows, int64_t stride, int64_t width, const float* sumsq,
                    int64_t total_width, float eps, const float* w, int64_t seq, int64_t head_dim,
                    const float* cos, const float* sin);

// Sinusoidal timestep embedding (diffusers get_timestep_embedding with
// max_period 10000): out[n, dim] = [sin | cos] (or [cos | sin] when flip).
// `scale` multiplies t·freq after its rounding (diffusers' Timesteps(scale=):
// Qwen-Image's 1000 on t / 1000).
void timestep_embedding(const float* t, int64_t n, int64_t dim, bool flip_sin_to_cos,
                        float downscale_freq_shift, float* out, float scale = 1.0f);

// 2-D sin-cos position embedding for a gh×gw grid (diffusers
// get_2d_sincos_pos_embed): out[gh·gw, dim], first half from the column
// coordinate, second half from the row coordinate.
void sincos_pos_embed_2d(int64_t dim, int64_t gh, int64_t gw, float base_size,
                         float interpolation_scale, float* out);

// Blockwise (flash-style) multi-head attention with the log-sum-exp.
// Q, K, V, O are [B, S, H, D] with `*_stride` elements between tokens (head h
// at offset h·D) and batches packed (batch stride = S · stride). Never forms
// an S×S matrix: keys are visited in blocks with an online softmax.
struct AttentionArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, out_stride = 0;
  int64_t batch = 0, heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  float scale = 0.0f;                 // usually 1/sqrt(head_dim)
  float* lse = nullptr;               // optional out: [B, H, q_len], natural log
  const uint8_t* key_mask = nullptr;  // optional [B, kv_len]: 0 = padding (ignored)
  // Optional additive bias [H, q_len, kv_len], the same for every batch
  // (T5's relative position bias): logits = scale·q·k + bias.
  const float* bias = nullptr;
  bool bf16 = false;  // the two products in bf16, f32 accumulation
  // Optional: K and V already packed by attention_pack_kv (head-major
  // [B, H, kv_len, D] in the compute type); k, v and their strides are then
  // unused. For callers that keep K/V across calls (PipeFusion's buffers).
  const void* k_packed = nullptr;
  const void* v_packed = nullptr;
  // Optional, CPU only, for bf16 layers on either side (no f32 copies
  // written, reread and converted): q, k and v given as bf16 rows instead
  // (all three, same strides; with bf16 set), and the output written here as
  // bf16 (rounded to nearest even, rows out_stride apart) instead of to `out`.
  const uint16_t* q_bf16 = nullptr;
  const uint16_t* k_bf16 = nullptr;
  const uint16_t* v_bf16 = nullptr;
  uint16_t* out_bf16 = nullptr;
};
void attention(const AttentionArgs& a);
// The arguments that attend only rows [first, first + count) of batch item
// b's queries in `a` (batch items q_len rows apart): a batch of one with the
// item's q/out rows, K/V (packed or not) and key mask. Its lse, when `a` has
// one, is [H, count] from the item's start (H·q_len apart), so first must be
// 0 then; no bias, no bf16 rows.
AttentionArgs attention_item_rows(const AttentionArgs& a, int64_t b, int64_t first, int64_t count);

// Whether attention with `bf16` requested computes (and packs) in bf16.
bool attention_packs_bf16(bool bf16);
// Packs tokens [0, n) of src ([B, n, H, D], `stride` elements between tokens,
// `batch_stride` between batch items: 0 = n·stride) into tokens [t, t + n) of
// dst, a head-major [B, H, total, D] buffer of the compute type (bf16 when
// attention_packs_bf16(bf16), else f32).
void attention_pack_kv(const float* src, int64_t stride, int64_t batch, int64_t heads, int64_t n,
                       int64_t head_dim, bool bf16, void* dst, int64_t total, int64_t t,
                       int64_t batch_stride = 0);
// The same from bf16 src, into a bf16 packed buffer (attention_packs_bf16(true)):
// K/V that travelled in bf16 (patch parallelism's exchange).
void attention_pack_kv_bf16(const uint16_t* src, int64_t stride, int64_t batch, int64_t heads,
                            int64_t n, int64_t head_dim, void* dst, int64_t total, int64_t t,
                            int64_t batch_stride = 0);
// Merges a partial attention result into an accumulator, exactly (Ring
// attention's blocks): lse' = log(e^lse + e^lse_b),
// o' = e^(lse−lse')·o + e^(lse_b−lse')·o_b, in f32. o, ob: [B, S, H, D];
// lse, lse_b: [B, H, S] as attention writes them.
void attention_merge(float* o, float* lse, const float* ob, const float* lse_b, int64_t batch,
                     int64_t tokens, int64_t heads, int64_t head_dim);
// The inverse, for inspection: tokens [0, total) of a packed buffer → f32
// [B, total, H·D].
void attention_unpack_kv(const void* src, int64_t batch, int64_t heads, int64_t total,
                         int64_t head_dim, bool bf16, float* dst);

// The implementations of the products attention runs for these sizes: oneDNN's
// (creating, not running, the primitives), or "xdit:amx_tiles" for the
// hand-written AMX products; for the no-reference-kernel check.
std::vector<std::string> attention_implementations(int64_t q_len, int64_t kv_len, int64_t head_dim,
                                                   bool bf16);

// Block sizes used by attention (exposed for tests that force several blocks).
void set_attention_blocks(int64_t q_block, int64_t kv_block);
// Whether bf16 attention on AMX uses the hand-written tile products (default)
// or oneDNN matmuls; for tests and benchmarks that compare the two.
void set_attention_tiles(bool enabled);

// Whether bf16 3x3 convolutions (padding 1) constructed from now on run
// Winograd F(2x2, 3x3) (where the CPU has AVX-512-bf16) or oneDNN's direct
// convolution; for tests and benchmarks that compare the two. Without a
// choice (never called, or std::nullopt), XDIT_CONV=winograd|direct decides,
// else the CPU: Winograd unless oneDNN runs bf16 on AMX.
void set_conv_winograd(std::optional<bool> enabled);

// Whether the CPU has native bf16 dot products (AVX-512-bf16 or AMX), as
// cpu_isa() sees it (ONEDNN_MAX_CPU_ISA caps it).
bool cpu_has_bf16();
// Whether oneDNN runs bf16 products on AMX tiles.
bool cpu_has_amx();
// The ISA oneDNN dispatches to, e.g. "avx512_core_bf16".
const char* cpu_isa_name();

}  // namespace xdit::kernels
