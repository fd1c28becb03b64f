// GCC 12's AVX-512 intrinsics start from undefined vectors, which
// -Wmaybe-uninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Q4_K and Q5_K layers as integers (kernels/cpu/q8_0_gemm.h has the
// formula; Q5_K's weights have a fifth bit beside each nibble).
#include <immintrin.h>

#include <cstring>

#include "core/aligned.h"
#include "core/error.h"
#include "io/gguf_quants.h"
#include "kernels/cpu/int8_tile.h"
#include "kernels/cpu/q8_0_gemm.h"

namespace xdit::kernels::cpu {

namespace {

constexpr int64_t kSub = kInt8Group;    // values per sub-block (one activation block)
constexpr int64_t kLanes = kInt8Lanes;  // output channels per panel
constexpr int64_t kBlockValues = 256;   // values per Q4_K block
// Q4_K: d, dmin, 12 bytes of scales, 128 of nibbles; Q5_K: and 32 bytes of
// fifth bits before the nibbles.
constexpr int64_t block_bytes(bool five) {
  return five ? 176 : 144;
}
constexpr int64_t kSubs = kBlockValues / kSub;
constexpr int64_t kSubCodes = kSub * kLanes / 2;  // nibble bytes of a panel's sub-block: 256
constexpr int64_t kSubHigh = kSub * kLanes / 8;   // Q5_K: its fifth bits: 64
constexpr int kTileRows = 4;
constexpr int kTilePanels = 2;

// A product's operands: the activations, and the weights, per panel p (16 channels): codes[(p ·
// groups + g) · 256 + 64 j + 4 l + b] holds input 4j + b of sub-block g of lane l in its low nibble
// and input 16 + 4j + b in its high one; sm[(p · groups + g) · 32 + l] the lane's 6-bit scale, + 16
// its min; dd[(p · blocks + B) · 32 + l] the lane's d (f16), + 16 its dmin. Q5_K: high[(p · groups
// + g) · 64 + 4 l + b] holds, in bit j, the fifth bit of the low nibble of codes' vector j and, in
// bit 4 + j, of its high nibble.
struct Operands {
  Int8Activations x;
  const uint8_t* codes;
  const uint8_t* sm;
  const uint16_t* dd;
  const uint8_t* high;
  int64_t blocks;
  TileOut out;
};

// Rows [r, r + R) × panels [p, p + P) of the result, finished into y.
template <bool kFive, int R, int P>
XDIT_VNNI_TARGET void tile(const Operands& o, int64_t r, int64_t p) {
  const int64_t groups = o.x.groups;
  const __m512i nibble = _mm512_set1_epi8(0x0F), bit = _mm512_set1_epi8(1);
  __m512 f[R][P], d[P], dmin[P];
  __m512i high[P];
  for (int i = 0; i < R; ++i)
    for (int z = 0; z < P; ++z) f[i][z] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    if (g % kSubs == 0) {
      for (int z = 0; z < P; ++z) {
        const uint16_t* dz = o.dd + ((p + z) * o.blocks + g / kSubs) * 32;
        d[z] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dz)));
        dmin[z] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dz + 16)));
      }
    }
    __m512i acc[R][P];
    for (int i = 0; i < R; ++i)
      for (int z = 0; z < P; ++z) acc[i][z] = _mm512_setzero_si512();
    const int8_t* xg = o.x.codes + r * o.x.k + g * kSub;
    if (kFive)
      for (int z = 0; z < P; ++z)
        high[z] = _mm512_load_si512(o.high + ((p + z) * groups + g) * kSubHigh);
#pragma GCC unroll 4
    for (int64_t j = 0; j < 4; ++j) {
      __m512i lo[P], hi[P];
      for (int z = 0; z < P; ++z) {
        const __m512i v = _mm512_load_si512(o.codes + ((p + z) * groups + g) * kSubCodes + j * 64);
        lo[z] = _mm512_and_si512(v, nibble);
        hi[z] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        if (kFive) {  // bit j (4 + j) of each byte → bit 4 of its low (high) code
          const __m512i b_lo = _mm512_and_si512(_mm512_srli_epi16(high[z], j), bit);
          const __m512i b_hi = _mm512_and_si512(_mm512_srli_epi16(high[z], 4 + j), bit);
          lo[z] = _mm512_or_si512(lo[z], _mm512_slli_epi16(b_lo, 4));
          hi[z] = _mm512_or_si512(hi[z], _mm512_slli_epi16(b_hi, 4));
        }
      }
      for (int i = 0; i < R; ++i) {
        int32_t first, second;
        std::memcpy(&first, xg + i * o.x.k + j * 4, sizeof first);
        std::memcpy(&second, xg + i * o.x.k + 16 + j * 4, sizeof second);
        const __m512i xl = _mm512_set1_epi32(first), xh = _mm512_set1_epi32(second);
        for (int z = 0; z < P; ++z) {
          acc[i][z] = _mm512_dpbusd_epi32(acc[i][z], lo[z], xl);
          acc[i][z] = _mm512_dpbusd_epi32(acc[i][z], hi[z], xh);
        }
      }
    }
    __m512 s1[P], s2[P];
    for (int z = 0; z < P; ++z) {
      const uint8_t* smz = o.sm + ((p + z) * groups + g) * 32;
      const __m512 sc = _mm512_cvtepi32_ps(
          _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(smz))));
      const __m512 mn = _mm512_cvtepi32_ps(
          _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(smz + 16))));
      s1[z] = _mm512_mul_ps(d[z], sc);  // exact: an f16 times a 6-bit integer
      s2[z] = _mm512_mul_ps(dmin[z], mn);
    }
    for (int i = 0; i < R; ++i) {
      const int64_t b = (r + i) * groups + g;
      const __m512 dx = _mm512_set1_ps(o.x.d[b]);
      const __m512 sx = _mm512_set1_ps(o.x.d[b] * static_cast<float>(o.x.sums[b]));
      for (int z = 0; z < P; ++z) {
        f[i][z] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][z]), _mm512_mul_ps(s1[z], dx), f[i][z]);
        f[i][z] = _mm512_fnmadd_ps(s2[z], sx, f[i][z]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int z = 0; z < P && (p + z) * kLanes < o.out.n; ++z)
      finish_16(o.out, f[i][z], r + i, (p + z) * kLanes);
}

using TileFn = void (*)(const Operands&, int64_t, int64_t);

// tiles[kFive][R − 1][P − 1]
constexpr TileFn kTiles[2][kTileRows][kTilePanels] = {
    {{tile<false, 1, 1>, tile<false, 1, 2>},
     {tile<false, 2, 1>, tile<false, 2, 2>},
     {tile<false, 3, 1>, tile<false, 3, 2>},
     {tile<false, 4, 1>, tile<false, 4, 2>}},
    {{tile<true, 1, 1>, tile<true, 1, 2>},
     {tile<true, 2, 1>, tile<true, 2, 2>},
     {tile<true, 3, 1>, tile<true, 3, 2>},
     {tile<true, 4, 1>, tile<true, 4, 2>}},
};

class KQuantInt8Gemm : public QuantizedGemm {
 public:
  // five: Q5_K, else Q4_K.
  KQuantInt8Gemm(const std::vector<BlockRows>& parts, int64_t in, bool five)
      : in_(in), five_(five) {
    const char* name = five ? "Q5_K" : "Q4_K";
    XDIT_CHECK(in % kBlockValues == 0, "a ", name, " layer's ", in, " inputs are not whole blocks");
    blocks_ = in / kBlockValues;
    groups_ = in / kSub;
    out_ = stacked_rows(parts, five ? BlockRows::Code::kQ5_K : BlockRows::Code::kQ4_K, in,
                        static_cast<size_t>(blocks_ * block_bytes(five)), name);
    panels_ = (out_ + kLanes - 1) / kLanes;
    // Lanes past the last row: all zeros (their scales too).
    codes_.assign(static_cast<size_t>(panels_ * groups_ * kSubCodes), 0);
    sm_.assign(static_cast<size_t>(panels_ * groups_ * 32), 0);
    dd_.assign(static_cast<size_t>(panels_ * blocks_ * 32), 0);
    if (five) high_.assign(static_cast<size_t>(panels_ * groups_ * kSubHigh), 0);
    for_each_part_row(parts, [this](const uint8_t* row, int64_t i) { repack_row(row, i); });
  }

  void run(const void* x, bool x_f32, int64_t m, void* y, bool accumulate, bool bf16_out,
           Activation act, const float* bias) const override {
    XDIT_CHECK(!(accumulate && bf16_out), "a quantized linear accumulates into f32 outputs only");
    if (m == 0) return;
    const Operands o{quantize_for_product(x, x_f32, m, in_),
                     codes_.data(),
                     sm_.data(),
                     dd_.data(),
                     high_.data(),
                     blocks_,
                     {out_, bias, act, accumulate, bf16_out, y}};
    const auto& tiles = kTiles[five_ ? 1 : 0];
    for_each_tile(
        m, panels_, kTileRows, kTilePanels,
        [&o, &tiles](int64_t r, int rows, int64_t p, int np) { tiles[rows - 1][np - 1](o, r, p); });
  }

  std::string implementation(int64_t) const override {
    return five_ ? "xdit:q5_k-int8(avx512-vnni)" : "xdit:q4_k-int8(avx512-vnni)";
  }
  size_t weight_bytes() const override {
    return codes_.size() + sm_.size() + dd_.size() * sizeof(uint16_t) + high_.size();
  }

 private:
  // One row's blocks into its panel's lane.
  void repack_row(const uint8_t* src, int64_t row) {
    const int64_t p = row / kLanes, lane = row % kLanes;
    for (int64_t b = 0; b < blocks_; ++b) {
      const uint8_t* block = src + b * block_bytes(five_);
      uint16_t* dd = dd_.data() + (p * blocks_ + b) * 32;
      std::memcpy(dd + lane, block, 2);
      std::memcpy(dd + 16 + lane, block + 2, 2);
      const uint8_t* scales = block + 4;
      const uint8_t* qh = block + 16;  // Q5_K's fifth bits
      const uint8_t* qs = block + (five_ ? 48 : 16);
      for (int64_t s = 0; s < kSubs; ++s) {
        const int64_t g = b * kSubs + s;
        int sc = 0, mn = 0;
        io::k_scale_min(scales, static_cast<int>(s), sc, mn);
        uint8_t* sm = sm_.data() + (p * groups_ + g) * 32;
        sm[lane] = static_cast<uint8_t>(sc);
        sm[16 + lane] = static_cast<uint8_t>(mn);
        // Sub-block s: the low (s even) or high nibbles of qs[32 · (s / 2) + l].
        uint8_t* codes = codes_.data() + (p * groups_ + g) * kSubCodes + lane * 4;
        for (int64_t l = 0; l < kSub; ++l) {
          const uint8_t byte = qs[32 * (s / 2) + l];
          const uint8_t q = (s % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
          const int64_t j = (l % 16) / 4;  // vector j, byte l mod 4 of the lane
          codes[j * 64 + l % 4] |= static_cast<uint8_t>(l < 16 ? q : q << 4);
          if (five_) {
            const int fifth = (qh[l] >> s) & 1;
            high_[static_cast<size_t>((p * groups_ + g) * kSubHigh + lane * 4 + l % 4)] |=
                static_cast<uint8_t>(fifth << (l < 16 ? j : 4 + j));
          }
        }
      }
    }
  }

  int64_t in_, out_ = 0, blocks_ = 0, groups_ = 0, panels_ = 0;
  bool five_;
  AlignedVector<uint8_t> codes_, sm_, high_;
  AlignedVector<uint16_t> dd_;
};

}  // namespace

std::unique_ptr<QuantizedGemm> make_k_quant_int8_gemm(const std::vector<BlockRows>& parts,
                                                      int64_t in, bool five) {
  XDIT_CHECK(int8_tiles_run_here(),
             "K-quant integer products need AVX-512-VNNI and AVX-512-bf16 (without AMX)");
  return std::make_unique<KQuantInt8Gemm>(parts, in, five);
}

}  // namespace xdit::kernels::cpu
