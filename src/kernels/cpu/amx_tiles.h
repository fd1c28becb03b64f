// The two products of blockwise attention written directly with AMX tile
// instructions, for bf16 on CPUs that have AMX.
//
// Why by hand: oneDNN 3.2 exposes no batch-reduce micro-kernel, and through
// matmul primitives an attention call is ~16 000 small products (S = 4096,
// 16 heads, batch 2), each paying a primitive dispatch, a tile configuration
// and a C store to memory sized for its own blocking. Here the tiles are
// configured once per query block, Q and P stay in L1, and the value width is
// padded only to the 16-column tile granule (72 → 80, where a oneDNN operand
// padded to the 32-deep granule of the key product would be 96).
//
// Layouts (all bf16 operands pack pairs of consecutive reduction values into
// one 32-bit word, the VNNI layout AMX reads B in):
// - Q, P (A operands): plain rows.
// - K for S = Q·Kᵀ: for each group of 16 keys and each 32-deep chunk of the
//   head dimension, one 1 KB tile [16 dim pairs][16 keys][2].
// - V for O = P·V: for each group of 32 keys and each 16 columns of the
//   value, one 1 KB tile [16 key pairs][16 columns][2].
#pragma once

#include <cstdint>

namespace xdit::kernels::cpu {

// Whether the tile kernels can run: AMX-BF16 present and the kernel granted
// this process the tile state (asked for once).
bool amx_tiles_ready();

// K rows [keys, dp] (bf16, row stride dp; keys a multiple of 32, dp of 32)
// → the key layout above (keys · dp values).
void amx_pack_k(const uint16_t* rows, int64_t keys, int64_t dp, uint16_t* out);
// V rows [keys, ld] (bf16, row stride ld ≥ dv; keys a multiple of 32, dv of
// 16) → the value layout above (keys · dv values).
void amx_pack_v(const uint16_t* rows, int64_t keys, int64_t ld, int64_t dv, uint16_t* out);

// Both products load the tile configuration themselves; amx_tiles_release()
// returns the tile state when a thread is done with them.
void amx_tiles_release();

// s[m, keys] (f32, rows ld_s apart) = q[m, dp] · Kᵀ, q with row stride dp;
// m a multiple of 32. (Callers keep ld_s off multiples of 2 KB: rows 2 KB
// apart fall into the same few L1 sets, and the tile stores then miss.)
void amx_qk(const uint16_t* q, int64_t m, int64_t dp, const uint16_t* k_packed, int64_t keys,
            float* s, int64_t ld_s);
// Loads the tile configuration of the products here on the calling thread
// (amx_gemm's loop uses the same one).
void amx_tiles_configure();
// The key product of one key block and its exponentials, piece by piece:
// each 32 × 32 piece of scores goes to a 4 KB scratch in L1 and on at once
// to exp_tile (softmax_row.h), which writes p (bf16, rows ld_p apart) and
// adds to sums (16 partial sums per row). The scores never reach L2, and
// the softmax needs no second pass over them; it takes a reference ref[r]
// per row instead of the block's maximum (see exp_tile). Rows [rows, m) are
// left alone; keys [valid, keys) get p = 0.
void amx_qk_exp(const uint16_t* q, int64_t m, int64_t rows, int64_t dp, const uint16_t* k_packed,
                int64_t keys, int64_t valid, float scale, const float* ref, uint16_t* p,
                int64_t ld_p, float* sums);
// t[m, dv] (f32, row stride dv) = p[m, keys] · V, p with rows ld_p apart;
// with `accumulate`, t += p · V (the tiles start from t instead of 0, so a
// running output needs no second buffer and no add pass).
void amx_pv(const uint16_t* p, int64_t ld_p, int64_t m, int64_t keys, const uint16_t* v_packed,
            int64_t dv, float* t, bool accumulate = false);

}  // namespace xdit::kernels::cpu
