// GCC 12's AVX-512 intrinsics (the widening of cvtepu16_epi32) start from
// undefined vectors, which -Wmaybe-uninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/winograd.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/dnnl_util.h"

namespace xdit::kernels::cpu {

namespace {

constexpr int64_t kPoints = 16;  // a 4×4 input tile

#define XDIT_WINO_TARGET __attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw")))

XDIT_WINO_TARGET inline __m512 load_bf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <bool kStream>
XDIT_WINO_TARGET inline void store(float* p, __m512 v) {
  if constexpr (kStream)
    _mm512_stream_ps(p, v);
  else
    _mm512_storeu_ps(p, v);
}

// Where tile t of the image lies: batch item, tile row, tile column.
struct TilePos {
  int64_t b, ty, tx;
};
inline TilePos tile_pos(int64_t t, int64_t tiles_y, int64_t tiles_x) {
  const int64_t per_image = tiles_y * tiles_x;
  const int64_t r = t % per_image;
  return {t / per_image, r / tiles_x, r % tiles_x};
}

struct Geometry {
  int64_t in, out, in_rows, width, top, out_rows, tiles_y, tiles_x;
};

// v[p][k][c] = (Bᵀ d B)[p] for the tiles t0 … t0 + n − 1 (k = t − t0), with
// Bᵀ = [1 0 −1 0; 0 1 1 0; 0 −1 1 0; 0 1 0 −1]; rows and columns outside the
// image read as zeros. `ld`: the tiles per block (v's point stride in rows).
XDIT_WINO_TARGET void input_transform(const uint16_t* x, const Geometry& g, int64_t t0, int64_t n,
                                      int64_t ld, uint16_t* v) {
  const __m512 zero = _mm512_setzero_ps();
  const int64_t point_stride = ld * g.in;
  for (int64_t k = 0; k < n; ++k) {
    const TilePos tp = tile_pos(t0 + k, g.tiles_y, g.tiles_x);
    const uint16_t* src[4][4];
    for (int i = 0; i < 4; ++i) {
      const int64_t row = 2 * tp.ty + i - g.top;
      for (int j = 0; j < 4; ++j) {
        const int64_t col = 2 * tp.tx + j - 1;
        src[i][j] = row >= 0 && row < g.in_rows && col >= 0 && col < g.width
                        ? x + ((tp.b * g.in_rows + row) * g.width + col) * g.in
                        : nullptr;
      }
    }
    uint16_t* dst = v + k * g.in;
    for (int64_t c = 0; c < g.in; c += 16) {
      __m512 d[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) d[i][j] = src[i][j] ? load_bf16(src[i][j] + c) : zero;
      __m512 u[4][4];  // Bᵀ d
      for (int j = 0; j < 4; ++j) {
        u[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
        u[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
        u[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
        u[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
      }
      for (int i = 0; i < 4; ++i) {  // (Bᵀ d) B
        uint16_t* p = dst + 4 * i * point_stride + c;
        store_bf16_16(p, _mm512_sub_ps(u[i][0], u[i][2]));
        store_bf16_16(p + point_stride, _mm512_add_ps(u[i][1], u[i][2]));
        store_bf16_16(p + 2 * point_stride, _mm512_sub_ps(u[i][2], u[i][1]));
        store_bf16_16(p + 3 * point_stride, _mm512_sub_ps(u[i][1], u[i][3]));
      }
    }
  }
}

// y's 2×2 tile = Aᵀ m A + bias for the tiles t0 … t0 + n − 1, with
// Aᵀ = [1 1 1 0; 0 1 −1 −1]; outputs past the image's last row or column
// (odd sizes) are dropped.
template <bool kStream>
XDIT_WINO_TARGET void output_transform(const float* m, const Geometry& g, int64_t t0, int64_t n,
                                       int64_t ld, const float* bias, float* y) {
  const int64_t point_stride = ld * g.out;
  for (int64_t k = 0; k < n; ++k) {
    const TilePos tp = tile_pos(t0 + k, g.tiles_y, g.tiles_x);
    const int64_t row = 2 * tp.ty, col = 2 * tp.tx;
    const bool row2 = row + 1 < g.out_rows, col2 = col + 1 < g.width;
    float* y0 = y + ((tp.b * g.out_rows + row) * g.width + col) * g.out;
    float* y1 = y0 + g.width * g.out;
    const float* src = m + k * g.out;
    for (int64_t o = 0; o < g.out; o += 16) {
      __m512 s[2][4];  // Aᵀ m
      for (int j = 0; j < 4; ++j) {
        const __m512 m0 = _mm512_loadu_ps(src + j * point_stride + o);
        const __m512 m1 = _mm512_loadu_ps(src + (4 + j) * point_stride + o);
        const __m512 m2 = _mm512_loadu_ps(src + (8 + j) * point_stride + o);
        const __m512 m3 = _mm512_loadu_ps(src + (12 + j) * point_stride + o);
        s[0][j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        s[1][j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
      }
      const __m512 bv = _mm512_loadu_ps(bias + o);
      for (int a = 0; a < 2; ++a) {  // (Aᵀ m) A
        if (a == 1 && !row2) break;
        float* dst = (a == 0 ? y0 : y1) + o;
        store<kStream>(dst,
                       _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[a][0], s[a][1]), s[a][2]), bv));
        if (col2)
          store<kStream>(
              dst + g.out,
              _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s[a][1], s[a][2]), s[a][3]), bv));
      }
    }
  }
}

// The 16 GEMMs of a block in one call, one per point:
// [tiles × in] · [in × out] → f32, the weights blocked.
GemmShape point_gemms(int64_t tiles, int64_t in, int64_t out) {
  GemmShape s{tiles, out, in, in, out, out, false, false, dnnl::memory::data_type::bf16, true};
  s.batch = kPoints;
  return s;
}

}  // namespace

bool Winograd3x3::usable(int64_t in, int64_t out) {
  return has_avx512_bf16() && in % 16 == 0 && out % 16 == 0 && in > 0 && out > 0;
}

Winograd3x3::Winograd3x3(const float* w, int64_t in, int64_t out) : in_(in), out_(out) {
  XDIT_CHECK(usable(in, out), "Winograd 3x3: ", in, " -> ", out, " channels not supported here");
  // The GEMMs' row count. Measured on an AMD EPYC (Zen 4) with 2 threads:
  // 32 to 256 tiles a block were within a few percent of each other; 64 was
  // best for 512 channels, where the GEMMs are most of the time.
  tiles_ = 64;
  // U = G g Gᵀ per channel pair, G = [1 0 0; ½ ½ ½; ½ −½ ½; 0 0 1], in
  // double, then bf16: plain [point][in][out], then blocked.
  static constexpr double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  std::vector<uint16_t> plain(static_cast<size_t>(kPoints * in * out));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t c = 0; c < in; ++c) {
      const float* k = w + (o * in + c) * 9;
      double gk[4][3];  // G g
      for (int i = 0; i < 4; ++i)
        for (int b = 0; b < 3; ++b)
          gk[i][b] = G[i][0] * k[b] + G[i][1] * k[3 + b] + G[i][2] * k[6 + b];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const double u = gk[i][0] * G[j][0] + gk[i][1] * G[j][1] + gk[i][2] * G[j][2];
          plain[static_cast<size_t>(((i * 4 + j) * in + c) * out + o)] =
              f32_to_bf16(static_cast<float>(u));
        }
    }
  const GemmShape s = point_gemms(tiles_, in_, out_);
  packed_.resize(gemm_b_bytes(s));
  gemm_pack_b(s, plain.data(), packed_.data());
}

std::string Winograd3x3::implementation() const {
  return "xdit:winograd_2x2_3x3+" + gemm_implementation(point_gemms(tiles_, in_, out_));
}

void Winograd3x3::forward(const uint16_t* x, int64_t batch, int64_t in_rows, int64_t width,
                          int64_t top, const float* bias, float* y) const {
  Geometry g{in_, out_, in_rows, width, top, in_rows + 2 * top - 2, 0, 0};
  XDIT_CHECK(g.out_rows > 0 && width > 0, "Winograd 3x3: no output from ", in_rows,
             " input rows of width ", width);
  g.tiles_y = (g.out_rows + 1) / 2;
  g.tiles_x = (width + 1) / 2;
  const int64_t tiles = batch * g.tiles_y * g.tiles_x;
  const int64_t blocks = (tiles + tiles_ - 1) / tiles_;
  const GemmShape s = point_gemms(tiles_, in_, out_);
  const size_t v_size = static_cast<size_t>(kPoints * tiles_ * in_);
  const size_t m_size = static_cast<size_t>(kPoints * tiles_ * out_);
  // An output larger than the caches is stored non-temporally: nothing reads
  // it before it has left them, and the stores skip reading each line first.
  const bool stream = batch * g.out_rows * width * out_ * 4 >= (int64_t{64} << 20) &&
                      reinterpret_cast<uintptr_t>(y) % 64 == 0;
#pragma omp parallel
  {
    // Rows past the last tile of the last block keep earlier values (zeros
    // at first); their products are computed and never read.
    thread_local AlignedVector<uint16_t> v;
    thread_local AlignedVector<float> m;
    grow_discarding(v, v_size);
    grow_discarding(m, m_size);
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t t0 = blk * tiles_, n = std::min(tiles_, tiles - t0);
      input_transform(x, g, t0, n, tiles_, v.data());
      gemm(s, v.data(), packed_.data(), m.data());
      if (stream)
        output_transform<true>(m.data(), g, t0, n, tiles_, bias, y);
      else
        output_transform<false>(m.data(), g, t0, n, tiles_, bias, y);
    }
    if (stream) _mm_sfence();
  }
}

}  // namespace xdit::kernels::cpu
