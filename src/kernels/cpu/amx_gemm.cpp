// GCC 12's AVX-512 intrinsics (vscalefps in exp2_16) start from undefined
// vectors, which -Wmaybe-uninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/amx_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "core/aligned.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/avx512_math.h"

namespace xdit::kernels::cpu {

namespace {

constexpr int64_t kStep = 32;                  // reduction values per tile product
constexpr int64_t kPanel = 32;                 // columns per panel (two tiles)
constexpr int64_t kStepValues = 1024;          // bf16 values of one panel step (2 KB)
constexpr int64_t kMaxChunk = 64;              // steps per reduction chunk (k ≤ 2048)
constexpr int64_t kSubSteps = 16;              // steps of a sub-chunk kept in L1 (32 KB)
constexpr int64_t kRowBlockBytes = 768 << 10;  // bf16 rows of a row block kept in L2
constexpr size_t kStreamBytes = 4 << 20;       // results stored past the caches from this size

// The 32 results of row `i` of a 32 × 32 block stored as tiles 0–3 (rows
// 0–15: tiles 0, 1; rows 16–31: tiles 2, 3), finished and stored at y, with
// non-temporal stores when `stream` (y is then 64-byte aligned).
__attribute__((target("avx512f,avx512dq,avx512bf16,avx512vl,avx512bw"))) inline void finish_row(
    const float* c, int64_t i, const AmxGemmOut& o, const float* bias, bool stream, void* y) {
  const float* lo = c + (i < 16 ? 0 : 512) + (i % 16) * 16;
  __m512 v[2] = {_mm512_load_ps(lo), _mm512_load_ps(lo + 256)};
  for (int h = 0; h < 2; ++h) {
    if (bias != nullptr) v[h] = _mm512_add_ps(v[h], _mm512_loadu_ps(bias + 16 * h));
    if (o.gelu_tanh) v[h] = gelu_tanh_16(v[h]);
    if (o.bf16) {
      const __m256bh b = _mm512_cvtneps_pbh(v[h]);
      auto* yb = reinterpret_cast<__m256i*>(static_cast<uint16_t*>(y) + 16 * h);
      if (stream)
        _mm256_stream_si256(yb, reinterpret_cast<const __m256i&>(b));
      else
        _mm256_storeu_si256(yb, reinterpret_cast<const __m256i&>(b));
    } else {
      float* yf = static_cast<float*>(y) + 16 * h;
      if (o.accumulate) v[h] = _mm512_add_ps(v[h], _mm512_loadu_ps(yf));
      if (stream)
        _mm512_stream_ps(yf, v[h]);
      else
        _mm512_storeu_ps(yf, v[h]);
    }
  }
}

struct Plan {
  int64_t m, k, n, steps, chunk, rows;  // rows: of a row block, a multiple of 32
};

Plan plan_for(int64_t m, int64_t k, int64_t n) {
  Plan p{m, k, n, k / kStep, 0, 0};
  const int64_t chunks = (p.steps + kMaxChunk - 1) / kMaxChunk;
  p.chunk = (p.steps + chunks - 1) / chunks;
  const int64_t padded = (m + 31) / 32 * 32;
  p.rows = std::clamp(kRowBlockBytes / (p.chunk * kStep * 2) / 32 * 32, int64_t{32}, padded);
  return p;
}

// Rows [r, r + 16) of a (f32 or bf16, row stride k), steps [k0, k1) → tiles
// to[s − k0] of 16 rows × 32 values; rows at or past m are zeros.
__attribute__((target("avx512f,avx512dq,avx512bf16,avx512vl,avx512bw"))) void pack_rows(
    const void* a, bool a_f32, int64_t m, int64_t k, int64_t r, int64_t k0, int64_t k1,
    uint16_t* to) {
  for (int64_t i = 0; i < 16; ++i) {
    uint16_t* row = to + i * kStep;
    if (r + i >= m) {
      for (int64_t s = k0; s < k1; ++s)
        _mm512_storeu_si512(row + (s - k0) * 512, _mm512_setzero_si512());
    } else if (a_f32) {
      const float* x = static_cast<const float*>(a) + (r + i) * k;
      for (int64_t s = k0; s < k1; ++s) {
        const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + s * kStep + 16),
                                               _mm512_loadu_ps(x + s * kStep));
        _mm512_storeu_si512(row + (s - k0) * 512, reinterpret_cast<const __m512i&>(b));
      }
    } else {
      const uint16_t* x = static_cast<const uint16_t*>(a) + (r + i) * k;
      for (int64_t s = k0; s < k1; ++s)
        _mm512_storeu_si512(row + (s - k0) * 512, _mm512_loadu_si512(x + s * kStep));
    }
  }
}

// One thread's part: the panels [p0, p1) of the result, all rows, with no
// barrier (a barrier per row block cost 14 % on this shared host, where one
// vCPU often runs behind the other). Each row block's rows are packed by the
// thread itself, chunk by chunk, into `mine` (rows · chunk values): contiguous
// 1 KB tiles in row-group order, which stay in L2 while its panels pass
// (strided 16-row tile loads ran at half the speed; packing them once for all
// threads cost a barrier and a buffer of all of a). Within a chunk each panel
// goes in sub-chunks of kSubSteps steps, so its 2 KB steps stay in L1 while
// the row pairs pass over them; the row tiles are loaded non-temporally so
// they do not push the weight out of L1. The partial sums of a block of
// 32 × 32 live in `part` between sub-chunks: rows/32 blocks when k is one
// chunk, (p1 − p0) · rows/32 when there are several. `stream`: results are
// stored non-temporally.
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512dq,avx512bf16,avx512vl,avx512bw"))) void
panels(const Plan& pl, const void* a, bool a_f32, uint16_t* mine, const uint16_t* b,
       const AmxGemmOut& o, bool stream, int64_t p0, int64_t p1, float* part) {
  amx_tiles_configure();
  alignas(64) float c[1024];
  const int64_t m = pl.m, n = pl.n, padded = (m + 31) / 32 * 32;
  const bool one_chunk = pl.chunk == pl.steps;
  const size_t out_size = o.bf16 ? 2 : 4;
  for (int64_t m0 = 0; m0 < padded; m0 += pl.rows) {
    const int64_t m1 = std::min(padded, m0 + pl.rows);
    for (int64_t k0 = 0; k0 < pl.steps; k0 += pl.chunk) {
      const int64_t k1 = std::min(pl.steps, k0 + pl.chunk), cs = k1 - k0;
      for (int64_t g = m0 / 16; g < m1 / 16; ++g)
        pack_rows(a, a_f32, m, pl.k, g * 16, k0, k1, mine + (g - m0 / 16) * cs * 512);
      const int64_t subs = (cs + kSubSteps - 1) / kSubSteps, sub = (cs + subs - 1) / subs;
      // The next panel's steps [k0, k1), 2 KB each, prefetched into L2 a few
      // lines per tile step over this panel's (m1 − m0) / 32 row pairs.
      const int64_t lines = cs * 32, steps = (m1 - m0) / 32 * cs, per = (lines + steps - 1) / steps;
      for (int64_t p = p0; p < p1; ++p) {
        const uint16_t* panel = b + (p * pl.steps + k0) * kStepValues;
        const char* next =
            p + 1 < p1 ? reinterpret_cast<const char*>(b + ((p + 1) * pl.steps + k0) * kStepValues)
                       : nullptr;
        const float* bias = o.bias != nullptr ? o.bias + p * kPanel : nullptr;
        float* blocks = part + (one_chunk ? 0 : (p - p0) * (pl.rows / 32) * 1024);
        int64_t line = 0;
        for (int64_t s0 = 0; s0 < cs; s0 += sub) {
          const int64_t s1 = std::min(cs, s0 + sub);
          const bool first = k0 == 0 && s0 == 0, last = k1 == pl.steps && s1 == cs;
          for (int64_t r = m0; r < m1; r += 32) {
            const uint16_t* a0 = mine + (r - m0) / 16 * cs * 512;
            const uint16_t* a1 = a0 + cs * 512;
            float* acc = blocks + (r - m0) / 32 * 1024;
            if (first) {
              _tile_zero(0);
              _tile_zero(1);
              _tile_zero(2);
              _tile_zero(3);
            } else {
              _tile_loadd(0, acc, 64);
              _tile_loadd(1, acc + 256, 64);
              _tile_loadd(2, acc + 512, 64);
              _tile_loadd(3, acc + 768, 64);
            }
            for (int64_t s = s0; s < s1; ++s) {
              if (next != nullptr)
                for (int64_t q = 0; q < per && line < lines; ++q, ++line)
                  _mm_prefetch(next + line * 64, _MM_HINT_T1);
              _tile_stream_loadd(4, a0 + s * 512, 64);
              _tile_stream_loadd(5, a1 + s * 512, 64);
              _tile_loadd(6, panel + s * kStepValues, 128);
              _tile_loadd(7, panel + s * kStepValues + 32, 128);
              _tile_dpbf16ps(0, 4, 6);
              _tile_dpbf16ps(1, 4, 7);
              _tile_dpbf16ps(2, 5, 6);
              _tile_dpbf16ps(3, 5, 7);
            }
            float* to = last ? c : acc;
            _tile_stored(0, to, 64);
            _tile_stored(1, to + 256, 64);
            _tile_stored(2, to + 512, 64);
            _tile_stored(3, to + 768, 64);
            if (!last) continue;
            for (int64_t i = 0; i < std::min<int64_t>(32, m - r); ++i)
              finish_row(c, i, o, bias, stream,
                         static_cast<char*>(o.y) + ((r + i) * n + p * kPanel) * out_size);
          }
        }
      }
    }
  }
  if (stream) _mm_sfence();  // the results are visible before the threads join
}

}  // namespace

bool amx_gemm_takes(int64_t k, int64_t n) {
  return k > 0 && n > 0 && k % kStep == 0 && n % kPanel == 0 && amx_tiles_ready() &&
         has_avx512_bf16();
}

void amx_gemm(const void* a, bool a_f32, int64_t m, int64_t k, const uint16_t* b, int64_t n,
              const AmxGemmOut& out) {
  XDIT_CHECK(!(out.accumulate && (out.bf16 || out.gelu_tanh)),
             "amx_gemm: accumulate is for plain f32 results");
  if (m <= 0) return;
  const Plan pl = plan_for(m, k, n);
  const int64_t np = n / kPanel;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), np));
  const size_t bytes = static_cast<size_t>(m * n) * (out.bf16 ? 2 : 4);
  const bool stream = bytes >= kStreamBytes && reinterpret_cast<uintptr_t>(out.y) % 64 == 0;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t p0 = np * t / nt, p1 = np * (t + 1) / nt;
    thread_local AlignedVector<uint16_t> mine;
    thread_local AlignedVector<float> part;
    grow_discarding(mine, static_cast<size_t>(pl.rows * pl.chunk * kStep));
    const int64_t blocks = pl.rows / 32 * (pl.chunk == pl.steps ? 1 : p1 - p0);
    if (pl.steps > kSubSteps) grow_discarding(part, static_cast<size_t>(blocks * 1024));
    panels(pl, a, a_f32, mine.data(), b, out, stream, p0, p1, part.data());
  }
}

}  // namespace xdit::kernels::cpu
