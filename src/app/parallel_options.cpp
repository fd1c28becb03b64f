#include "app/parallel_options.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "core/log.h"

namespace xdit::app {

namespace {
// A list flag that takes numbers, or one of `modes` alone: the mode given
// ("" for numbers), the numbers into `out`; one line for anything else.
template <class T>
std::string numbers_or_mode(const std::vector<std::string>& given, const std::string& flag,
                            std::initializer_list<const char*> modes, const char* what,
                            std::vector<T>& out) {
  std::string either;  // "auto, dynamic"
  for (const char* m : modes) either += (either.empty() ? "" : ", ") + std::string(m);
  for (const std::string& v : given) {
    if (std::find(modes.begin(), modes.end(), v) != modes.end()) {
      XDIT_CHECK(given.size() == 1, flag, " is either ", either, " or numbers");
      return v;
    }
    T x{};
    XDIT_CHECK(CLI::detail::lexical_cast(v, x), flag, " must be ", what, ", got '", v, "'");
    out.push_back(x);
  }
  return "";
}
}  // namespace

void add_parallel_options(CLI::App* cmd, ParallelOptions& o) {
  auto& p = o.config;
  const char* par = "Parallel (under mpirun; the degrees must multiply to the number of ranks)";
  cmd->add_option("--data_parallel_degree,--data-parallel-degree", p.data_parallel_degree,
                  "data parallelism: generate's prompts, or serve's requests (one per group at a "
                  "time), split over this many groups")
      ->group(par);
  cmd->add_flag("--use_cfg_parallel,--use-cfg-parallel", p.use_cfg_parallel,
                "the two halves of classifier-free guidance on two rank groups")
      ->group(par);
  cmd->add_option("--ulysses_degree,--ulysses-degree", p.ulysses_degree,
                  "Ulysses sequence parallelism")
      ->group(par);
  cmd->add_option("--ring_degree,--ring-degree", p.ring_degree, "Ring sequence parallelism")
      ->group(par);
  cmd->add_option("--pipefusion_parallel_degree,--pipefusion-parallel-degree",
                  p.pipefusion_parallel_degree,
                  "PipeFusion stages (the blocks split over this many ranks)")
      ->group(par);
  cmd->add_option("--num_pipeline_patch,--num-pipeline-patch", p.num_pipeline_patch,
                  "PipeFusion patches (default: the PipeFusion degree)")
      ->group(par);
  o.warmup_flag = cmd->add_option("--warmup_steps,--warmup-steps", o.warmup_steps,
                                  "PipeFusion and DistriFusion: the first N steps synchronous "
                                  "on the whole image (the first step always is); default 1 "
                                  "under PipeFusion, 4 under DistriFusion (xDiT's)")
                      ->group(par);
  cmd->add_option("--attn_layer_num_for_pp,--attn-layer-num-for-pp", o.attn_layers,
                  "blocks per PipeFusion stage, e.g. 10,18 (must sum to the blocks), or auto: "
                  "in proportion to each stage's measured speed")
      ->delimiter(',')
      ->group(par);
  cmd->add_option("--patch_parallel_degree,--patch-parallel-degree", p.patch_parallel_degree,
                  "patch parallelism: the image's row bands over this many ranks (with CFG and "
                  "data parallel, not with Ulysses / Ring / PipeFusion)")
      ->group(par);
  cmd->add_option("--patch_mode,--patch-mode", p.patch_mode,
                  "patch parallelism: displaced (DistriFusion: stale K/V of the other bands "
                  "after the warm-up; the default) or naive (attention inside each band: "
                  "approximate)")
      ->group(par);
  cmd->add_option("--patch_weights,--patch-weights", o.patch_weights,
                  "uneven devices: each rank splitting the rows (sequence or patch parallel) "
                  "takes rows in proportion to its weight, e.g. 2,1; auto: from one timed "
                  "calibration step (logged); dynamic: even at first, then re-split between "
                  "steps as the ranks' measured speeds drift apart (logged)")
      ->delimiter(',')
      ->group(par);
  cmd->add_option("--parallelism", o.parallelism,
                  "xDiT legacy: patch or naive_patch, on every rank CFG and data parallel leave")
      ->group(par);
  cmd->add_option("--sync_mode,--sync-mode", o.sync_mode,
                  "PipeFusion and DistriFusion: full_sync makes every step synchronous (exact, "
                  "equal to the serial run); stale_gn and corrected_async_gn (xDiT legacy, the "
                  "same for transformers) keep the stale activations after --warmup_steps")
      ->group(par);
  o.parallel_vae_flag =
      cmd->add_flag("--use_parallel_vae,--use-parallel-vae", o.parallel_vae,
                    "decode with the VAE split into row bands over the ranks of each data-parallel "
                    "group (halo rows, exact); on by default on the CPU (a replica of several "
                    "ranks, a latent row for each) and under patch parallelism, "
                    "--use_parallel_vae=false turns it off")
          ->group(par);
  cmd->add_option("--comm_timeout,--comm-timeout", o.comm_timeout,
                  "seconds one communication call (a send, receive or collective) may wait "
                  "before the job ends with a line naming the rank and the call (a stopped, hung "
                  "or far-behind rank); 0: wait forever")
      ->capture_default_str()
      ->group(par);
  cmd->add_option("--tensor_parallel_degree,--tensor-parallel-degree", p.tensor_parallel_degree,
                  "tensor parallelism: each block's attention heads and MLP units (and the T5 "
                  "encoder's) split over T consecutive ranks, one all-reduce per split product; "
                  "the heads must divide by T x --ulysses_degree")
      ->group(par);
}

void resolve_parallel_options(ParallelOptions& o, int world_size) {
  // xDiT legacy's --parallelism patch|naive_patch: every rank CFG and data
  // parallelism leave to patch parallelism.
  if (!o.parallelism.empty()) {
    XDIT_CHECK(o.parallelism == "patch" || o.parallelism == "naive_patch",
               "--parallelism must be patch or naive_patch (xDiT legacy), got '", o.parallelism,
               "'");
    const int rest = o.config.data_parallel_degree * o.config.cfg();
    XDIT_CHECK(rest >= 1 && world_size % rest == 0, "--parallelism ", o.parallelism, ": ",
               world_size, " ranks do not divide by dp x cfg = ", rest);
    o.config.patch_parallel_degree = world_size / rest;
    o.config.patch_mode = o.parallelism == "patch" ? "displaced" : "naive";
  }
  XDIT_CHECK(o.sync_mode.empty() || o.sync_mode == "corrected_async_gn" ||
                 o.sync_mode == "full_sync" || o.sync_mode == "stale_gn",
             "--sync_mode must be full_sync, corrected_async_gn or stale_gn (xDiT legacy), got '",
             o.sync_mode, "'");
  o.config.full_sync = o.sync_mode == "full_sync";
  if (o.warmup_flag->count() > 0) o.config.warmup_steps = o.warmup_steps;
  const std::string weights = numbers_or_mode(
      o.patch_weights, "--patch_weights", {"auto", "dynamic"}, "numbers", o.config.patch_weights);
  if (weights == "auto") o.config.auto_weights = true;
  if (weights == "dynamic") o.config.dynamic_weights = true;
  if (numbers_or_mode(o.attn_layers, "--attn_layer_num_for_pp", {"auto"}, "whole numbers or auto",
                      o.config.attn_layer_num_for_pp) == "auto")
    o.config.auto_stage_blocks = true;
  if (o.parallel_vae_flag->count() > 0) o.config.use_parallel_vae = o.parallel_vae;
}

void warn_parallel_options(const ParallelOptions& o) {
  const parallel::ParallelConfig& c = o.config;
  for (const std::string& line : c.ignored_flags()) XDIT_WARN(line);
  if (o.sync_mode == "stale_gn" || o.sync_mode == "corrected_async_gn")
    XDIT_WARN("--sync_mode ", o.sync_mode,
              ": stale_gn and corrected_async_gn differ in how "
              "DistriFusion corrects a GroupNorm across patches; a transformer has none, so the "
              "two are the same here (stale activations after the warm-up)");
  if (c.patch_parallel_degree > 1 && !c.displaced())
    XDIT_WARN("--patch_mode naive is approximate: each of the ", c.patch_parallel_degree,
              " bands attends to its own rows only (seams at the bands' edges)");
  if (c.warmup_steps == 0 && c.stale_method())
    XDIT_INFO(
        "--warmup_steps 0: the first step runs synchronously regardless (nothing stale "
        "exists yet), the same as --warmup_steps 1");
}

}  // namespace xdit::app
