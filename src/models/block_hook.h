// The seam inside a DiT forward: code that runs before and after blocks, and
// may skip a range of blocks in favour of a stored residual (diffusers'
// hooks/first_block_cache.py, hooks/layer_skip.py — as hooks on the model,
// never copies of it). Step caches (First-Block-Cache, TeaCache, TaylorSeer)
// are block hooks plus their step state; the model files know nothing of them
// beyond the seams below (a block's modulated input, an attention module's
// output).
//
// A hook that decides (skip or run) must decide alike on every rank that
// computes the same blocks together — the sequence-parallel group (each rank
// sees only its rows), the tensor-parallel group (each its share of heads),
// the CFG group (each its half of the batch) — or the ranks' collectives no
// longer pair up and the job hangs: `all_ranks_agree` is that reduction.
// Under PipeFusion each stage's hooks see only that stage's blocks: a
// decision that spans stages (skip the whole step) is a step hook's, agreed
// over the PipeFusion group.
//
// The DiTInputs and Streams a hook is shown live for the call only (on a
// CUDA model they are the call's device copies): keep copies, not pointers.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace xdit::comm {
class Communicator;
}

namespace xdit::models {

struct DiTInputs;

// The hidden states between blocks: x [B, text + image tokens, hidden].
struct Streams {
  Tensor x;
  int64_t text = 0;  // text-stream tokens at the front of each batch item (0: none)
};

// A hook's answer before block b: run it (`end` < 0), or skip blocks
// [b, end) and add `residual` (x's shape; null: add nothing) to the streams.
struct BlockSkip {
  int64_t end = -1;
  const Tensor* residual = nullptr;
};

class BlockHook {
 public:
  virtual ~BlockHook() = default;
  // A forward call of this stage begins (the streams as embedded, or as the
  // previous stage sent them) and ends (before the last stage's final layer).
  virtual void begin_call(const DiTInputs& /*in*/, const Streams& /*s*/) {}
  virtual void end_call(Streams& /*s*/) {}
  // Whether the hook acts at the boundary before block b (after block b − 1;
  // b may be the stage's end: after its last block). Between two boundaries
  // the model runs its blocks as one fused run, so a hook that names few
  // boundaries costs nothing elsewhere.
  virtual bool at_boundary(int64_t /*b*/) const { return true; }
  // At a boundary, before block b runs (skipped blocks are not offered; nor
  // is the stage's end, which only after_block sees).
  virtual BlockSkip before_block(int64_t /*b*/, Streams& /*s*/) { return {}; }
  // At the boundary after block b, when block b ran.
  virtual void after_block(int64_t /*b*/, Streams& /*s*/) {}
  // TeaCache's indicator: at a boundary before block b, ahead of
  // before_block, a hook that asks is shown block b's timestep-modulated
  // image input — the model's first norm of the block on the image rows,
  // LN(x)·(1 + scale) + shift ([B, image tokens, hidden], f32 on the model's
  // device; diffusers' `transformer_blocks[b].norm1(x, temb)[0]`).
  virtual bool wants_modulated_input(int64_t /*b*/) const { return false; }
  virtual void modulated_input(int64_t /*b*/, const Tensor& /*m*/, const Streams& /*s*/) {}
};

// The attention modules' outputs (TaylorSeer, diffusers' hooks on
// `transformer_blocks.*attn`): before the attention module `module` of
// block b runs (0: attn / attn1, 1: attn2), a hook may write its output
// itself — `n` f32 values at `out`, on the model's device — and the module
// does not run (nor its collectives: a hook that replaces must replace
// alike on every rank that computes the call together); after it ran the
// hook sees its output. Which modules a model offers: docs/caches.md.
class AttentionOutputHook {
 public:
  virtual ~AttentionOutputHook() = default;
  virtual bool replace(int64_t block, int module, float* out, int64_t n) = 0;
  virtual void ran(int64_t block, int module, const float* out, int64_t n) = 0;
};

// True only where every rank of `group` passes true (one all-reduce): a
// decision every rank then takes alike.
bool all_ranks_agree(comm::Communicator& group, bool mine);

}  // namespace xdit::models
