// kernels::attention on a CUDA device. bf16 calls without a mask, bias or
// packed K/V go to cuDNN's fused SDPA (flash attention; q/k/v converted to
// bf16 token-major rows first); everything else — f32, T5's relative bias,
// key masks, PipeFusion's / DistriFusion's packed K/V — runs the kernel
// below: one warp per query row with an online softmax over the keys (the
// same recurrence as the CPU op, never an S×S matrix), the log-sum-exp when
// asked for. It is the exact path the f32 parity checks use; speed comes
// from the cuDNN path.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/ops.h"

namespace xdit::kernels::cuda {

namespace {

constexpr int kWarps = 4;  // query rows per block

struct KvView {  // element (b, h, j, e) at base[b·bs + h·hs + j·ts + e]
  const void* base;
  int64_t bs, hs, ts;
};

struct Params {
  const float* q;
  int64_t q_stride;
  KvView k, v;
  float* out;
  int64_t out_stride;
  int64_t batch, heads, q_len, kv_len, d;
  float scale;
  float* lse;
  const uint8_t* mask;
  const float* bias;
  bool round_bf16;  // bf16 asked for: q, k, v rounded to bf16 as the products would
};

// Element e of a q, k or v row as the products see it: rounded to bf16 when
// bf16 was asked for.
template <class T>
__device__ inline float operand(const T* row, int64_t e, bool round) {
  const float v = to_float(row[e]);
  return round ? round_bf16(v) : v;
}

template <class KV, int PER>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(const Params a) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= a.batch * a.heads * a.q_len) return;
  const int64_t qi = row % a.q_len, h = (row / a.q_len) % a.heads, b = row / (a.q_len * a.heads);
  const float* qr = a.q + (b * a.q_len + qi) * a.q_stride + h * a.d;
  const KV* kb = static_cast<const KV*>(a.k.base) + b * a.k.bs + h * a.k.hs;
  const KV* vb = static_cast<const KV*>(a.v.base) + b * a.v.bs + h * a.v.hs;
  float q[PER], acc[PER];
#pragma unroll
  for (int p = 0; p < PER; ++p) {
    const int64_t e = lane + 32 * p;
    q[p] = e < a.d ? operand(qr, e, a.round_bf16) : 0.f;
    acc[p] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const float* bias_row = a.bias != nullptr ? a.bias + (h * a.q_len + qi) * a.kv_len : nullptr;
  const uint8_t* mask = a.mask != nullptr ? a.mask + b * a.kv_len : nullptr;
  for (int64_t j = 0; j < a.kv_len; ++j) {
    if (mask != nullptr && mask[j] == 0) continue;
    const KV* kr = kb + j * a.k.ts;
    float dot = 0.f;
#pragma unroll
    for (int p = 0; p < PER; ++p) {
      const int64_t e = lane + 32 * p;
      if (e < a.d) dot += q[p] * operand(kr, e, a.round_bf16);
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    float s = dot * a.scale;
    if (bias_row != nullptr) s += bias_row[j];
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 for the first key (m = -inf)
    const float pexp = expf(s - m_new);
    l = l * corr + pexp;
    const KV* vr = vb + j * a.v.ts;
#pragma unroll
    for (int p = 0; p < PER; ++p) {
      const int64_t e = lane + 32 * p;
      if (e < a.d) acc[p] = acc[p] * corr + pexp * operand(vr, e, a.round_bf16);
    }
    m = m_new;
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;  // every key masked: zeros
  float* orow = a.out + (b * a.q_len + qi) * a.out_stride + h * a.d;
#pragma unroll
  for (int p = 0; p < PER; ++p) {
    const int64_t e = lane + 32 * p;
    if (e < a.d) orow[e] = acc[p] * inv;
  }
  if (a.lse != nullptr && lane == 0) a.lse[(b * a.heads + h) * a.q_len + qi] = m + logf(l);
}

template <class KV>
void launch(const Params& p, Stream s) {
  const int64_t rows = p.batch * p.heads * p.q_len;
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  const int64_t per = (p.d + 31) / 32;
  if (per <= 1)
    attention_kernel<KV, 1><<<blocks, kWarps * 32, 0, s>>>(p);
  else if (per <= 2)
    attention_kernel<KV, 2><<<blocks, kWarps * 32, 0, s>>>(p);
  else if (per <= 3)
    attention_kernel<KV, 3><<<blocks, kWarps * 32, 0, s>>>(p);
  else if (per <= 4)
    attention_kernel<KV, 4><<<blocks, kWarps * 32, 0, s>>>(p);
  else if (per <= 8)
    attention_kernel<KV, 8><<<blocks, kWarps * 32, 0, s>>>(p);
  else
    attention_kernel<KV, 16><<<blocks, kWarps * 32, 0, s>>>(p);
  xdit::cuda::check_launch("attention");
}

#ifdef XDIT_HAVE_CUDNN_FE
// cuDNN's SDPA: sizes it takes (head_dim a multiple of 8 up to 256).
bool sdpa_applies(const AttentionArgs& a) {
  return a.bf16 && a.key_mask == nullptr && a.bias == nullptr && a.k_packed == nullptr &&
         a.head_dim % 8 == 0 && a.head_dim <= 256;
}

void run_sdpa(const AttentionArgs& a, Stream s) {
  const int64_t hd = a.heads * a.head_dim;
  const size_t qn = static_cast<size_t>(a.batch * a.q_len * hd);
  const uint16_t* q = bf16_rows_in(ScratchSlot::kAttnQ, a.q, a.q_stride, a.batch * a.q_len, hd, s);
  const uint16_t* k = bf16_rows_in(ScratchSlot::kAttnK, a.k, a.k_stride, a.batch * a.kv_len, hd, s);
  const uint16_t* v = bf16_rows_in(ScratchSlot::kAttnV, a.v, a.v_stride, a.batch * a.kv_len, hd, s);
  auto* o = static_cast<uint16_t*>(device_scratch(ScratchSlot::kAttnO, qn * 2));
  SdpaShape shape;
  shape.batch = a.batch;
  shape.heads = a.heads;
  shape.q_len = a.q_len;
  shape.kv_len = a.kv_len;
  shape.head_dim = a.head_dim;
  shape.scale = a.scale;
  device_sdpa().run(shape, q, k, v, o, a.lse, s);
  from_bf16_rows(o, a.batch * a.q_len, hd, a.out, a.out_stride, s);
}
#endif

// One warp per (batch, head, query): every lane reads the two log-sum-exps,
// the lanes scale their share of the row, lane 0 stores the merged one
// after the warp has read the old.
__global__ void merge_kernel(float* o, float* lse, const float* ob, const float* lse_b, int64_t S,
                             int64_t H, int64_t D, int64_t n) {
  XDIT_GRID_LOOP(i, n) {
    const int64_t row = i / 32, lane = i % 32;  // row = (b·H + h)·S + s
    const int64_t s = row % S, h = (row / S) % H, b = row / (S * H);
    const float x = lse[row], y = lse_b[row];
    const float m = fmaxf(x, y);
    __syncwarp();
    if (m == -INFINITY) continue;  // no keys on either side yet
    const float l = m + logf(expf(x - m) + expf(y - m));
    const float wx = expf(x - l), wy = expf(y - l);
    float* dst = o + ((b * S + s) * H + h) * D;
    const float* src = ob + ((b * S + s) * H + h) * D;
    for (int64_t d = lane; d < D; d += 32) dst[d] = wx * dst[d] + wy * src[d];
    if (lane == 0) lse[row] = l;
  }
}

}  // namespace

void attention_merge(float* o, float* lse, const float* ob, const float* lse_b, int64_t B,
                     int64_t S, int64_t H, int64_t D, Stream s) {
  const int64_t n = B * H * S * 32;  // whole warps: the grid loop's stride is a multiple of 32
  if (n == 0) return;
  constexpr int kThreads = 256;
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 16));
  merge_kernel<<<blocks, kThreads, 0, s>>>(o, lse, ob, lse_b, S, H, D, n);
  xdit::cuda::check_launch("attention_merge");
}

bool attention_packs_bf16(bool bf16) {
  return bf16;
}

void attention(const AttentionArgs& a, Stream s) {
  if (a.batch * a.heads * a.q_len == 0) return;
  if (a.out_bf16 != nullptr || a.q_bf16 != nullptr)
    throw Error("CUDA attention takes f32 q/k/v and writes f32 output (no q_bf16 / out_bf16)");
  if (a.head_dim > 512)
    throw Error("CUDA attention: head_dim " + std::to_string(a.head_dim) +
                " is above the 512 this kernel holds in registers");
#ifdef XDIT_HAVE_CUDNN_FE
  if (sdpa_applies(a)) return run_sdpa(a, s);
#endif
  Params p{};
  p.q = a.q;
  p.q_stride = a.q_stride;
  p.out = a.out;
  p.out_stride = a.out_stride;
  p.batch = a.batch;
  p.heads = a.heads;
  p.q_len = a.q_len;
  p.kv_len = a.kv_len;
  p.d = a.head_dim;
  p.scale = a.scale;
  p.lse = a.lse;
  p.mask = a.key_mask;
  p.bias = a.bias;
  p.round_bf16 = a.bf16;
  if (a.k_packed != nullptr) {  // head-major [B, H, kv_len, D] in the compute type
    const int64_t hs = a.kv_len * a.head_dim;
    p.k = {a.k_packed, a.heads * hs, hs, a.head_dim};
    p.v = {a.v_packed, a.heads * hs, hs, a.head_dim};
    if (attention_packs_bf16(a.bf16))
      launch<uint16_t>(p, s);
    else
      launch<float>(p, s);
    return;
  }
  p.k = {a.k, a.kv_len * a.k_stride, a.head_dim, a.k_stride};
  p.v = {a.v, a.kv_len * a.v_stride, a.head_dim, a.v_stride};
  launch<float>(p, s);
}

}  // namespace xdit::kernels::cuda
