// Blockwise attention: for each (batch, head, block of queries) the keys are
// visited in blocks; each block's scores come from one small oneDNN GEMM, an
// online softmax (running max and sum in f32) rescales the accumulator, and a
// second GEMM adds P·V. Only a q_block × kv_block score tile exists at a time.
//
// What makes it fast (measured on AMX and AVX-512-bf16 by `xdit bench
// attention`):
// - Each key and value block is packed once per call into the blocked layout
//   oneDNN's kernel reads (cpu::gemm_pack_b) and then reused by every query
//   block, instead of every product re-packing a plain operand.
// - On AMX the head dimension and the key blocks are zero-padded to a
//   multiple of 32, the depth of an AMX bf16 tile: a head_dim of 72 leaves a
//   ragged 8-deep tail that runs at a third of the speed of 96.
// - The softmax is one pass over the scores after the row maximum: the scale
//   folds into the exponent's FMA, exp is 2^x with vscalefps, and the
//   probabilities go straight to bf16.
// - On AMX, every key block after the first is fused: each 32 × 32 piece of
//   scores goes from the tiles to a 4 KB scratch and is exponentiated at
//   once against the reference the first block set (cpu::amx_qk_exp), so the
//   scores never travel to L2 and back. (Interleaving the next block's key
//   product with this block's softmax, the earlier design, gained nothing
//   measurable: with loads and stores in the vector code the tile unit and
//   the vector units did not overlap on the Sapphire Rapids measured.)
// - On AMX the P·V tiles start from the running output and add to it; only
//   rows whose exponent reference moved are rescaled first (rarely any after
//   the first key blocks). The oneDNN path adds a fresh product with one
//   FMA pass that also rescales.
// - bf16 layers on either side hand over bf16 rows (q_bf16 / k_bf16 /
//   v_bf16 in, out_bf16 out): no f32 copies written, reread and converted.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/aligned.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/softmax_row.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace xdit::kernels {

namespace {

int64_t g_q_block = 128;
int64_t g_kv_block = 512;
bool g_tiles = true;
// How far above the exponent's reference a block's scores may lie before the
// reference moves: e^30 ≈ 1e13 leaves f32 sums of any length room. A block
// whose exponentials sum to more than kSumLimit moves it.
constexpr float kHeadroom = 30.0f;
const float kSumLimit = std::exp(kHeadroom);

int64_t round_up(int64_t x, int64_t g) {
  return (x + g - 1) / g * g;
}

// Rows of f32 or bf16 values (exactly one of the pointers set), `stride`
// elements apart.
struct RowSource {
  const float* f32 = nullptr;
  const uint16_t* b16 = nullptr;
  int64_t stride = 0;
  RowSource at(int64_t elements) const {
    return {f32 != nullptr ? f32 + elements : nullptr, b16 != nullptr ? b16 + elements : nullptr,
            stride};
  }
};

// Copies rows [0, rows) of d values of src (row r taken from index[r] when
// index is set) into a buffer of the compute type whose rows are `ld` apart;
// the columns d … ld are left as they are. bf16 rows go to a bf16 buffer only.
void pack_rows(const RowSource& src, int64_t rows, int64_t d, bool bf16, void* dst, int64_t ld,
               const int32_t* index) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = (index != nullptr ? index[r] : r) * src.stride;
    if (src.b16 != nullptr)
      std::memcpy(static_cast<uint16_t*>(dst) + r * ld, src.b16 + at, static_cast<size_t>(d) * 2);
    else if (bf16)
      cpu::f32_to_bf16_array(src.f32 + at, static_cast<uint16_t*>(dst) + r * ld,
                             static_cast<size_t>(d));
    else
      std::memcpy(static_cast<float*>(dst) + r * ld, src.f32 + at, static_cast<size_t>(d) * 4);
  }
}

// Runs body() inside an OpenMP region, keeping the first exception to
// rethrow after the region (exceptions must not cross its boundary).
template <class F>
void guarded(std::exception_ptr& failure, F body) {
  try {
    body();
  } catch (...) {
#pragma omp critical(xdit_attention_failure)
    if (!failure) failure = std::current_exception();
  }
}

// The products of one attention call. S = Q·Kᵀ with K packed from token rows
// [cols, Dp]; O = P·V with V packed from [cols, Dp]; cols is padded to the
// granule with zero keys and values. Every query block has M rows (the last
// one padded), so one product shape, and one blocked layout of K and V,
// serves the whole call. With `tiles` the products are cpu::amx_qk / amx_pv
// (M a multiple of 32, values padded to Dv = 16·⌈D/16⌉); otherwise oneDNN
// matmuls, whose value operand keeps Dp columns (a ragged 80 ran at half the
// speed of 96 there).
struct Plan {
  bool tiles;
  int64_t g, Dp, Dv, KB, M;
  dnnl::memory::data_type dt;
  Plan(int64_t q_len, int64_t head_dim, bool bf16)
      : tiles(bf16 && g_tiles && cpu::amx_tiles_ready()),
        g(bf16 && cpu_has_amx() ? 32 : 1),  // an AMX bf16 tile row holds 32 values
        Dp(round_up(head_dim, g)),
        Dv(tiles ? round_up(head_dim, 16) : Dp),
        KB(g_kv_block),
        M(tiles ? round_up(std::min(g_q_block, std::max<int64_t>(q_len, 1)), 32)
                : std::min(g_q_block, round_up(std::max<int64_t>(q_len, 1), 16))),
        dt(bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32) {}
  cpu::GemmShape qk(int64_t colsp) const {
    return {M, colsp, Dp, Dp, Dp, colsp, true, false, dt, true};
  }
  cpu::GemmShape pv(int64_t colsp) const {
    return {M, Dv, colsp, colsp, Dp, Dv, false, false, dt, true};
  }
  size_t k_bytes(int64_t colsp) const {
    return tiles ? static_cast<size_t>(colsp * Dp) * 2 : cpu::gemm_b_bytes(qk(colsp));
  }
  size_t v_bytes(int64_t colsp) const {
    return tiles ? static_cast<size_t>(colsp * Dv) * 2 : cpu::gemm_b_bytes(pv(colsp));
  }
  // Padded column counts of the key blocks of kv_len keys: a full block and
  // the ragged last one (each listed once, none for an empty part).
  std::vector<int64_t> block_cols(int64_t kv_len) const {
    std::vector<int64_t> out;
    for (const int64_t cols : {std::min(KB, kv_len), kv_len % KB})
      if (cols > 0 && std::find(out.begin(), out.end(), round_up(cols, g)) == out.end())
        out.push_back(round_up(cols, g));
    return out;
  }
};

}  // namespace

std::vector<std::string> attention_implementations(int64_t q_len, int64_t kv_len, int64_t head_dim,
                                                   bool bf16) {
  const Plan plan(q_len, head_dim, attention_packs_bf16(bf16));
  if (plan.tiles) return {"xdit:amx_tiles"};
  std::vector<std::string> out;
  for (const int64_t colsp : plan.block_cols(kv_len)) {
    out.push_back(cpu::gemm_implementation(plan.qk(colsp)));
    out.push_back(cpu::gemm_implementation(plan.pv(colsp)));
  }
  return out;
}

void set_attention_tiles(bool enabled) {
  g_tiles = enabled;
}

void set_attention_blocks(int64_t q_block, int64_t kv_block) {
  XDIT_CHECK(q_block > 0 && kv_block > 0, "attention blocks must be positive");
  g_q_block = q_block;
  g_kv_block = kv_block;
}

bool attention_packs_bf16(bool bf16) {
  XDIT_CUDA_OP(attention_packs_bf16(bf16));
  return bf16 && cpu_has_bf16();
}

AttentionArgs attention_item_rows(const AttentionArgs& a, int64_t b, int64_t first, int64_t count) {
  XDIT_CHECK(0 <= b && b < a.batch && 0 <= first && count >= 0 && first + count <= a.q_len,
             "attention: rows [", first, ", ", first + count, ") of item ", b, " out of ", a.batch,
             " x ", a.q_len);
  XDIT_CHECK(a.bias == nullptr && a.q_bf16 == nullptr && a.out_bf16 == nullptr &&
                 (a.lse == nullptr || first == 0),
             "attention: item rows take no bias, bf16 rows, or lse past row 0");
  AttentionArgs p = a;
  p.batch = 1;
  p.q_len = count;
  const int64_t row = b * a.q_len + first;
  p.q = a.q + row * a.q_stride;
  p.out = a.out + row * a.out_stride;
  if (a.lse != nullptr) p.lse = a.lse + b * a.heads * a.q_len;
  if (a.key_mask != nullptr) p.key_mask = a.key_mask + b * a.kv_len;
  if (a.k_packed != nullptr) {
    const size_t item = static_cast<size_t>(a.heads * a.kv_len * a.head_dim) *
                        (attention_packs_bf16(a.bf16) ? 2 : 4);
    p.k_packed = static_cast<const uint8_t*>(a.k_packed) + static_cast<size_t>(b) * item;
    p.v_packed = static_cast<const uint8_t*>(a.v_packed) + static_cast<size_t>(b) * item;
  } else {
    p.k = a.k + b * a.kv_len * a.k_stride;
    p.v = a.v + b * a.kv_len * a.v_stride;
  }
  return p;
}

void attention_pack_kv(const float* src, int64_t stride, int64_t B, int64_t H, int64_t n, int64_t D,
                       bool bf16_requested, void* dst, int64_t total, int64_t t,
                       int64_t batch_stride) {
  if (batch_stride == 0) batch_stride = n * stride;
  XDIT_CHECK(t >= 0 && t + n <= total, "attention_pack_kv: tokens [", t, ", ", t + n, ") outside ",
             total);
  const bool bf16 = attention_packs_bf16(bf16_requested);
  XDIT_CUDA_OP(pack_kv(src, false, stride, B, H, n, D, bf16, dst, total, t, batch_stride));
  const size_t esz = bf16 ? 2 : 4;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      pack_rows(RowSource{src + b * batch_stride + h * D, nullptr, stride}, n, D, bf16,
                static_cast<char*>(dst) + static_cast<size_t>(((b * H + h) * total + t) * D) * esz,
                D, nullptr);
}

void attention_pack_kv_bf16(const uint16_t* src, int64_t stride, int64_t B, int64_t H, int64_t n,
                            int64_t D, void* dst, int64_t total, int64_t t, int64_t batch_stride) {
  if (batch_stride == 0) batch_stride = n * stride;
  XDIT_CHECK(t >= 0 && t + n <= total, "attention_pack_kv_bf16: tokens [", t, ", ", t + n,
             ") outside ", total);
  XDIT_CHECK(attention_packs_bf16(true),
             "attention_pack_kv_bf16: attention does not pack bf16 here");
  XDIT_CUDA_OP(pack_kv(src, true, stride, B, H, n, D, true, dst, total, t, batch_stride));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(static_cast<uint16_t*>(dst) + ((b * H + h) * total + t + r) * D,
                    src + b * batch_stride + r * stride + h * D, static_cast<size_t>(D) * 2);
}

void attention_merge(float* o, float* lse, const float* ob, const float* lse_b, int64_t B,
                     int64_t S, int64_t H, int64_t D) {
  XDIT_CUDA_OP(attention_merge(o, lse, ob, lse_b, B, S, H, D));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t li = (b * H + h) * S + s;
        const float x = lse[li], y = lse_b[li];
        const float m = std::max(x, y);
        if (m == -INFINITY) continue;  // no keys on either side yet
        const float l = m + std::log(std::exp(x - m) + std::exp(y - m));
        const float wx = std::exp(x - l), wy = std::exp(y - l);
        float* dst = o + ((b * S + s) * H + h) * D;
        const float* src = ob + ((b * S + s) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) dst[d] = wx * dst[d] + wy * src[d];
        lse[li] = l;
      }
}

void attention_unpack_kv(const void* src, int64_t B, int64_t H, int64_t total, int64_t D,
                         bool bf16_requested, float* dst) {
  const bool bf16 = attention_packs_bf16(bf16_requested);
  XDIT_CUDA_OP(unpack_kv(src, B, H, total, D, bf16, dst));
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
  const bool bf16_in = a.q_bf16 != nullptr;
  const bool have_kv =
      a.k_packed != nullptr ? a.v_packed != nullptr : (bf16_in ? a.k_bf16 && a.v_bf16 : a.k && a.v);
  XDIT_CHECK((bf16_in || a.q) && (a.out || a.out_bf16) && have_kv, "attention: null tensor");
  XDIT_CHECK(a.batch > 0 && a.heads > 0 && a.head_dim > 0 && a.q_len >= 0 && a.kv_len > 0,
             "attention: bad sizes");
  XDIT_CHECK(a.scale > 0.0f, "attention: the scale must be positive");
  XDIT_CUDA_OP(attention(a));
  if (a.q_len == 0) return;
  const int64_t B = a.batch, H = a.heads, D = a.head_dim, Sq = a.q_len, Sk = a.kv_len;
  const bool bf16 = attention_packs_bf16(a.bf16);
  XDIT_CHECK(!bf16_in || bf16, "attention: bf16 q/k/v need a bf16 attention on a CPU with bf16");
  const RowSource q_rows{a.q, a.q_bf16, a.q_stride}, k_rows{a.k, a.k_bf16, a.k_stride},
      v_rows{a.v, a.v_bf16, a.v_stride};
  const size_t esz = bf16 ? 2 : 4;
  const Plan plan(Sq, D, bf16);
  const int64_t g = plan.g, Dp = plan.Dp, Dv = plan.Dv, KB = plan.KB, M = plan.M;
  const int64_t q_blocks = (Sq + M - 1) / M, kv_blocks = (Sk + KB - 1) / KB;

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

  // Original positions of the kept keys of batch b, or null when all are kept.
  const auto kept = [&](int64_t b) -> const int32_t* {
    const auto& k = keep[static_cast<size_t>(b)];
    return k.empty() ? nullptr : k.data();
  };

  // K and V of every (batch, head, key block) in their blocked layouts, each
  // in a slot of the largest size any block needs.
  size_t slot = 0;
  for (int64_t b = 0; b < B; ++b)
    for (const int64_t colsp : plan.block_cols(kv_n[static_cast<size_t>(b)]))
      slot = std::max({slot, plan.k_bytes(colsp), plan.v_bytes(colsp)});
  slot = static_cast<size_t>(
      round_up(static_cast<int64_t>(slot), static_cast<int64_t>(kBufferAlignment)));
  thread_local AlignedVector<char> kbuf, vbuf;
  const size_t kv_bytes = static_cast<size_t>(B * H * kv_blocks) * slot;
  grow_discarding(kbuf, kv_bytes);
  grow_discarding(vbuf, kv_bytes);
  char* kw = kbuf.data();  // thread_local: take the pointers outside the parallel regions
  char* vw = vbuf.data();
  const auto slot_of = [&](char* base, int64_t b, int64_t h, int64_t j) {
    return base + static_cast<size_t>((b * H + h) * kv_blocks + j) * slot;
  };
  std::exception_ptr failure;
#pragma omp parallel
  {
    AlignedVector<char> tile(static_cast<size_t>(round_up(KB, g) * Dp) * esz, 0);
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < kv_blocks; ++j)
          guarded(failure, [&] {
            const int64_t n_kv = kv_n[static_cast<size_t>(b)], k0 = j * KB;
            if (k0 >= n_kv) return;
            const int64_t cols = std::min(KB, n_kv - k0), colsp = round_up(cols, g);
            const int32_t* idx = kept(b) != nullptr ? kept(b) + k0 : nullptr;
            // Token rows [cols, D] → tile [colsp, Dp], padding rows zeroed.
            const auto load = [&](const RowSource& src, const void* src_packed) {
              if (src_packed != nullptr) {  // the head's keys, the kept ones under a mask
                const char* head = static_cast<const char*>(src_packed) +
                                   static_cast<size_t>((b * H + h) * Sk * D) * esz;
                for (int64_t r = 0; r < cols; ++r)
                  std::memcpy(
                      tile.data() + static_cast<size_t>(r * Dp) * esz,
                      head + static_cast<size_t>((idx != nullptr ? idx[r] : k0 + r) * D) * esz,
                      static_cast<size_t>(D) * esz);
              } else {
                pack_rows(
                    src.at(b * Sk * src.stride + h * D + (idx != nullptr ? 0 : k0 * src.stride)),
                    cols, D, bf16, tile.data(), Dp, idx);
              }
              std::memset(tile.data() + static_cast<size_t>(cols * Dp) * esz, 0,
                          static_cast<size_t>((colsp - cols) * Dp) * esz);
            };
            const auto* rows = reinterpret_cast<const uint16_t*>(tile.data());
            load(k_rows, a.k_packed);
            if (plan.tiles)
              cpu::amx_pack_k(rows, colsp, Dp, reinterpret_cast<uint16_t*>(slot_of(kw, b, h, j)));
            else
              cpu::gemm_pack_b(plan.qk(colsp), tile.data(), slot_of(kw, b, h, j));
            load(v_rows, a.v_packed);
            if (plan.tiles)
              cpu::amx_pack_v(rows, colsp, Dp, Dv,
                              reinterpret_cast<uint16_t*>(slot_of(vw, b, h, j)));
            else
              cpu::gemm_pack_b(plan.pv(colsp), tile.data(), slot_of(vw, b, h, j));
          });
  }
  if (failure) std::rethrow_exception(failure);

#pragma omp parallel
  {
    const int64_t KBp = round_up(KB, g);
    // Row strides of the score and probability tiles: with the tiles, 64
    // bytes past the block width, since rows a multiple of 2 KB apart (512
    // keys in f32, 1024 in bf16) share a handful of L1 sets and the tile
    // stores and loads of a 16-row tile then miss each other out; oneDNN's
    // products take the plain width.
    const int64_t ld_s = plan.tiles ? KBp + 16 : KBp, ld_p = plan.tiles ? KBp + 32 : KBp;
    AlignedVector<char> qt(static_cast<size_t>(M * Dp) * esz, 0);  // padding columns stay 0
    AlignedVector<float> s(static_cast<size_t>(M * ld_s)),
        t(static_cast<size_t>(plan.tiles ? 0 : M * Dv));
    // P: bf16, or f32 (apart from the scores, which a second pass may reread).
    AlignedVector<uint16_t> p(bf16 ? static_cast<size_t>(M * ld_p) : 0);
    AlignedVector<float> pf32(bf16 ? 0 : static_cast<size_t>(M * KBp));
    // The running output, rows Dv apart (the tile products accumulate into it).
    AlignedVector<float> o(static_cast<size_t>(M * Dv));
    // 16 partial row sums of the fused key blocks (amx_qk_exp).
    AlignedVector<float> sums(plan.tiles ? static_cast<size_t>(M * 16) : 0);
    std::vector<float> m(static_cast<size_t>(M)), l(static_cast<size_t>(M)),
        alpha(static_cast<size_t>(M));
    const auto* qw = reinterpret_cast<const uint16_t*>(qt.data());
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t qb = 0; qb < q_blocks; ++qb)
          guarded(failure, [&] {
            const int64_t q0 = qb * M, rows = std::min(M, Sq - q0);
            const int64_t n_kv = kv_n[static_cast<size_t>(b)];
            const int32_t* idx = kept(b);
            pack_rows(q_rows.at((b * Sq + q0) * a.q_stride + h * D), rows, D, bf16, qt.data(), Dp,
                      nullptr);
            // Softmax of row r of key block [k0, k0 + cols) from the scores.
            const auto softmax_row = [&](int64_t r, int64_t k0, int64_t cols, int64_t colsp) {
              // (oneDNN's products keep the block's own width as the stride)
              float* sr = s.data() + r * (plan.tiles ? ld_s : colsp);
              float exp_scale = a.scale;
              if (a.bias != nullptr) {  // bias row of this query, at the kept keys' positions
                const float* br = a.bias + (h * Sq + q0 + r) * Sk;
                for (int64_t c = 0; c < cols; ++c)
                  sr[c] = sr[c] * a.scale + br[idx != nullptr ? idx[k0 + c] : k0 + c];
                exp_scale = 1.0f;
              }
              float* pf = bf16 ? nullptr : pf32.data() + r * colsp;
              uint16_t* pr = bf16 ? p.data() + r * (plan.tiles ? ld_p : colsp) : nullptr;
              // The exponent's reference m only has to keep exp from
              // overflowing: later blocks reuse the running m in one pass
              // and start again from their own maximum only when their sum
              // (which bounds every p) passes e^kHeadroom or is not finite;
              // the first block finds its maximum.
              float m_new = m[r], sum = 0.0f;
              bool fresh = k0 == 0;
              if (!fresh) {
                sum = cpu::exp_row(sr, cols, colsp, exp_scale, m[r], pf, pr);
                fresh = !(sum <= kSumLimit);
              }
              if (fresh) {
                m_new = std::max(m[r], cpu::row_max(sr, cols) * exp_scale);
                sum = cpu::exp_row(sr, cols, colsp, exp_scale, m_new, pf, pr);
              }
              alpha[r] = std::exp(m[r] - m_new);  // 0 on the first block, 1 when m holds
              l[r] = l[r] * alpha[r] + sum;
              m[r] = m_new;
            };
            // The key blocks of this query block. With the tiles and no
            // bias, every block after the first is fused (amx_qk_exp): its
            // exponentials use the reference m the first block set, so no
            // block needs its scores twice. Its row sums then show whether
            // the reference held; a sum past e^kHeadroom renormalises the
            // row (o and l scaled down, m raised: exact up to rounding), and
            // one that is not finite (a score more than ~88 above the
            // reference, or NaN input) means exp overflowed — as does a
            // non-finite o row found when renormalising (P·V past f32's
            // range) — and the query block starts again on the two-pass
            // path, which moves m before exponentiating. Returns whether the
            // pass went through.
            const auto key_blocks = [&](bool fused) {
              std::fill(m.begin(), m.end(), -INFINITY);
              std::fill(l.begin(), l.end(), 0.0f);
              for (int64_t k0 = 0, j = 0; k0 < n_kv; k0 += KB, ++j) {
                const int64_t cols = std::min(KB, n_kv - k0), colsp = round_up(cols, g);
                const auto* kj = reinterpret_cast<const uint16_t*>(slot_of(kw, b, h, j));
                const auto* vj = reinterpret_cast<const uint16_t*>(slot_of(vw, b, h, j));
                if (!plan.tiles) {
                  cpu::gemm(plan.qk(colsp), qt.data(), kj, s.data());
                  for (int64_t r = 0; r < rows; ++r) softmax_row(r, k0, cols, colsp);
                  cpu::gemm(plan.pv(colsp), bf16 ? static_cast<const void*>(p.data()) : pf32.data(),
                            vj, t.data());
                  for (int64_t i = 0; i < rows; ++i) {
                    if (k0 == 0)
                      std::memcpy(o.data() + i * Dv, t.data() + i * Dv, static_cast<size_t>(D) * 4);
                    else
                      cpu::scale_add_row(o.data() + i * Dv, t.data() + i * Dv, D, alpha[i]);
                  }
                  continue;
                }
                if (k0 == 0 || !fused) {
                  cpu::amx_qk(qw, M, Dp, kj, colsp, s.data(), ld_s);
                  for (int64_t r = 0; r < rows; ++r) softmax_row(r, k0, cols, colsp);
                  // o·α + P·V: rows whose reference moved are rescaled
                  // (rarely any after the first block), then the tiles add
                  // P·V to o.
                  if (k0 > 0)
                    for (int64_t i = 0; i < rows; ++i)
                      if (alpha[i] != 1.0f) cpu::scale_row(o.data() + i * Dv, Dv, alpha[i]);
                  cpu::amx_pv(p.data(), ld_p, M, colsp, vj, Dv, o.data(), k0 > 0);
                  continue;
                }
                std::fill(sums.begin(), sums.begin() + rows * 16, 0.0f);
                cpu::amx_qk_exp(qw, M, rows, Dp, kj, colsp, cols, a.scale, m.data(), p.data(), ld_p,
                                sums.data());
                cpu::amx_pv(p.data(), ld_p, M, colsp, vj, Dv, o.data(), true);
                for (int64_t r = 0; r < rows; ++r) {
                  float sum = 0.0f;
                  for (int64_t i = 0; i < 16; ++i) sum += sums[r * 16 + i];
                  if (!std::isfinite(sum)) return false;
                  l[r] += sum;
                  if (l[r] > kSumLimit) {
                    // o ≤ l · max |v| may have overflowed where the sum did
                    // not (values past ~1e25); the two-pass path keeps every
                    // p ≤ 1.
                    const float* orow = o.data() + r * Dv;
                    if (!std::all_of(orow, orow + D, [](float x) { return std::isfinite(x); }))
                      return false;
                    cpu::scale_row(o.data() + r * Dv, Dv, 1.0f / l[r]);
                    m[r] += std::log(l[r]);
                    l[r] = 1.0f;
                  }
                }
              }
              return true;
            };
            const bool fused = plan.tiles && a.bias == nullptr;
            if (!key_blocks(fused)) key_blocks(false);
            if (plan.tiles) cpu::amx_tiles_release();
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t at = (b * Sq + q0 + r) * a.out_stride + h * D;
              const float inv = 1.0f / l[r];
              if (a.out_bf16 != nullptr) {  // the same f32 values, rounded once
                cpu::scale_row(o.data() + r * Dv, D, inv);
                cpu::f32_to_bf16_array(o.data() + r * Dv, a.out_bf16 + at, static_cast<size_t>(D));
              } else {
                for (int64_t i = 0; i < D; ++i) a.out[at + i] = o[r * Dv + i] * inv;
              }
              if (a.lse != nullptr) a.lse[(b * H + h) * Sq + q0 + r] = m[r] + std::log(l[r]);
            }
          });
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace xdit::kernels
