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
#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/isa.h"

#define XDIT_VNNI_TARGET \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx512bf16")))

namespace xdit::kernels::cpu {

namespace {

constexpr int64_t kGroup = 32;          // values per Q8_0 block
constexpr int64_t kGroupBytes = 34;     // its f16 scale and 32 codes
constexpr int64_t kLanes = 16;          // output channels per panel: one vector of int32 sums
constexpr int64_t kSteps = kGroup / 4;  // vpdpbusd steps per block (4 inputs each)
constexpr int64_t kPanelBlock = kGroup * kLanes;  // code bytes of one block of a panel
constexpr int kTileRows = 4;                      // rows per tile
constexpr int kTilePanels = 3;                    // panels per tile (48 outputs)
constexpr int64_t kRowChunk = 64;                 // rows of a work item, one panel set

std::atomic<bool> int8_dot_on{true};

// A product's operands. Activations: codes [m, k], d and comp [m, groups].
// Weights: `panels` of 16 output channels, each block of a panel 512 code
// bytes (step s, lane l, byte j: the code of input 4s + j of channel l, + 128)
// and 16 f16 scales, panel-major: codes[(p · groups + g) · 512 + …],
// scales[(p · groups + g) · 16 + l].
struct Operands {
  const int8_t* codes;
  const float* d;
  const int32_t* comp;
  const uint8_t* w;
  const uint16_t* ws;
  int64_t k, groups, m, n;
  const float* bias;
  Activation act;
  bool accumulate, bf16_out;
  void* y;
};

// Rows [r, r + R) × panels [p, p + P) of the result, finished into y.
template <int R, int P>
XDIT_VNNI_TARGET void tile(const Operands& o, int64_t r, int64_t p) {
  const int64_t groups = o.groups;
  const int64_t panel_codes = groups * kPanelBlock, panel_scales = groups * kLanes;
  const uint8_t* w = o.w + p * panel_codes;
  const uint16_t* ws = o.ws + p * panel_scales;
  __m512 f[R][P];
  for (int i = 0; i < R; ++i)
    for (int z = 0; z < P; ++z) f[i][z] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i acc[R][P];
    for (int i = 0; i < R; ++i) {
      const __m512i c = _mm512_set1_epi32(o.comp[(r + i) * groups + g]);
      for (int z = 0; z < P; ++z) acc[i][z] = c;
    }
    const uint8_t* wg = w + g * kPanelBlock;
    const int8_t* xg = o.codes + r * o.k + g * kGroup;
#pragma GCC unroll 8
    for (int64_t s = 0; s < kSteps; ++s) {
      __m512i wv[P];
      for (int z = 0; z < P; ++z) wv[z] = _mm512_load_si512(wg + z * panel_codes + s * 64);
      for (int i = 0; i < R; ++i) {
        int32_t four;
        std::memcpy(&four, xg + i * o.k + s * 4, sizeof four);
        const __m512i xv = _mm512_set1_epi32(four);
        for (int z = 0; z < P; ++z) acc[i][z] = _mm512_dpbusd_epi32(acc[i][z], wv[z], xv);
      }
    }
    __m512 sw[P];
    for (int z = 0; z < P; ++z)
      sw[z] = _mm512_cvtph_ps(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(ws + z * panel_scales + g * kLanes)));
    for (int i = 0; i < R; ++i) {
      const __m512 dx = _mm512_set1_ps(o.d[(r + i) * groups + g]);
      for (int z = 0; z < P; ++z)
        f[i][z] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][z]), _mm512_mul_ps(sw[z], dx), f[i][z]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int z = 0; z < P; ++z) {
      const int64_t col = (p + z) * kLanes;
      if (col >= o.n) break;
      const __mmask16 k = tail_mask(o.n - col);
      __m512 v = f[i][z];
      if (o.bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, o.bias + col));
      if (o.act == Activation::kGeluTanh) v = gelu_tanh_16(v);
      const int64_t at = (r + i) * o.n + col;
      if (o.bf16_out) {
        store_bf16_16(static_cast<uint16_t*>(o.y) + at, v, k);
      } else {
        float* yf = static_cast<float*>(o.y) + at;
        if (o.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, yf));
        _mm512_mask_storeu_ps(yf, k, v);
      }
    }
  }
}

using TileFn = void (*)(const Operands&, int64_t, int64_t);

// tiles[R − 1][P − 1]
constexpr TileFn kTiles[kTileRows][kTilePanels] = {
    {tile<1, 1>, tile<1, 2>, tile<1, 3>},
    {tile<2, 1>, tile<2, 2>, tile<2, 3>},
    {tile<3, 1>, tile<3, 2>, tile<3, 3>},
    {tile<4, 1>, tile<4, 2>, tile<4, 3>},
};

// One block of 32 values (two vectors) → codes, d, comp (the header's rule).
XDIT_VNNI_TARGET void quantize_block(__m512 v0, __m512 v1, int8_t* codes, float* d, int32_t* comp) {
  const __m512 zero = _mm512_setzero_ps();
  // v · 0 is 0 for finite v and NaN for NaN or ±Inf.
  const bool finite = _mm512_cmp_ps_mask(_mm512_mul_ps(v0, zero), zero, _CMP_EQ_OQ) == 0xffff &&
                      _mm512_cmp_ps_mask(_mm512_mul_ps(v1, zero), zero, _CMP_EQ_OQ) == 0xffff;
  if (!finite) {
    *d = std::nanf("");
    *comp = 0;
    std::memset(codes, 0, kGroup);
    return;
  }
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float scale = amax / 127.0f, inverse = scale != 0 ? 1.0f / scale : 0.0f;
  const __m512 iv = _mm512_set1_ps(inverse);
  // vcvtps2dq rounds to nearest even (the default MXCSR mode, nearbyint's).
  const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, iv));
  const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, iv));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm512_cvtsepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 16), _mm512_cvtsepi32_epi8(q1));
  *d = scale;
  *comp = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}

// 16 bf16 values as f32.
XDIT_VNNI_TARGET inline __m512 widen_bf16_16(const uint16_t* h) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

XDIT_VNNI_TARGET void quantize_rows(const void* x, bool x_f32, int64_t r0, int64_t r1, int64_t k,
                                    int8_t* codes, float* d, int32_t* comp) {
  const int64_t groups = k / kGroup;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t at = r * k + g * kGroup;
      __m512 v0, v1;
      if (x_f32) {
        v0 = _mm512_loadu_ps(static_cast<const float*>(x) + at);
        v1 = _mm512_loadu_ps(static_cast<const float*>(x) + at + 16);
      } else {
        const auto* b = static_cast<const uint16_t*>(x) + at;
        v0 = widen_bf16_16(b);
        v1 = widen_bf16_16(b + 16);
      }
      quantize_block(v0, v1, codes + at, d + r * groups + g, comp + r * groups + g);
    }
  }
}

class Q8_0Int8Gemm : public QuantizedGemm {
 public:
  Q8_0Int8Gemm(const std::vector<BlockRows>& parts, int64_t in) : in_(in) {
    XDIT_CHECK(in % kGroup == 0, "a Q8_0 layer's ", in, " inputs are not whole blocks");
    for (const BlockRows& p : parts) {
      XDIT_CHECK(p.q8_0 && p.cols == in && p.row_bytes == static_cast<size_t>(in / kGroup * 34),
                 "a Q8_0 integer layer takes Q8_0 rows of ", in, " inputs, got ", p.format, " of ",
                 p.cols);
      out_ += p.rows;
    }
    groups_ = in / kGroup;
    panels_ = (out_ + kLanes - 1) / kLanes;
    // Lanes past the last row: code 0 (byte 128) at scale 0.
    codes_.assign(static_cast<size_t>(panels_ * groups_ * kPanelBlock), 0x80);
    scales_.assign(static_cast<size_t>(panels_ * groups_ * kLanes), 0);
    int64_t first = 0;
    for (const BlockRows& p : parts) {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < p.rows; ++r) repack_row(p.data + r * p.row_bytes, first + r);
      first += p.rows;
    }
  }

  void run(const void* x, bool x_f32, int64_t m, void* y, bool accumulate, bool bf16_out,
           Activation act, const float* bias) const override {
    XDIT_CHECK(!(accumulate && bf16_out), "a quantized linear accumulates into f32 outputs only");
    if (m == 0) return;
    thread_local AlignedVector<int8_t> codes;
    thread_local AlignedVector<float> d;
    thread_local AlignedVector<int32_t> comp;
    grow_discarding(codes, static_cast<size_t>(m * in_));
    grow_discarding(d, static_cast<size_t>(m * groups_));
    grow_discarding(comp, static_cast<size_t>(m * groups_));
    quantize_q8_0_activations(x, x_f32, m, in_, codes.data(), d.data(), comp.data());
    const Operands o{
        codes.data(), d.data(), comp.data(), codes_.data(), scales_.data(), in_, groups_, m,
        out_,         bias,     act,         accumulate,    bf16_out,       y};
    const int64_t panel_sets = (panels_ + kTilePanels - 1) / kTilePanels;
    const int64_t chunks = (m + kRowChunk - 1) / kRowChunk;
    // Dynamic: on a shared host one core often runs behind the other.
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int64_t ps = 0; ps < panel_sets; ++ps) {
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t p = ps * kTilePanels, np = std::min<int64_t>(kTilePanels, panels_ - p);
        const int64_t end = std::min(m, (c + 1) * kRowChunk);
        for (int64_t r = c * kRowChunk; r < end; r += kTileRows) {
          const int64_t nr = std::min<int64_t>(kTileRows, end - r);
          kTiles[nr - 1][np - 1](o, r, p);
        }
      }
    }
  }

  std::string implementation(int64_t) const override {
    return "xdit:q8_0-int8(avx512-vnni)";
  }
  size_t weight_bytes() const override {
    return codes_.size() + scales_.size() * sizeof(uint16_t);
  }

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

bool cpu_runs_q8_0_int8() {
  __builtin_cpu_init();
  return cpu_isa() == CpuIsa::kAvx512Bf16 && __builtin_cpu_supports("avx512vnni") &&
         cpu_has_int8_dot();
}

}  // namespace

bool q8_0_int8_dot_available() {
  static const bool cpu = cpu_runs_q8_0_int8();
  return cpu && int8_dot_on.load();
}

void set_q8_0_int8_dot(bool on) {
  int8_dot_on.store(on);
}

bool q8_0_int8_dot_applies(const std::vector<BlockRows>& parts) {
  if (!q8_0_int8_dot_available()) return false;
  return std::all_of(parts.begin(), parts.end(),
                     [](const BlockRows& p) { return p.q8_0 && p.cols % kGroup == 0; });
}

std::unique_ptr<QuantizedGemm> make_q8_0_int8_gemm(const std::vector<BlockRows>& parts,
                                                   int64_t in) {
  static const bool cpu = cpu_runs_q8_0_int8();
  XDIT_CHECK(cpu, "Q8_0 integer products need AVX-512-VNNI and AVX-512-bf16 (without AMX)");
  return std::make_unique<Q8_0Int8Gemm>(parts, in);
}

void quantize_q8_0_activations(const void* x, bool x_f32, int64_t m, int64_t k, int8_t* codes,
                               float* d, int32_t* comp) {
  XDIT_CHECK(k % kGroup == 0, "Q8_0 activations of ", k, " values are not whole blocks");
  static const bool cpu = cpu_runs_q8_0_int8();
  XDIT_CHECK(cpu, "Q8_0 activations are quantized with AVX-512 (VNNI, bf16)");
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t per = (m + nt - 1) / nt, r0 = std::min(m, t * per);
    quantize_rows(x, x_f32, r0, std::min(m, r0 + per), k, codes, d, comp);
  }
}

}  // namespace xdit::kernels::cpu
