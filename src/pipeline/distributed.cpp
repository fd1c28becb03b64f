#include "pipeline/distributed.h"

#include <cstring>

#include "core/error.h"

namespace xdit::pipeline {

std::pair<int64_t, int64_t> dp_share(int64_t prompts, int dp, int g) {
  return {prompts * g / dp, prompts * (g + 1) / dp};
}

namespace {

// Items [b, e) of a batch-major tensor (latents [P, C, F, h, w] too).
Tensor batch_slice(const Tensor& t, int64_t b, int64_t e) {
  if (!t.defined()) return t;
  Tensor f = t.to(DType::kF32);
  Shape s = f.shape();
  const int64_t per = f.numel() / s[0];
  s[0] = e - b;
  Tensor out = Tensor::empty(s);
  std::memcpy(out.data<float>(), f.data<float>() + b * per, static_cast<size_t>((e - b) * per) * 4);
  return out;
}

}  // namespace

std::vector<std::vector<uint8_t>> gather_groups(comm::Communicator& dp_group,
                                                const std::vector<uint8_t>& mine) {
  std::vector<std::vector<uint8_t>> all;
  for (int g = 0; g < dp_group.size(); ++g) {
    uint64_t n = g == dp_group.rank() ? mine.size() : 0;
    dp_group.broadcast(&n, sizeof n, comm::Type::kByte, g);
    std::vector<uint8_t> buf = g == dp_group.rank() ? mine : std::vector<uint8_t>(n);
    dp_group.broadcast(buf.data(), n, comm::Type::kByte, g);
    all.push_back(std::move(buf));
  }
  return all;
}

namespace {

std::vector<uint8_t> concat(const std::vector<std::vector<uint8_t>>& parts) {
  std::vector<uint8_t> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// An ImageResult as bytes: width, height, frames per prompt, the frame
// count, the cache line's length, the three timings, the cache line, then
// the frames (prompt-major).
std::vector<uint8_t> pack(const ImageResult& r) {
  const int64_t head[5] = {r.width, r.height, r.frames, static_cast<int64_t>(r.rgb.size()),
                           static_cast<int64_t>(r.cache.size())};
  const double times[3] = {r.text_seconds, r.denoise_seconds, r.decode_seconds};
  size_t bytes = sizeof head + sizeof times + r.cache.size();
  for (const auto& img : r.rgb) bytes += img.size();
  std::vector<uint8_t> out(bytes);
  uint8_t* at = out.data();
  auto put = [&](const void* p, size_t n) {
    std::memcpy(at, p, n);
    at += n;
  };
  put(head, sizeof head);
  put(times, sizeof times);
  put(r.cache.data(), r.cache.size());
  for (const auto& img : r.rgb) put(img.data(), img.size());
  return out;
}

ImageResult unpack(const std::vector<uint8_t>& b) {
  ImageResult r;
  size_t at = 0;
  auto get = [&](void* p, size_t n) {
    XDIT_CHECK(at + n <= b.size(), "data-parallel gather: a group's result is truncated");
    std::memcpy(p, b.data() + at, n);
    at += n;
  };
  int64_t head[5];
  double times[3];
  get(head, sizeof head);
  get(times, sizeof times);
  XDIT_CHECK(head[4] >= 0 && static_cast<size_t>(head[4]) <= b.size() - at,
             "data-parallel gather: a group's result is truncated");
  r.cache.resize(static_cast<size_t>(head[4]));
  get(r.cache.data(), r.cache.size());
  r.width = head[0];
  r.height = head[1];
  r.frames = head[2];
  XDIT_CHECK(r.frames >= 1 && head[3] % r.frames == 0,
             "data-parallel gather: a group's result has ", head[3], " images of ", r.frames,
             " frame(s) each");
  r.text_seconds = times[0];
  r.denoise_seconds = times[1];
  r.decode_seconds = times[2];
  const size_t per = static_cast<size_t>(r.width * r.height * 3);
  for (int64_t i = 0; i < head[3]; ++i) {
    r.rgb.emplace_back(per);
    get(r.rgb.back().data(), per);
  }
  return r;
}

}  // namespace

std::vector<ImageResult> gather_results(comm::Communicator& dp_group, const ImageResult& mine) {
  std::vector<ImageResult> all;
  for (const auto& bytes : gather_groups(dp_group, pack(mine))) all.push_back(unpack(bytes));
  return all;
}

namespace {

// The whole batch's initial latents: the plan's, or drawn from its seed, so
// every group's share equals the serial batch's.
Tensor batch_latents(const Pipeline& pipe, const Plan& plan) {
  if (plan->latents.defined()) return plan->latents;
  const int64_t vsf = pipe.vae_scale_factor();
  return initial_noise(plan.batch(), pipe.spec().latent_channels, plan->latent_frames,
                       plan->run_height / vsf, plan->run_width / vsf, plan->seed);
}

}  // namespace

Tensor generate_latents_distributed(Pipeline& pipe, parallel::Mesh& mesh, const Plan& whole,
                                    const std::function<void(const StepEvent&)>& on_step) {
  XDIT_CHECK(pipe.mesh() == &mesh, "generate_latents_distributed: call pipe.set_mesh(&mesh) first");
  const Plan plan = whole.has_prompts() ? whole.with_embeddings(pipe.encode_prompts(whole)) : whole;
  const int64_t P = plan.batch();
  const int dp = mesh.config().data_parallel_degree;
  const auto [b, e] = dp_share(P, dp, mesh.coord().dp);
  const Tensor latents = batch_latents(pipe, plan);
  Tensor out = pipe.generate_latents(plan.share(b, e, batch_slice(latents, b, e)), on_step);
  if (dp == 1) return out;
  std::vector<uint8_t> bytes(out.nbytes());
  std::memcpy(bytes.data(), out.raw(), bytes.size());
  std::vector<uint8_t> all = concat(gather_groups(mesh.dp_group(), bytes));
  Shape s = out.shape();
  s[0] = P;
  Tensor full = Tensor::empty(s);
  XDIT_CHECK(all.size() == full.nbytes(), "data-parallel gather: got ", all.size(),
             " bytes, expected ", full.nbytes());
  std::memcpy(full.raw(), all.data(), all.size());
  return full;
}

ImageResult generate_distributed(Pipeline& pipe, parallel::Mesh& mesh, const Plan& plan,
                                 const std::function<void(const StepEvent&)>& on_step) {
  XDIT_CHECK(pipe.mesh() == &mesh, "generate_distributed: call pipe.set_mesh(&mesh) first");
  const int64_t P = plan.batch();
  const int dp = mesh.config().data_parallel_degree;
  const auto [b, e] = dp_share(P, dp, mesh.coord().dp);
  const Tensor latents = batch_latents(pipe, plan);
  ImageResult res = pipe.generate(plan.share(b, e, batch_slice(latents, b, e)), on_step);
  if (dp == 1) return res;
  std::vector<std::vector<uint8_t>> images;  // every group's prompts' frames, in prompt order
  // Each replica's cache decided on its own prompts: one line when they
  // all did the same, else one per replica.
  std::string caches;
  bool same = true;
  int replica = 0;
  for (ImageResult& g : gather_results(mesh.dp_group(), res)) {
    XDIT_CHECK(g.width == res.width && g.height == res.height && g.frames == res.frames,
               "data-parallel gather: image sizes differ");
    for (auto& img : g.rgb) images.push_back(std::move(img));
    same = same && g.cache == res.cache;
    if (!g.cache.empty())
      caches += (caches.empty() ? "" : "; ") + std::string("replica ") + std::to_string(replica) +
                " " + g.cache;
    ++replica;
  }
  if (!same) res.cache = caches;
  XDIT_CHECK(images.size() == static_cast<size_t>(P * res.frames),
             "data-parallel gather: image sizes differ");
  res.rgb = std::move(images);
  return res;
}

std::vector<ImageResult> generate_groups(Pipeline& pipe, parallel::Mesh& mesh,
                                         const std::vector<Plan>& plans,
                                         const std::function<void(const StepEvent&)>& on_step) {
  XDIT_CHECK(pipe.mesh() == &mesh, "generate_groups: call pipe.set_mesh(&mesh) first");
  const int g = mesh.coord().dp;
  ImageResult mine;
  if (g < static_cast<int>(plans.size()))
    mine = pipe.generate(plans[static_cast<size_t>(g)], on_step);
  if (mesh.config().data_parallel_degree == 1) return {std::move(mine)};
  std::vector<ImageResult> all = gather_results(mesh.dp_group(), mine);
  all.resize(plans.size());
  return all;
}

}  // namespace xdit::pipeline
