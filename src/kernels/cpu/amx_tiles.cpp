// GCC 12's AVX-512 intrinsics (the shuffles of transpose_16x16_epi32) start from
// undefined vectors, which -Wmaybe-uninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/amx_tiles.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/softmax_row.h"
#include "kernels/kernels.h"

namespace xdit::kernels::cpu {

namespace {

// Linux keeps AMX's 8 KB of tile state off until a process asks for it.
constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;

// The LDTILECFG operand (palette 1): every tile used here is 16 rows of 64
// bytes: 16 × 16 f32 results, 16 × 32 bf16 A rows, 16 × 16 VNNI pairs of B.
// It lives in static storage on purpose: GCC 12 does not treat LDTILECFG as
// reading its operand, and a configuration filled on the stack just before it
// lost those stores as dead (seen while trying per-call tile shapes).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

const TileConfig& config() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int i = 0; i < 8; ++i) {
      t.colsb[i] = 64;
      t.rows[i] = 16;
    }
    return t;
  }();
  return c;
}

// Tiles: 0–3 accumulate a 2 × 2 block of 16 × 16 results, 4–5 hold the A
// rows of its two row halves, 6–7 the B tiles of its two column halves.
// Piece i is key groups 2g, 2g+1 (i / row pairs) of row pair i % row pairs:
// consecutive pieces share their 6 KB of K tiles, which stay in L1. The
// piece's 32 × 32 scores go to o, rows ld_s apart.
__attribute__((target("amx-tile,amx-bf16"))) void qk_piece(const uint16_t* q, int64_t dp,
                                                           const uint16_t* k, int64_t r, int64_t g,
                                                           float* o, int64_t ld_s) {
  const int64_t chunks = dp / 32, qs = dp * 2, ss = ld_s * 4;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < chunks; ++c) {
    _tile_loadd(4, q + r * dp + c * 32, qs);
    _tile_loadd(5, q + (r + 16) * dp + c * 32, qs);
    _tile_loadd(6, k + (g * chunks + c) * 512, 64);
    _tile_loadd(7, k + ((g + 1) * chunks + c) * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, o, ss);
  _tile_stored(1, o + 16, ss);
  _tile_stored(2, o + 16 * ld_s, ss);
  _tile_stored(3, o + 16 * ld_s + 16, ss);
  // GCC does not model the tile stores as writing o: keep the vector code
  // that reads the scores after them.
  asm volatile("" ::: "memory");
}

// Row pair and first key group of piece i (see qk_piece).
struct Piece {
  int64_t r, g;
};
Piece piece_of(int64_t m, int64_t i) {
  return {i % (m / 32) * 32, i / (m / 32) * 2};
}

__attribute__((target("amx-tile,amx-bf16"))) void pv_tiles(const uint16_t* p, int64_t ld_p,
                                                           int64_t m, int64_t keys,
                                                           const uint16_t* v, int64_t dv, float* t,
                                                           bool accumulate) {
  const int64_t groups = dv / 16, ps = ld_p * 2, ts = dv * 4;
  // Column groups outside, rows inside: the value tiles of two column groups
  // (keys / 32 × 2 KB, 32 KB for 512 keys) stay in L1 for every row pair,
  // and only P comes from L2, half a tile load per product. P is loaded
  // with the non-temporal hint (tileloaddt1), so its stream does not push
  // the value tiles out of L1 (docs/PERFORMANCE.md, fifth round).
  for (int64_t g = 0; g < groups; g += 2)
    for (int64_t r = 0; r < m; r += 32) {
      const bool two = g + 1 < groups;  // a last odd column group runs alone
      float* o = t + r * dv + g * 16;
      if (accumulate) {
        _tile_loadd(0, o, ts);
        _tile_loadd(2, o + 16 * dv, ts);
        if (two) {
          _tile_loadd(1, o + 16, ts);
          _tile_loadd(3, o + 16 * dv + 16, ts);
        }
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t c = 0; c < keys / 32; ++c) {
        _tile_stream_loadd(4, p + r * ld_p + c * 32, ps);
        _tile_stream_loadd(5, p + (r + 16) * ld_p + c * 32, ps);
        _tile_loadd(6, v + (c * groups + g) * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(2, 5, 6);
        if (two) {
          _tile_loadd(7, v + (c * groups + g + 1) * 512, 64);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, o, ts);
      _tile_stored(2, o + 16 * dv, ts);
      if (two) {
        _tile_stored(1, o + 16, ts);
        _tile_stored(3, o + 16 * dv + 16, ts);
      }
    }
}

__attribute__((target("amx-tile"))) void load_config() {
  _tile_loadconfig(&config());
}

__attribute__((target("amx-tile"))) void release() {
  _tile_release();
}

}  // namespace

bool amx_tiles_ready() {
  static const bool ready =
      cpu_has_amx() && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return ready;
}

// Both packs are vector shuffles: the scalar loops they replace (a 4-byte
// store per word) cost 2–3 % of a 512 px step (docs/PERFORMANCE.md, sixth
// round). Every CPU with AMX has AVX-512 BW.
__attribute__((target("avx512f,avx512bw"))) void amx_pack_k(const uint16_t* rows, int64_t keys,
                                                            int64_t dp, uint16_t* out) {
  // Word (key n, dims 2i, 2i+1) of chunk c goes to row i, column n of tile
  // (key group, c): a 16 × 16 transpose of 32-bit words per tile.
  const int64_t chunks = dp / 32;
  for (int64_t g = 0; g < keys / 16; ++g)
    for (int64_t c = 0; c < chunks; ++c, out += 512) {
      __m512i r[16], t[16];
      for (int n = 0; n < 16; ++n) r[n] = _mm512_loadu_si512(rows + (g * 16 + n) * dp + c * 32);
      transpose_16x16_epi32(r, t);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(out + i * 32, t[i]);
    }
}

__attribute__((target("avx512f,avx512bw"))) void amx_pack_v(const uint16_t* rows, int64_t keys,
                                                            int64_t ld, int64_t dv, uint16_t* out) {
  // Row i of tile (key group, column group) interleaves keys 2i and 2i+1:
  // the two 16-value rows side by side, then one word permutation.
  const int64_t groups = dv / 16;
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int64_t c = 0; c < keys / 32; ++c)
    for (int64_t g = 0; g < groups; ++g, out += 512)
      for (int64_t i = 0; i < 16; ++i) {
        const uint16_t* a = rows + (c * 32 + 2 * i) * ld + g * 16;
        const __m512i both = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + ld)), 1);
        _mm512_storeu_si512(out + i * 32, _mm512_permutexvar_epi16(idx, both));
      }
}

void amx_tiles_configure() {
  load_config();
}

void amx_tiles_release() {
  release();
}

void amx_qk(const uint16_t* q, int64_t m, int64_t dp, const uint16_t* k_packed, int64_t keys,
            float* s, int64_t ld_s) {
  XDIT_CHECK(m % 32 == 0 && dp % 32 == 0 && keys % 32 == 0, "amx_qk: sizes ", m, "×", dp, "×", keys,
             " are not multiples of 32");
  load_config();
  for (int64_t i = 0; i < keys / 32 * (m / 32); ++i) {
    const Piece at = piece_of(m, i);
    qk_piece(q, dp, k_packed, at.r, at.g, s + at.r * ld_s + at.g * 16, ld_s);
  }
}

void amx_qk_exp(const uint16_t* q, int64_t m, int64_t rows, int64_t dp, const uint16_t* k_packed,
                int64_t keys, int64_t valid, float scale, const float* ref, uint16_t* p,
                int64_t ld_p, float* sums) {
  XDIT_CHECK(m % 32 == 0 && dp % 32 == 0 && keys % 32 == 0 && rows <= m && valid <= keys,
             "amx_qk_exp: sizes ", m, "×", dp, "×", keys, " (", rows, " rows, ", valid,
             " keys) do not fit the tiles");
  alignas(64) float tile[32 * 32];  // one piece's scores: 4 KB, always in L1
  load_config();
  for (int64_t i = 0; i < keys / 32 * (m / 32); ++i) {
    const Piece at = piece_of(m, i);
    if (at.r >= rows) continue;  // padding rows only
    qk_piece(q, dp, k_packed, at.r, at.g, tile, 32);
    exp_tile(tile, std::min<int64_t>(32, rows - at.r),
             std::clamp<int64_t>(valid - at.g * 16, 0, 32), scale, ref + at.r,
             p + at.r * ld_p + at.g * 16, ld_p, sums + at.r * 16);
  }
}

void amx_pv(const uint16_t* p, int64_t ld_p, int64_t m, int64_t keys, const uint16_t* v_packed,
            int64_t dv, float* t, bool accumulate) {
  XDIT_CHECK(m % 32 == 0 && keys % 32 == 0 && dv % 16 == 0, "amx_pv: sizes ", m, "×", keys, "×", dv,
             " do not fit the tiles");
  load_config();
  pv_tiles(p, ld_p, m, keys, v_packed, dv, t, accumulate);
}

}  // namespace xdit::kernels::cpu
