// GCC 12's AVX-512 intrinsics start from undefined vectors, which
// -Wmaybe-uninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/q8_0_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/aligned.h"
#include "core/error.h"
#include "kernels/cpu/int8_tile.h"
#include "kernels/cpu/isa.h"

namespace xdit::kernels::cpu {

namespace {

constexpr int64_t kGroup = kInt8Group;            // values per Q8_0 block
constexpr int64_t kGroupBytes = 34;               // its f16 scale and 32 codes
constexpr int64_t kLanes = kInt8Lanes;            // output channels per panel
constexpr int64_t kSteps = kGroup / 4;            // vpdpbusd steps per block (4 inputs each)
constexpr int64_t kPanelBlock = kGroup * kLanes;  // code bytes of one block of a panel
constexpr int kTileRows = 4;                      // rows per tile
constexpr int kTilePanels = 3;                    // panels per tile (48 outputs)

std::atomic<bool> int8_dot_on{true};

// A product's operands: the activations, and the weights as `panels` of 16
// output channels, each block of a panel 512 code bytes (step s, lane l,
// byte j: the code of input 4s + j of channel l, + 128) and 16 f16 scales,
// panel-major: codes[(p · groups + g) · 512 + …], scales[(p · groups + g) · 16 + l].
struct Operands {
  Int8Activations x;
  const uint8_t* w;
  const uint16_t* ws;
  TileOut out;
};

// Rows [r, r + R) × panels [p, p + P) of the result, finished into y.
template <int R, int P>
XDIT_VNNI_TARGET void tile(const Operands& o, int64_t r, int64_t p) {
  const int64_t groups = o.x.groups;
  const int64_t panel_codes = groups * kPanelBlock, panel_scales = groups * kLanes;
  const uint8_t* w = o.w + p * panel_codes;
  const uint16_t* ws = o.ws + p * panel_scales;
  __m512 f[R][P];
  for (int i = 0; i < R; ++i)
    for (int z = 0; z < P; ++z) f[i][z] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i acc[R][P];
    for (int i = 0; i < R; ++i) {
      // −128 · Σ codes: the + 128 of the weights' unsigned codes taken back.
      const __m512i c = _mm512_set1_epi32(-128 * o.x.sums[(r + i) * groups + g]);
      for (int z = 0; z < P; ++z) acc[i][z] = c;
    }
    const uint8_t* wg = w + g * kPanelBlock;
    const int8_t* xg = o.x.codes + r * o.x.k + g * kGroup;
#pragma GCC unroll 8
    for (int64_t s = 0; s < kSteps; ++s) {
      __m512i wv[P];
      for (int z = 0; z < P; ++z) wv[z] = _mm512_load_si512(wg + z * panel_codes + s * 64);
      for (int i = 0; i < R; ++i) {
        int32_t four;
        std::memcpy(&four, xg + i * o.x.k + s * 4, sizeof four);
        const __m512i xv = _mm512_set1_epi32(four);
        for (int z = 0; z < P; ++z) acc[i][z] = _mm512_dpbusd_epi32(acc[i][z], wv[z], xv);
      }
    }
    __m512 sw[P];
    for (int z = 0; z < P; ++z)
      sw[z] = _mm512_cvtph_ps(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(ws + z * panel_scales + g * kLanes)));
    for (int i = 0; i < R; ++i) {
      const __m512 dx = _mm512_set1_ps(o.x.d[(r + i) * groups + g]);
      for (int z = 0; z < P; ++z)
        f[i][z] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][z]), _mm512_mul_ps(sw[z], dx), f[i][z]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int z = 0; z < P && (p + z) * kLanes < o.out.n; ++z)
      finish_16(o.out, f[i][z], r + i, (p + z) * kLanes);
}

using TileFn = void (*)(const Operands&, int64_t, int64_t);

// tiles[R − 1][P − 1]
constexpr TileFn kTiles[kTileRows][kTilePanels] = {
    {tile<1, 1>, tile<1, 2>, tile<1, 3>},
    {tile<2, 1>, tile<2, 2>, tile<2, 3>},
    {tile<3, 1>, tile<3, 2>, tile<3, 3>},
    {tile<4, 1>, tile<4, 2>, tile<4, 3>},
};

class Q8_0Int8Gemm : public QuantizedGemm {
 public:
  Q8_0Int8Gemm(const std::vector<BlockRows>& parts, int64_t in) : in_(in) {
    XDIT_CHECK(in % kGroup == 0, "a Q8_0 layer's ", in, " inputs are not whole blocks");
    out_ = stacked_rows(parts, BlockRows::Code::kQ8_0, in,
                        static_cast<size_t>(in / kGroup * kGroupBytes), "Q8_0");
    groups_ = in / kGroup;
    panels_ = (out_ + kLanes - 1) / kLanes;
    // Lanes past the last row: code 0 (byte 128) at scale 0.
    codes_.assign(static_cast<size_t>(panels_ * groups_ * kPanelBlock), 0x80);
    scales_.assign(static_cast<size_t>(panels_ * groups_ * kLanes), 0);
    for_each_part_row(parts, [this](const uint8_t* row, int64_t i) { repack_row(row, i); });
  }

  void run(const void* x, bool x_f32, int64_t m, void* y, bool accumulate, bool bf16_out,
           Activation act, const float* bias) const override {
    XDIT_CHECK(!(accumulate && bf16_out), "a quantized linear accumulates into f32 outputs only");
    if (m == 0) return;
    const Operands o{quantize_for_product(x, x_f32, m, in_),
                     codes_.data(),
                     scales_.data(),
                     {out_, bias, act, accumulate, bf16_out, y}};
    for_each_tile(m, panels_, kTileRows, kTilePanels, [&o](int64_t r, int rows, int64_t p, int np) {
      kTiles[rows - 1][np - 1](o, r, p);
    });
  }

  std::string implementation(int64_t) const override { return "xdit:q8_0-int8(avx512-vnni)"; }
  size_t weight_bytes() const override { return codes_.size() + scales_.size() * sizeof(uint16_t); }

 private:
  // One row's blocks (f16 d, 32 int8 codes each) into its panel's lane.
  void repack_row(const uint8_t* src, int64_t row) {
    const int64_t p = row / kLanes, lane = row % kLanes;
    for (int64_t g = 0; g < groups_; ++g) {
      const uint8_t* block = src + g * kGroupBytes;
      std::memcpy(&scales_[static_cast<size_t>((p * groups_ + g) * kLanes + lane)], block, 2);
      uint8_t* dst = codes_.data() + (p * groups_ + g) * kPanelBlock + lane * 4;
      for (int64_t s = 0; s < kSteps; ++s)
        for (int64_t j = 0; j < 4; ++j) dst[s * 64 + j] = block[2 + s * 4 + j] ^ 0x80;
    }
  }

  int64_t in_, out_ = 0, groups_ = 0, panels_ = 0;
  AlignedVector<uint8_t> codes_;
  AlignedVector<uint16_t> scales_;
};

}  // namespace

bool block_int8_dot_available() {
  return int8_tiles_run_here() && int8_dot_on.load();
}

bool cpu_runs_block_int8_dot() {
  return int8_tiles_run_here();
}

void set_block_int8_dot(bool on) {
  int8_dot_on.store(on);
}

bool block_int8_dot_on() {
  return int8_dot_on.load();
}

std::unique_ptr<QuantizedGemm> make_block_int8_gemm(const std::vector<BlockRows>& parts,
                                                    int64_t in) {
  if (!block_int8_dot_available() || parts.empty() || in % kGroup != 0) return nullptr;
  const BlockRows::Code code = parts[0].code;
  for (const BlockRows& p : parts)
    if (p.code != code) return nullptr;
  if (code == BlockRows::Code::kQ8_0) return std::make_unique<Q8_0Int8Gemm>(parts, in);
  if ((code == BlockRows::Code::kQ4_K || code == BlockRows::Code::kQ5_K) && in % 256 == 0)
    return make_k_quant_int8_gemm(parts, in, code == BlockRows::Code::kQ5_K);
  return nullptr;
}

}  // namespace xdit::kernels::cpu
