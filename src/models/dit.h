// The interface every diffusion transformer implements (PixArt-α/Σ, FLUX.1,
// SD3, Wan, Z-Image, Qwen-Image), so that one denoising loop and one implementation of each
// parallel method serve them all (docs/ARCHITECTURE.md, "One engine").
//
// A call is three parts: embed (the conditioning of the call, and on the first
// pipeline stage the image tokens of the requested patch rows), blocks by
// their flat index (FLUX: 19 double-stream blocks, then 38 single-stream
// ones), and the final layer. Between blocks the hidden states are one tensor
// of streams: per batch item the text stream's tokens (models with joint
// attention) then the image tokens this call computes. A PipeFusion stage
// sends exactly that tensor to the next stage.
//
// The base class owns what every model shares: the call's geometry, the
// stage's range and the streams' shape checked once, a later stage's streams
// taken from the previous stage, skipped blocks (SD3's skip-layer guidance)
// and the block hooks (block_hook.h) — a model file implements only its
// embedding, its blocks and its final layer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/block_hook.h"
#include "models/conditioning.h"
#include "nn/attention.h"

namespace xdit::models {

// Everything a call may take; a model reads what it uses.
struct DiTInputs {
  // [B, latent_channels, F, H, W]: F frames (1 for an image). An image
  // model's embed sees the one frame, [B, latent_channels, H, W] (a view).
  const Tensor* latents = nullptr;
  std::vector<float> timesteps;  // B values, as the model takes them (DiTSpec::timestep_divisor)
  // The call's conditioning (conditioning.h): the text (kText, kTextMask,
  // kPooled) and whatever else the model's family adds, batch-major.
  const Conditioning* cond = nullptr;
  // Blocks this call skips (SD3's skip-layer guidance): the streams pass them
  // unchanged, as diffusers' skip_layers does.
  std::vector<int64_t> skip_blocks;
  // Sequence parallelism and PipeFusion: compute only the token rows
  // [row_begin, row_end) (end 0 = all). Token rows: frame-major, frame ×
  // patch rows of the latent grid (F · H / patch of them; a range may cross
  // frames). Positions stay global; attention over the other rows is the
  // attention backend's job.
  int64_t row_begin = 0, row_end = 0;

  // The token rows [begin, end) of `token_rows` this call computes; throws
  // one line when they lie outside them.
  std::pair<int64_t, int64_t> rows(int64_t token_rows) const;
  // The conditioning's tensor `name`, or null (no conditioning, or no such name).
  const Tensor* find(const char* name) const {
    return cond != nullptr ? cond->find(name) : nullptr;
  }
  // The joint-text models' conditioning (FLUX, SD3): text [batch, L,
  // text_width], pooled [batch, pooled_width] and one timestep per batch item;
  // throws one line naming `model` and what is wrong.
  void check_joint_text(int64_t batch, int64_t text_width, int64_t pooled_width,
                        const char* model) const;
};

// The part of the model a rank holds. A pipeline stage: blocks
// [block_begin, block_end) of the flat block list; the first stage also
// embeds the latents, the last also has the final layer. Every stage keeps
// the (small) conditioning embedders. Under tensor parallelism (`tp`) the
// blocks' attention and MLP matrices are this rank's share; modulation,
// embeddings and the final layer stay whole.
struct DiTStage {
  DiTStage() = default;
  DiTStage(int64_t begin, int64_t end, bool first_stage, bool last_stage,
           nn::TensorParallel shares = {})
      : block_begin(begin), block_end(end), first(first_stage), last(last_stage), tp(shares) {}
  int64_t block_begin = 0;
  int64_t block_end = -1;  // -1: to the last block
  bool first = true, last = true;
  nn::TensorParallel tp;
};

// `stage` with its end filled in (-1: the last block), checked against the
// model's `blocks`; throws one line when it does not fit.
DiTStage resolve_stage(DiTStage stage, int64_t blocks);

// A later pipeline stage's streams: a copy of the previous stage's `hidden`,
// checked to be [batch, text + tokens, width]; throws one line naming `model`.
Streams previous_stage_streams(const Tensor* hidden, int64_t batch, int64_t text, int64_t tokens,
                               int64_t width, const char* model);

// What the loop and the parallel layer need to know about a model.
struct DiTSpec {
  int64_t blocks = 0;  // the flat block list's length
  int64_t heads = 0, hidden = 0;
  int64_t latent_channels = 0;  // of the latents the loop holds
  int64_t out_channels = 0;     // of the output (PixArt's learned sigma: 2× latent)
  int64_t patch = 1;            // latent pixels per token side
  // The model's timestep = the scheduler's / this, in f32 (FLUX.1: t / 1000);
  // reversed: (divisor − t) / divisor (Z-Image: 1 − σ).
  double timestep_divisor = 1.0;
  bool timestep_reversed = false;
  bool text_stream = false;  // joint attention over a text stream that blocks update
  bool video = false;        // takes latents of F > 1 frames (an image model: F = 1)
  // How far the positional tables reach, in latent frames and in patch rows
  // and columns (Wan's rotary table, Z-Image's axes_lens); 0: no limit. The
  // planner refuses a request beyond them before any work.
  int64_t max_frames = 0, max_patch_rows = 0, max_patch_cols = 0;
};

// Latents of shape `latents` are [B, spec.latent_channels, F, H, W], and F = 1
// unless the model is a video model; throws one line naming `model` (the
// pipeline checks a request's latents with it before loading, the DiT base
// every call).
void check_latents(const DiTSpec& spec, const std::string& model, const Shape& latents);

// The geometry of the current call, which a model's embed sets.
struct CallGeometry {
  int64_t batch = 0;
  // Text tokens: the text stream's (joint attention) or the cross-attention
  // condition's (PixArt, after trimming padding every row masks).
  int64_t text = 0;
  int64_t rows = 0;        // token rows this call computes (patch rows for an image)
  int64_t grid_width = 0;  // tokens per patch row
  int64_t width = 0;       // latent columns
  int64_t tokens() const { return rows * grid_width; }
};

class DiT {
 public:
  virtual ~DiT() = default;
  virtual DiTSpec spec() const = 0;
  // "PixArt", "FLUX", "SD3": the model as its messages name it.
  virtual const char* name() const = 0;
  // This model's blocks of the flat list (PipeFusion: one stage's).
  const DiTStage& stage() const { return stage_; }
  // Every attention call goes through `backend` (the serial one until set).
  void set_attention_backend(nn::AttentionBackend* backend) { backend_ = backend; }
  // Hooks around the blocks, in order. At a boundary before block b they are
  // offered before_block in order until one skips (the rest are not offered
  // b); after_block goes to every hook that asks for the boundary after a
  // block that ran. Not owned; empty: none.
  void set_block_hooks(std::vector<BlockHook*> hooks) { hooks_ = std::move(hooks); }
  const std::vector<BlockHook*>& block_hooks() const { return hooks_; }
  // The attention modules' outputs (block_hook.h); not owned; null: none.
  void set_attention_hook(AttentionOutputHook* hook) { attention_hook_ = hook; }

  // A stage's whole call: the output on the last stage ([B, out_channels,
  // token rows · patch, W], see finalize), else the streams' x.
  // On a CUDA model the inputs are copied to its device (where they are not
  // already), the call runs under its DeviceScope and the result goes to the
  // device of the latents (or of `hidden`): the host for host inputs.
  Tensor forward(const DiTInputs& in, const Tensor* hidden = nullptr);
  // The device the model was built on (the DeviceScope current then): its
  // weights live there and its calls run there.
  Device device() const { return device_; }
  // The text-stream tokens the streams carry for these inputs (0 without one).
  virtual int64_t stream_text_tokens(const DiTInputs& in) const {
    const Tensor* text = in.find(kText);
    return spec().text_stream && text != nullptr ? text->dim(1) : 0;
  }

 protected:
  // `stage` resolved against the model's `blocks` (resolve_stage).
  DiT(DiTStage stage, int64_t blocks)
      : stage_(resolve_stage(stage, blocks)),
        backend_(&nn::serial_attention()),
        device_(current_device()) {}
  // The call's conditioning and geometry (set_geometry); on the first stage
  // also the streams of the latents' patch rows. A later stage returns no
  // streams: the base takes them from the previous stage's `hidden`.
  virtual Streams embed(const DiTInputs& in) = 0;
  // Blocks [b0, b1) of the flat list, all within this stage's, on streams
  // of the call's shape (both checked by the base).
  virtual void run_blocks(Streams& s, int64_t b0, int64_t b1) = 0;
  // The last stage's output [B, out_channels, rows · patch, W]: the token
  // rows' latent rows, frame-major (for an image, the image's rows).
  virtual Tensor finalize(const Streams& s) = 0;
  // Block b's timestep-modulated image input (BlockHook::modulated_input) on
  // streams of the call's shape, for a hook that asks: [B, image tokens,
  // hidden] on the current device.
  virtual Tensor block_modulated_input(int64_t b, const Streams& s) = 0;

  void set_geometry(const CallGeometry& g) { call_ = g; }
  // Block b's attention module `module`, whose output is the n values at
  // `out`: `compute` runs it unless the attention hook supplies the output.
  bool attention_hooked() const { return attention_hook_ != nullptr; }
  template <class Compute>
  void attention_output(int64_t b, int module, float* out, int64_t n, Compute&& compute) {
    if (attention_hook_ != nullptr && attention_hook_->replace(b, module, out, n)) return;
    compute();
    if (attention_hook_ != nullptr) attention_hook_->ran(b, module, out, n);
  }
  const CallGeometry& geometry() const { return call_; }

  DiTStage stage_;
  nn::AttentionBackend* backend_;

 private:
  Tensor forward_here(const DiTInputs& in, const Tensor* hidden);
  // The stage's blocks on `s`: skipped ones passed over, the hooks'
  // boundaries and skips honoured, the runs between them fused.
  void run_stage(Streams& s, const std::vector<int64_t>& skip);
  // The text-stream tokens the streams carry in this call.
  int64_t stream_text() const { return spec().text_stream ? call_.text : 0; }
  Device device_;
  CallGeometry call_;
  std::vector<BlockHook*> hooks_;
  AttentionOutputHook* attention_hook_ = nullptr;
};

}  // namespace xdit::models
