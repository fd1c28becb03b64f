// The parallel layout, with xDiT's flag names, and the device mesh: which
// rank holds which position. Ranks are ordered as in xDiT: tp varies fastest,
// then sp (Ulysses contiguous inside, Ring strided), then pp, cfg, and dp
// outermost (docs/ARCHITECTURE.md, "Mesh").
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"

namespace xdit::parallel {

struct ParallelConfig {
  int data_parallel_degree = 1;
  bool use_cfg_parallel = false;
  int pipefusion_parallel_degree = 1;
  int ulysses_degree = 1;
  int ring_degree = 1;
  int tensor_parallel_degree = 1;
  // Patch parallelism (DistriFusion "displaced", or "naive"): the image's row
  // bands over this many ranks, in the sequence-parallel slot of the mesh
  // (it replaces Ulysses / Ring and PipeFusion; it combines with CFG and DP).
  int patch_parallel_degree = 1;
  std::string patch_mode;  // "displaced" (the default when empty) or "naive"
  bool full_sync = false;  // --sync_mode full_sync: every step synchronous (exact)
  // Uneven devices: each sequence-parallel (or patch) rank's share of the
  // rows in proportion to its weight; empty: as even as possible.
  std::vector<double> patch_weights;
  static constexpr double kMinPatchWeight = 1e-3, kMaxPatchWeight = 1e3;
  // --patch_weights auto: the weights from one calibration step
  // (parallel/calibrate.h), set on the mesh before the first denoising step.
  bool auto_weights = false;
  // --patch_weights dynamic: starts even; after each step the ranks' measured
  // compute re-splits the rows when they drift apart (pipeline/step_hooks.h).
  bool dynamic_weights = false;
  // The patch-parallel VAE decoder (--use_parallel_vae): the latent's rows
  // split over the ranks of each data-parallel replica. Unset: on under
  // patch parallelism, off otherwise.
  std::optional<bool> use_parallel_vae;
  // PipeFusion: patches (0 = the PipeFusion degree) and blocks per stage
  // (empty = as even as possible).
  int num_pipeline_patch = 0;
  std::vector<int> attn_layer_num_for_pp;
  // --attn_layer_num_for_pp auto: blocks per stage in proportion to each
  // stage's measured speed (parallel/calibrate.h), set on the mesh when the
  // pipeline loads; attn_layer_num_for_pp holds them afterwards.
  bool auto_stage_blocks = false;
  // The stale methods' (PipeFusion, DistriFusion) warm-up: the first N
  // steps synchronous on the whole image. Unset: xDiT's defaults, 1 for
  // PipeFusion and 4 for DistriFusion. See sync_steps().
  std::optional<int> warmup_steps;
  static constexpr int kPipeFusionWarmup = 1, kDistriFusionWarmup = 4;

  int cfg() const { return use_cfg_parallel ? 2 : 1; }
  bool displaced() const { return patch_mode != "naive"; }
  // Whether some step may use stale activations: PipeFusion, or DistriFusion
  // (displaced patch parallelism), without full_sync.
  bool stale_method() const {
    return !full_sync &&
           (pipefusion_parallel_degree > 1 || (patch_parallel_degree > 1 && displaced()));
  }
  // How many of `steps` denoising steps run synchronously on the whole
  // image: all under full_sync or without a stale method; otherwise the
  // warm-up, at least 1 (the first step has nothing stale to use).
  int64_t sync_steps(int64_t steps) const;
  // "exact" (equal to the serial run), "stale" (PipeFusion / DistriFusion
  // steps after the warm-up use the previous step's activations) or
  // "approximate" (naive patch: attention inside each band).
  std::string exactness(int64_t steps) const;
  // Everything of the layout that changes the numbers, for the image's
  // metadata, serve's answer, the log and the trace: describe(), the stale
  // methods' warm-up, patches and sync mode, and exactness(). With the
  // run's `token_rows` the PipeFusion patch count is the one patches() makes
  // of them (the request's when 0).
  std::string label(int64_t steps, int64_t token_rows = 0) const;
  // The ranks that split the image's token rows: Ulysses × Ring, or the
  // patch-parallel ranks (the two exclude each other; the mesh's "sp" slot
  // holds either).
  int row_split_degree() const { return ulysses_degree * ring_degree * patch_parallel_degree; }
  int world() const {
    return data_parallel_degree * cfg() * pipefusion_parallel_degree * row_split_degree() *
           tensor_parallel_degree;
  }
  bool serial() const { return world() == 1; }
  // Ranks that share one image (every degree but data parallel's).
  int replica() const { return world() / data_parallel_degree; }
  // Whether the VAE decodes on row bands over the replica.
  bool parallel_vae() const {
    return replica() > 1 && use_parallel_vae.value_or(patch_parallel_degree > 1);
  }
  // The latent rows each rank of a replica decodes (parallel_vae()): even,
  // or by the weight of each rank's sequence-parallel position when
  // --patch_weights is given; throws one line when a band would be thinner
  // than the convolutions' halo.
  std::vector<int64_t> vae_rows(int64_t latent_rows) const;
  std::string describe() const;  // "dp=1 cfg=2 pp=1 ulysses=2 ring=1 tp=1"

  // Degrees against the number of ranks (before anything is loaded).
  void validate(int world_size) const;
  // The flags that change nothing in this layout — one method's (PipeFusion's
  // patches and blocks per stage; patch parallelism's mode; the sync mode and
  // warm-up of the stale methods) where the method is not in it, a warm-up
  // under full_sync — one line each: accepted with a note, as xDiT's scripts
  // pass them to every layout; only contradictions are refused.
  std::vector<std::string> ignored_flags() const;
  // Degrees against the model and the request: heads divisible by the
  // tensor-parallel degree, each TP rank's heads by Ulysses,
  // a patch row per sequence-parallel rank (uneven shares are fine), one per PipeFusion
  // stage (per SP rank), CFG parallel needs guidance (`cfg`: the request
  // uses it; `cfg_needs`: what asks for it on this model).
  void validate_request(int64_t heads, int64_t patch_rows, bool cfg,
                        const std::string& cfg_needs = "--guidance_scale > 1") const;
  // No more data-parallel groups than prompts.
  void validate_prompts(size_t prompts) const;
  // PipeFusion against the model: blocks per stage, patches.
  void validate_pipefusion(int64_t num_blocks) const;
  // Every SP rank's token rows of `rows` (by patch_weights when set).
  std::vector<int64_t> row_split(int64_t rows) const;
  // The blocks [begin, end) of each stage.
  std::vector<std::pair<int64_t, int64_t>> stage_blocks(int64_t num_blocks) const;
  // The token-row ranges of the M patches over `token_rows` rows, each a
  // multiple of the sequence-parallel degree (M reduced when it does not
  // fit; the caller warns).
  std::vector<std::pair<int64_t, int64_t>> patches(int64_t token_rows) const;
};

struct Coord {
  int dp = 0, cfg = 0, pp = 0, sp = 0, ulysses = 0, ring = 0, patch = 0, tp = 0;
};

class Mesh {
 public:
  // Splits `world` into the groups of `cfg` (which must be validated).
  Mesh(const ParallelConfig& cfg, comm::Communicator& world);
  ~Mesh();

  static Coord coord_of(const ParallelConfig& cfg, int rank);
  const ParallelConfig& config() const { return cfg_; }
  const Coord& coord() const { return coord_; }
  // The groups over host memory (the pipeline's latents, images, stage
  // hand-offs, and on the CPU everything).
  comm::Communicator& world() { return world_; }
  // The row_split_degree() ranks that split an image's token rows
  // (sequence parallelism, or patch parallelism's bands).
  comm::Communicator& sp_group() { return *host_.sp; }
  comm::Communicator& ulysses_group() { return *host_.ulysses; }
  comm::Communicator& ring_group() { return *host_.ring; }
  comm::Communicator& cfg_group() { return *host_.cfg; }
  comm::Communicator& dp_group() { return *host_.dp; }
  comm::Communicator& pp_group() { return *host_.pp; }
  // The tensor-parallel ranks that share this rank's layers (consecutive ranks).
  comm::Communicator& tp_group() { return *host_.tp; }
  // The ranks of this rank's data-parallel replica, in rank order (the
  // patch-parallel VAE's bands).
  comm::Communicator& replica_group() { return *host_.replica; }
  // The replica's ranks in groups of `degree` consecutive ranks (host
  // memory): the groups a CPU text encoder splits over (its heads and
  // feed-forward units), whatever the transformer's layout, since every rank
  // of a replica encodes the same prompts. Made on the first call for a
  // degree, which is collective over the replica; `degree` divides its size.
  comm::Communicator& text_group(int degree);

  // The groups that carry a model's activations inside a call (the
  // attention backends, tensor parallelism's all-reduce, the parallel VAE's
  // halos and attention): the host groups, or after set_device the same
  // ranks over device memory.
  struct ModelGroups {
    comm::Communicator *sp, *ulysses, *ring, *tp, *replica;
  };
  const ModelGroups& model_groups() const { return model_; }
  // Activations on this rank's GPU `device` (made current here): the model
  // groups become communicators of `kind` ("nccl" or "host-staged", as
  // comm::choose_device_comm says) in the mesh's order. Collective: every
  // rank of the world calls it.
  void set_device(Device device, const std::string& kind);
  Device device() const { return device_; }
  const std::string& device_comm() const { return device_kind_; }  // "" on the CPU
  // --patch_weights auto: the calibrated weights (one per SP position),
  // kept for every later request.
  void set_patch_weights(std::vector<double> weights);
  // --attn_layer_num_for_pp auto: the calibrated blocks per stage.
  void set_stage_blocks(std::vector<int> blocks, int64_t num_blocks);
  // One line per rank: "rank 3: dp 0 cfg 1 sp 1 (ulysses 1, ring 0)".
  std::string layout() const;

 private:
  struct Groups {
    std::unique_ptr<comm::Communicator> sp, ulysses, ring, cfg, dp, pp, tp, replica;
  };
  // The groups of this rank's coordinate split from `base` (only the model
  // groups when `model_only`).
  Groups split(comm::Communicator& base, bool model_only) const;
  static ModelGroups model_of(const Groups& g) {
    return {g.sp.get(), g.ulysses.get(), g.ring.get(), g.tp.get(), g.replica.get()};
  }

  ParallelConfig cfg_;
  comm::Communicator& world_;
  Coord coord_;
  Groups host_;
  std::unique_ptr<comm::Communicator> device_world_;
  Groups device_groups_;
  ModelGroups model_{};
  std::map<int, std::unique_ptr<comm::Communicator>> text_groups_;  // by degree
  Device device_;
  std::string device_kind_;
};

}  // namespace xdit::parallel
