#include "parallel/config.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "comm/device_comm.h"
#include "core/error.h"
#include "nn/tensor_parallel.h"
#include "parallel/split.h"

namespace xdit::parallel {

std::string ParallelConfig::describe() const {
  std::ostringstream s;
  s << "dp=" << data_parallel_degree << " cfg=" << cfg() << " pp=" << pipefusion_parallel_degree
    << " ulysses=" << ulysses_degree << " ring=" << ring_degree << " tp=" << tensor_parallel_degree;
  if (patch_parallel_degree > 1)
    s << " patch=" << patch_parallel_degree << " (" << (displaced() ? "displaced" : "naive")
      << (full_sync ? ", full_sync" : "") << ")";
  if (parallel_vae()) s << " parallel_vae";
  return s.str();
}

int64_t ParallelConfig::sync_steps(int64_t steps) const {
  if (!stale_method()) return steps;
  const int n = warmup_steps.value_or(pipefusion_parallel_degree > 1 ? kPipeFusionWarmup
                                                                     : kDistriFusionWarmup);
  return std::min<int64_t>(steps, std::max(n, 1));
}

std::string ParallelConfig::exactness(int64_t steps) const {
  if (patch_parallel_degree > 1 && !displaced()) return "approximate";
  return sync_steps(steps) < steps ? "stale" : "exact";
}

namespace {
// A setting that is numbers, or a mode that picks them as the run goes:
// "; NAME a,b", "; NAME MODE" or "; NAME MODE (now a,b)"; nothing when unset.
template <class T>
void put_list_setting(std::ostream& s, const char* name, const char* mode, bool by_mode,
                      const std::vector<T>& values) {
  if (!by_mode && values.empty()) return;
  s << "; " << name << ' ';
  if (by_mode) s << mode << (values.empty() ? "" : " (now ");
  for (size_t i = 0; i < values.size(); ++i) s << (i ? "," : "") << values[i];
  if (by_mode && !values.empty()) s << ')';
}
}  // namespace

std::string ParallelConfig::label(int64_t steps, int64_t token_rows) const {
  std::ostringstream s;
  s << describe();
  put_list_setting(s, "patch_weights", "dynamic", dynamic_weights, patch_weights);
  if (pipefusion_parallel_degree > 1)
    s << "; pipefusion patches "
      << (token_rows >= row_split_degree()
              ? static_cast<int64_t>(patches(token_rows).size())
              : (num_pipeline_patch > 0 ? num_pipeline_patch : pipefusion_parallel_degree));
  if (pipefusion_parallel_degree > 1)
    put_list_setting(s, "stage blocks", "auto", auto_stage_blocks, attn_layer_num_for_pp);
  if (pipefusion_parallel_degree > 1 || (patch_parallel_degree > 1 && displaced()))
    s << "; sync_mode " << (full_sync ? "full_sync" : "async") << ", warmup " << sync_steps(steps)
      << " of " << steps << " steps";
  s << "; " << exactness(steps);
  return s.str();
}

void ParallelConfig::validate(int world_size) const {
  for (auto [name, v] : {std::pair{"--data_parallel_degree", data_parallel_degree},
                         {"--pipefusion_parallel_degree", pipefusion_parallel_degree},
                         {"--ulysses_degree", ulysses_degree},
                         {"--ring_degree", ring_degree},
                         {"--patch_parallel_degree", patch_parallel_degree},
                         {"--tensor_parallel_degree", tensor_parallel_degree}})
    XDIT_CHECK(v >= 1, name, " must be at least 1, got ", v);
  XDIT_CHECK(patch_mode.empty() || patch_mode == "displaced" || patch_mode == "naive",
             "--patch_mode must be displaced "
             "(DistriFusion) or naive, got '",
             patch_mode, "'");
  XDIT_CHECK(patch_parallel_degree == 1 ||
                 (ulysses_degree == 1 && ring_degree == 1 && pipefusion_parallel_degree == 1),
             "--patch_parallel_degree ", patch_parallel_degree,
             " takes the image's rows itself: it does not combine with --ulysses_degree, "
             "--ring_degree or --pipefusion_parallel_degree (combine it with --use_cfg_parallel "
             "and --data_parallel_degree)");
  // The product, saturated: degrees of a billion each must not wrap around
  // to the number of ranks.
  int64_t product = 1;
  for (int v : {data_parallel_degree, cfg(), pipefusion_parallel_degree, ulysses_degree,
                ring_degree, patch_parallel_degree, tensor_parallel_degree})
    product = std::min<int64_t>(product * v, int64_t{1} << 40);
  XDIT_CHECK(product == world_size, "the parallel degrees multiply to ",
             product < (int64_t{1} << 40) ? std::to_string(product) : std::string("more than 2^40"),
             " (", describe(), ") but the job has ", world_size, " rank",
             world_size == 1 ? "" : "s",
             ": make dp x cfg x pp x ulysses x ring x patch x tp equal the number of processes "
             "(mpirun -np)");
  XDIT_CHECK(warmup_steps.value_or(0) >= 0, "--warmup_steps must be at least 0, got ",
             warmup_steps.value_or(0));
  for (int n : attn_layer_num_for_pp)
    XDIT_CHECK(n >= 1, "--attn_layer_num_for_pp entries must be at least 1, got ", n);
  XDIT_CHECK(num_pipeline_patch == 0 || num_pipeline_patch >= pipefusion_parallel_degree,
             "--num_pipeline_patch ", num_pipeline_patch,
             " is smaller than --pipefusion_parallel_degree ", pipefusion_parallel_degree,
             ": PipeFusion needs at least one patch per stage");
  XDIT_CHECK(!(auto_weights || dynamic_weights) || patch_weights.empty(),
             "--patch_weights is either auto, dynamic or numbers");
  XDIT_CHECK(!dynamic_weights || (row_split_degree() > 1 && pipefusion_parallel_degree == 1),
             "--patch_weights dynamic re-splits the rows of the ranks that split them between "
             "steps: it needs --ulysses_degree, --ring_degree or --patch_parallel_degree above 1 "
             "and no PipeFusion");
  XDIT_CHECK(!auto_weights || (row_split_degree() > 1 && pipefusion_parallel_degree == 1),
             "--patch_weights auto calibrates the ranks that split the rows on one step: it "
             "needs --ulysses_degree, --ring_degree or --patch_parallel_degree above 1 and no "
             "PipeFusion (under PipeFusion give the weights of the ranks that split the rows "
             "by hand, e.g. --pipefusion_parallel_degree 2 --ulysses_degree 2 --patch_weights "
             "2,1)");
  if (!patch_weights.empty()) {
    // Relative speeds: bounded so that their sum and rows x weight / sum
    // stay far inside a double's and an int64's range.
    for (double w : patch_weights)
      XDIT_CHECK(std::isfinite(w) && w >= kMinPatchWeight && w <= kMaxPatchWeight,
                 "--patch_weights must be numbers in ", kMinPatchWeight, " … ", kMaxPatchWeight,
                 " (relative speeds of the ranks), got ", w);
    XDIT_CHECK(row_split_degree() > 1,
               "--patch_weights applies to the ranks that split the "
               "image's rows (--ulysses_degree, --ring_degree or --patch_parallel_degree above 1); "
               "this layout (",
               describe(), ") has none");
    XDIT_CHECK(static_cast<int>(patch_weights.size()) == row_split_degree(), "--patch_weights has ",
               patch_weights.size(), " weights but there are ", row_split_degree(),
               " ranks splitting the rows (ulysses x ring x patch): give one per rank");
  }
}

std::vector<std::string> ParallelConfig::ignored_flags() const {
  const bool pipefusion = pipefusion_parallel_degree > 1, patch = patch_parallel_degree > 1;
  const bool displaced_patch = patch && displaced();
  std::vector<std::string> lines;
  const auto unless = [&](bool applies, const char* flag, const char* method) {
    if (!applies)
      lines.push_back(detail::concat(flag, " applies to ", method, "; this layout (", describe(),
                                     ") has none: ignored"));
  };
  unless(pipefusion || num_pipeline_patch == 0, "--num_pipeline_patch",
         "PipeFusion (--pipefusion_parallel_degree above 1)");
  unless(pipefusion || (attn_layer_num_for_pp.empty() && !auto_stage_blocks),
         "--attn_layer_num_for_pp", "PipeFusion (--pipefusion_parallel_degree above 1)");
  unless(patch || patch_mode.empty(), "--patch_mode",
         "patch parallelism (--patch_parallel_degree above 1, or --parallelism)");
  unless(!full_sync || pipefusion || displaced_patch, "--sync_mode full_sync",
         "PipeFusion and DistriFusion (--patch_parallel_degree with --patch_mode displaced), "
         "whose stale steps it makes synchronous");
  unless(!warmup_steps || pipefusion || displaced_patch, "--warmup_steps",
         "PipeFusion and DistriFusion (--patch_parallel_degree with --patch_mode displaced), "
         "whose stale steps it delays");
  if (warmup_steps && full_sync && (pipefusion || displaced_patch))
    lines.push_back(detail::concat("--warmup_steps ", *warmup_steps,
                                   " with --sync_mode full_sync: every step is synchronous "
                                   "already, so the warm-up changes nothing"));
  return lines;
}

void ParallelConfig::validate_request(int64_t heads, int64_t patch_rows, bool cfg,
                                      const std::string& cfg_needs) const {
  nn::check_divisible(heads, tensor_parallel_degree, "attention heads of the transformer",
                      "--tensor_parallel_degree");
  const int64_t local = heads / tensor_parallel_degree;  // each tensor-parallel rank's
  XDIT_CHECK(
      local % ulysses_degree == 0, "the model's ", heads, " attention heads",
      tensor_parallel_degree > 1 ? detail::concat(" (", local, " per --tensor_parallel_degree ",
                                                  tensor_parallel_degree, " rank)")
                                 : std::string(),
      " are not divisible by --ulysses_degree ", ulysses_degree,
      ": choose a Ulysses degree that divides ", local, " (and use --ring_degree for the rest)");
  XDIT_CHECK(patch_rows >= row_split_degree(), "the image has ", patch_rows,
             " rows of patches, fewer than the sequence-parallel degree ", row_split_degree(),
             " (ulysses ", ulysses_degree, " x ring ", ring_degree,
             "): each rank needs a row; use a taller image or a lower degree");
  XDIT_CHECK(pipefusion_parallel_degree == 1 ||
                 patch_rows / row_split_degree() >= pipefusion_parallel_degree,
             "the image has ", patch_rows, " rows of patches",
             row_split_degree() > 1 ? detail::concat(" (", patch_rows / row_split_degree(),
                                                     " per sequence-parallel rank)")
                                    : "",
             ", fewer than the ", pipefusion_parallel_degree,
             " PipeFusion stages: each stage needs a patch; use a taller image or fewer stages");
  XDIT_CHECK(!use_cfg_parallel || cfg, "--use_cfg_parallel needs classifier-free guidance (",
             cfg_needs, ")");
}

void ParallelConfig::validate_prompts(size_t prompts) const {
  XDIT_CHECK(static_cast<size_t>(data_parallel_degree) <= prompts, "--data_parallel_degree ",
             data_parallel_degree, " is more than the ", prompts, " prompt",
             prompts == 1 ? "" : "s", ": each data-parallel group needs a prompt");
}

void ParallelConfig::validate_pipefusion(int64_t num_blocks) const {
  const int P = pipefusion_parallel_degree;
  XDIT_CHECK(P <= num_blocks, "--pipefusion_parallel_degree ", P, " is more than the model's ",
             num_blocks, " blocks");
  if (!attn_layer_num_for_pp.empty()) {
    XDIT_CHECK(static_cast<int>(attn_layer_num_for_pp.size()) == P, "--attn_layer_num_for_pp has ",
               attn_layer_num_for_pp.size(), " entries but there are ", P, " PipeFusion stages");
    int64_t sum = 0;
    for (int n : attn_layer_num_for_pp) {
      XDIT_CHECK(n >= 1, "--attn_layer_num_for_pp entries must be at least 1");
      sum += n;
    }
    XDIT_CHECK(sum == num_blocks, "--attn_layer_num_for_pp sums to ", sum, " but the model has ",
               num_blocks, " blocks");
  }
}

std::vector<std::pair<int64_t, int64_t>> ParallelConfig::stage_blocks(int64_t num_blocks) const {
  const int P = pipefusion_parallel_degree;
  std::vector<std::pair<int64_t, int64_t>> v;
  int64_t b = 0;
  for (int s = 0; s < P; ++s) {
    const int64_t n = attn_layer_num_for_pp.empty() ? num_blocks / P + (s < num_blocks % P ? 1 : 0)
                                                    : attn_layer_num_for_pp[static_cast<size_t>(s)];
    v.emplace_back(b, b + n);
    b += n;
  }
  return v;
}

std::vector<int64_t> ParallelConfig::row_split(int64_t rows) const {
  return patch_weights.empty() ? row_counts(rows, row_split_degree())
                               : row_counts(rows, patch_weights);
}

std::vector<int64_t> ParallelConfig::vae_rows(int64_t latent_rows) const {
  const int n = replica();
  XDIT_CHECK(latent_rows >= n, "--use_parallel_vae: the VAE cannot be split over the ", n,
             " ranks of a replica: the latent has ", latent_rows,
             " rows and every band needs at least one (the 3x3 convolutions' halo); "
             "use a taller image or turn the parallel VAE off (--use_parallel_vae=false)");
  if (patch_weights.empty()) return row_counts(latent_rows, n);
  // Replica rank i is world rank dp·n + i: its weight is its SP position's.
  std::vector<double> w;
  for (int i = 0; i < n; ++i)
    w.push_back(patch_weights[static_cast<size_t>(Mesh::coord_of(*this, i).sp)]);
  return row_counts(latent_rows, w);
}

std::vector<std::pair<int64_t, int64_t>> ParallelConfig::patches(int64_t rows) const {
  // Patches are whole multiples of the sequence-parallel degree where the
  // rows allow, so that each SP rank of a stage computes the same number of
  // rows of every patch; otherwise as even as possible, each with a row per
  // SP rank (the SP ranks then split a patch unevenly).
  const int64_t unit = row_split_degree(), units = rows / unit;
  XDIT_CHECK(units >= 1, rows, " patch rows cannot give each of the ", unit,
             " sequence-parallel ranks a row");
  int64_t m = num_pipeline_patch > 0 ? num_pipeline_patch : pipefusion_parallel_degree;
  if (m > units) m = units;  // the caller warns
  std::vector<std::pair<int64_t, int64_t>> v;
  const bool even = units * unit == rows;
  for (int64_t j = 0; j < m; ++j) {
    if (even)
      v.emplace_back(unit * (units * j / m), unit * (units * (j + 1) / m));
    else
      v.emplace_back(rows * j / m, rows * (j + 1) / m);
  }
  return v;
}

Coord Mesh::coord_of(const ParallelConfig& c, int rank) {
  Coord k;
  int r = rank;
  k.tp = r % c.tensor_parallel_degree;
  r /= c.tensor_parallel_degree;
  k.sp = r % c.row_split_degree();
  r /= c.row_split_degree();
  k.ulysses = k.sp % c.ulysses_degree;                  // Ulysses: contiguous ranks
  k.ring = (k.sp / c.ulysses_degree) % c.ring_degree;   // Ring: strided
  k.patch = k.sp / (c.ulysses_degree * c.ring_degree);  // patch bands (alone in the slot)
  k.pp = r % c.pipefusion_parallel_degree;
  r /= c.pipefusion_parallel_degree;
  k.cfg = r % c.cfg();
  k.dp = r / c.cfg();
  return k;
}

Mesh::Mesh(const ParallelConfig& cfg, comm::Communicator& world) : cfg_(cfg), world_(world) {
  cfg.validate(world.size());
  coord_ = coord_of(cfg, world.rank());
  host_ = split(world, false);
  model_ = model_of(host_);
}

Mesh::Groups Mesh::split(comm::Communicator& base, bool model_only) const {
  const ParallelConfig& c = cfg_;
  const Coord& k = coord_;
  // color: every coordinate but the group's own; key: the group's coordinate.
  auto color = [&](int dp, int cf, int pp, int sp, int tp) {
    return (((dp * 2 + cf) * c.pipefusion_parallel_degree + pp) * (c.row_split_degree() + 1) + sp) *
               c.tensor_parallel_degree +
           tp;
  };
  const int none = c.row_split_degree();  // a value no sp coordinate takes
  Groups g;
  g.sp = base.split(color(k.dp, k.cfg, k.pp, none, k.tp), k.sp);
  g.ulysses = g.sp->split(k.ring + c.ring_degree * k.patch, k.ulysses);
  g.ring = g.sp->split(k.ulysses + c.ulysses_degree * k.patch, k.ring);
  if (!model_only) {
    g.cfg = base.split(color(k.dp, 0, k.pp, k.sp, k.tp), k.cfg);
    g.dp = base.split(color(0, k.cfg, k.pp, k.sp, k.tp), k.dp);
    g.pp = base.split(color(k.dp, k.cfg, 0, k.sp, k.tp), k.pp);
  }
  g.tp = base.split(color(k.dp, k.cfg, k.pp, k.sp, 0), k.tp);
  g.replica = base.split(k.dp, base.rank());
  return g;
}

void Mesh::set_device(Device device, const std::string& kind) {
  XDIT_CHECK(device.cuda() && device_kind_.empty(), "Mesh::set_device takes one CUDA device, once");
  DeviceScope scope(device);  // NCCL and the staged copies bind to the current device
  // The world as a shared pointer the device communicator can hold; the
  // mesh's caller owns it and outlives the mesh.
  std::shared_ptr<comm::Communicator> host(&world_, [](comm::Communicator*) {});
  device_world_ = comm::make_device_comm(host, kind);
  device_groups_ = split(*device_world_, true);
  model_ = model_of(device_groups_);
  device_kind_ = kind;
  device_ = device;
}

comm::Communicator& Mesh::text_group(int degree) {
  comm::Communicator& replica = *host_.replica;
  XDIT_CHECK(degree >= 1 && replica.size() % degree == 0, "text encoder group of ", degree,
             " ranks: it must divide the ", replica.size(), " ranks of a replica");
  auto& g = text_groups_[degree];
  if (!g) g = replica.split(replica.rank() / degree, replica.rank() % degree);
  return *g;
}

Mesh::~Mesh() = default;

void Mesh::set_stage_blocks(std::vector<int> blocks, int64_t num_blocks) {
  ParallelConfig c = cfg_;
  c.attn_layer_num_for_pp = std::move(blocks);
  c.validate_pipefusion(num_blocks);  // one per stage, each at least 1, summing to the blocks
  cfg_.attn_layer_num_for_pp = c.attn_layer_num_for_pp;
}

void Mesh::set_patch_weights(std::vector<double> weights) {
  ParallelConfig c = cfg_;
  c.patch_weights = std::move(weights);
  c.auto_weights = false;
  c.dynamic_weights = false;  // (the check: numbers, one per SP position)
  c.validate(cfg_.world());   // one per SP position, positive
  cfg_.patch_weights = c.patch_weights;
  cfg_.auto_weights = false;  // calibrated once: later requests keep the weights
}

std::string Mesh::layout() const {
  std::ostringstream s;
  s << "mesh " << cfg_.describe() << " over " << cfg_.world() << " ranks:";
  for (int r = 0; r < cfg_.world(); ++r) {
    const Coord k = coord_of(cfg_, r);
    s << (r ? ";" : "") << " rank " << r << " = dp " << k.dp << " cfg " << k.cfg << " pp " << k.pp
      << " sp " << k.sp << " (u " << k.ulysses << ", r " << k.ring
      << (cfg_.patch_parallel_degree > 1 ? ", patch " + std::to_string(k.patch) : "") << ")"
      << (cfg_.tensor_parallel_degree > 1 ? " tp " + std::to_string(k.tp) : "");
  }
  return s.str();
}

}  // namespace xdit::parallel
