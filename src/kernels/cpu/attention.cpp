// Blockwise attention: for each (batch, head, block of queries) the keys are
// visited in blocks; each block's scores come from one small oneDNN GEMM, an
// online softmax (running max and sum in f32) rescales the accumulator, and a
// second GEMM adds P·V. Only a q_block × kv_block score tile exists at a time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/softmax_row.h"
#include "kernels/kernels.h"

namespace xdit::kernels {

namespace {

int64_t g_q_block = 128;
int64_t g_kv_block = 512;

// Copies [rows, D] at `stride` into a contiguous buffer of the compute type.
void pack_rows(const float* src, int64_t stride, int64_t rows, int64_t d, bool bf16, void* dst,
               const int32_t* index) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + (index != nullptr ? index[r] : r) * stride;
    if (bf16)
      cpu::f32_to_bf16_array(s, static_cast<uint16_t*>(dst) + r * d, static_cast<size_t>(d));
    else
      std::memcpy(static_cast<float*>(dst) + r * d, s, static_cast<size_t>(d) * 4);
  }
}

}  // namespace

void set_attention_blocks(int64_t q_block, int64_t kv_block) {
  XDIT_CHECK(q_block > 0 && kv_block > 0, "attention blocks must be positive");
  g_q_block = q_block;
  g_kv_block = kv_block;
}

bool attention_packs_bf16(bool bf16) {
  return bf16 && cpu_has_bf16();
}

void attention_pack_kv(const float* src, int64_t stride, int64_t B, int64_t H, int64_t n, int64_t D,
                       bool bf16_requested, void* dst, int64_t total, int64_t t) {
  XDIT_CHECK(t >= 0 && t + n <= total, "attention_pack_kv: tokens [", t, ", ", t + n, ") outside ",
             total);
  const bool bf16 = attention_packs_bf16(bf16_requested);
  const size_t esz = bf16 ? 2 : 4;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      pack_rows(src + b * n * stride + h * D, stride, n, D, bf16,
                static_cast<char*>(dst) + static_cast<size_t>(((b * H + h) * total + t) * D) * esz,
                nullptr);
}

void attention_unpack_kv(const void* src, int64_t B, int64_t H, int64_t total, int64_t D,
                         bool bf16_requested, float* dst) {
  const bool bf16 = attention_packs_bf16(bf16_requested);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < total; ++t) {
        const size_t at = static_cast<size_t>(((b * H + h) * total + t) * D);
        float* o = dst + (b * total + t) * H * D + h * D;
        for (int64_t i = 0; i < D; ++i)
          o[i] = bf16 ? bf16_to_f32(static_cast<const uint16_t*>(src)[at + static_cast<size_t>(i)])
                      : static_cast<const float*>(src)[at + static_cast<size_t>(i)];
      }
}

void attention(const AttentionArgs& a) {
  const bool packed = a.k_packed != nullptr;
  XDIT_CHECK(a.q && a.out && (packed ? a.v_packed != nullptr : a.k && a.v),
             "attention: null tensor");
  XDIT_CHECK(a.batch > 0 && a.heads > 0 && a.head_dim > 0 && a.q_len >= 0 && a.kv_len > 0,
             "attention: bad sizes");
  XDIT_CHECK(!packed || a.key_mask == nullptr, "attention: packed K/V take no key mask");
  const int64_t B = a.batch, H = a.heads, D = a.head_dim, Sq = a.q_len, Sk = a.kv_len;
  const bool bf16 = attention_packs_bf16(a.bf16);
  const size_t esz = bf16 ? 2 : 4;
  const auto dt = bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;

  // Valid keys per batch (all of them without a mask; all of them too when a
  // row is fully masked, which is what diffusers' additive −10000 bias gives).
  std::vector<std::vector<int32_t>> keep(static_cast<size_t>(B));
  std::vector<int64_t> kv_n(static_cast<size_t>(B), Sk);
  if (a.key_mask != nullptr) {
    for (int64_t b = 0; b < B; ++b) {
      auto& k = keep[static_cast<size_t>(b)];
      for (int64_t j = 0; j < Sk; ++j)
        if (a.key_mask[b * Sk + j] != 0) k.push_back(static_cast<int32_t>(j));
      if (k.empty() || static_cast<int64_t>(k.size()) == Sk)
        k.clear();
      else
        kv_n[static_cast<size_t>(b)] = static_cast<int64_t>(k.size());
    }
  }

  // Head-major packed copies in the compute type: q [B,H,Sq,D], k/v [B,H,Sk,D].
  thread_local std::vector<char> qbuf, kbuf, vbuf;
  const size_t qbytes = static_cast<size_t>(B * H * Sq * D) * esz;
  const size_t kvbytes = packed ? 0 : static_cast<size_t>(B * H * Sk * D) * esz;
  if (qbuf.size() < qbytes) qbuf.resize(qbytes);
  if (kbuf.size() < kvbytes) kbuf.resize(kvbytes);
  if (vbuf.size() < kvbytes) vbuf.resize(kvbytes);
  char* qp = qbuf.data();
  char* kw = kbuf.data();  // thread_local: take the pointers outside the parallel region
  char* vw = vbuf.data();
  const char* kp = packed ? static_cast<const char*>(a.k_packed) : kw;
  const char* vp = packed ? static_cast<const char*>(a.v_packed) : vw;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const size_t bh = static_cast<size_t>(b * H + h);
      const int32_t* idx =
          keep[static_cast<size_t>(b)].empty() ? nullptr : keep[static_cast<size_t>(b)].data();
      pack_rows(a.q + b * Sq * a.q_stride + h * D, a.q_stride, Sq, D, bf16,
                qp + bh * static_cast<size_t>(Sq * D) * esz, nullptr);
      if (packed) continue;
      pack_rows(a.k + b * Sk * a.k_stride + h * D, a.k_stride, kv_n[static_cast<size_t>(b)], D,
                bf16, kw + bh * static_cast<size_t>(Sk * D) * esz, idx);
      pack_rows(a.v + b * Sk * a.v_stride + h * D, a.v_stride, kv_n[static_cast<size_t>(b)], D,
                bf16, vw + bh * static_cast<size_t>(Sk * D) * esz, idx);
    }

  const int64_t QB = g_q_block, KB = g_kv_block;
  const int64_t q_blocks = (Sq + QB - 1) / QB;
  std::exception_ptr failure;
#pragma omp parallel
  {
    std::vector<float> s(static_cast<size_t>(QB * KB));
    std::vector<float> pf(static_cast<size_t>(QB * KB));
    std::vector<uint16_t> pb(bf16 ? static_cast<size_t>(QB * KB) : 0);
    std::vector<float> o(static_cast<size_t>(QB * D)), m(static_cast<size_t>(QB)),
        l(static_cast<size_t>(QB));
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t qb = 0; qb < q_blocks; ++qb) {
          try {
            const size_t bh = static_cast<size_t>(b * H + h);
            const int64_t q0 = qb * QB, rows = std::min(QB, Sq - q0);
            const int64_t n_kv = kv_n[static_cast<size_t>(b)];
            const char* qb_ptr =
                qp + (bh * static_cast<size_t>(Sq) + static_cast<size_t>(q0)) * D * esz;
            std::fill(m.begin(), m.end(), -INFINITY);
            std::fill(l.begin(), l.end(), 0.0f);
            for (int64_t k0 = 0; k0 < n_kv; k0 += KB) {
              const int64_t cols = std::min(KB, n_kv - k0);
              const char* kb_ptr =
                  kp + (bh * static_cast<size_t>(Sk) + static_cast<size_t>(k0)) * D * esz;
              const char* vb_ptr =
                  vp + (bh * static_cast<size_t>(Sk) + static_cast<size_t>(k0)) * D * esz;
              cpu::gemm({rows, cols, D, D, D, KB, true, false, dt}, qb_ptr, kb_ptr, s.data());
              for (int64_t r = 0; r < rows; ++r) {
                float* sr = s.data() + r * KB;
                float bm;
                if (a.bias == nullptr) {
                  bm = cpu::scale_and_max(sr, cols, a.scale);
                } else {  // bias row of this query, at the kept keys' original positions
                  const float* br = a.bias + (h * Sq + q0 + r) * Sk;
                  const int32_t* idx = keep[static_cast<size_t>(b)].empty()
                                           ? nullptr
                                           : keep[static_cast<size_t>(b)].data();
                  bm = -INFINITY;
                  for (int64_t j = 0; j < cols; ++j) {
                    sr[j] = sr[j] * a.scale + br[idx != nullptr ? idx[k0 + j] : k0 + j];
                    bm = std::max(bm, sr[j]);
                  }
                }
                const float m_new = std::max(m[r], bm);
                const float alpha = std::exp(m[r] - m_new);  // 0 on the first block
                float* pr = pf.data() + r * KB;
                const float sum =
                    cpu::exp_and_sum(sr, cols, m_new, pr, bf16 ? pb.data() + r * KB : nullptr);
                l[r] = l[r] * alpha + sum;
                m[r] = m_new;
                if (k0 > 0) cpu::scale_row(o.data() + r * D, D, alpha);
              }
              const void* p_ptr = bf16 ? static_cast<const void*>(pb.data()) : pf.data();
              cpu::gemm({rows, D, cols, KB, D, D, false, k0 > 0, dt}, p_ptr, vb_ptr, o.data());
            }
            for (int64_t r = 0; r < rows; ++r) {
              float* dst = a.out + (b * Sq + q0 + r) * a.out_stride + h * D;
              const float inv = 1.0f / l[r];
              for (int64_t i = 0; i < D; ++i) dst[i] = o[r * D + i] * inv;
              if (a.lse != nullptr) a.lse[(b * H + h) * Sq + q0 + r] = m[r] + std::log(l[r]);
            }
          } catch (...) {
#pragma omp critical
            failure = std::current_exception();
          }
        }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace xdit::kernels
