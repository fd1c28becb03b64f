// PipeFusion (arXiv 2405.14430, §3; docs/ARCHITECTURE.md, "PipeFusion"): the
// transformer's blocks split into P stages (one per rank of the PipeFusion
// group), the latent into M patches of token rows (frame-major, frame × patch
// rows: parallel/gather.h; a patch may cross frames). Warm-up steps run the whole image
// through the stages synchronously, filling every attention layer's K/V
// buffer. Then, for each step and patch, stage s receives patch j's hidden
// states (stage 0: patch j's latent as the last stage updated it), runs its
// blocks with Q from patch j and K/V from its buffer (patch j fresh, the rest
// as last computed), and sends patch j on without blocking; the next receive
// is posted before computing. The last stage applies CFG and the scheduler's
// step to the patch's rows (the patch-aware step; the step index advances
// after the last patch) and sends the updated rows back to stage 0.
//
// With Ulysses/Ring inside each stage, every patch (a multiple of the SP
// degree in rows) is split over the stage's SP group exactly as plain
// sequence parallelism splits the image: SP rank k computes its k-th share of
// the patch's rows and passes its hidden states to SP rank k of the next stage
// (the PipeFusion group links equal SP coordinates). PipeFusionAttention keeps
// every SP rank's buffer complete; the last stage gathers the patch's rows
// over its SP group before CFG and the step.
#include <chrono>
#include <cstring>
#include <deque>

#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "parallel/gather.h"
#include "parallel/pipefusion_attention.h"
#include "pipeline/denoiser.h"

namespace xdit::pipeline {

namespace {

// Non-blocking sends whose buffers live until they complete.
class Outbox {
 public:
  explicit Outbox(comm::Communicator& c) : c_(c) {}
  ~Outbox() { drain(); }
  void send(Tensor t, int dest, int tag) {
    auto req = c_.isend(t.raw(), static_cast<size_t>(t.numel()), comm::Type::kF32, dest, tag);
    pending_.push_back({std::move(t), std::move(req)});
    while (!pending_.empty() && pending_.front().second->test()) pending_.pop_front();
  }
  void drain() {
    for (auto& p : pending_) p.second->wait();
    pending_.clear();
  }
  // Pushes every in-flight send on (between a forward's blocks).
  void progress() {
    for (auto& p : pending_) p.second->test();
    while (!pending_.empty() && pending_.front().second->test()) pending_.pop_front();
  }

 private:
  comm::Communicator& c_;
  std::deque<std::pair<Tensor, std::unique_ptr<comm::Request>>> pending_;
};

constexpr int kHiddenTag = 1 << 20;  // + message index
constexpr int kLatentTag = 2 << 20;
constexpr int kShapeTag = 3 << 20;
constexpr int kClockTag = 4 << 20;  // the micro-step clock beside each patch message

// The one shape exchange before the pipeline: the shapes of every message a
// rank will send go to the rank that will receive them, which compares them
// with the shapes it sized its receive buffers from. Ranks started with
// different models, sizes or flags then stop with one clear line instead of
// hanging or receiving a truncated message. Every rank posts its sends before
// checking what it receives, so that each receiver of a mismatch finds it.
std::vector<int64_t> flatten(const std::vector<Shape>& shapes) {
  std::vector<int64_t> v;
  for (const Shape& sh : shapes) {
    v.push_back(static_cast<int64_t>(sh.size()));
    v.insert(v.end(), sh.begin(), sh.end());
  }
  return v;
}

struct ShapeSend {
  std::vector<int64_t> body_data;
  int64_t count = 0;
  std::unique_ptr<comm::Request> head, body;
  void post(comm::Communicator& c, const std::vector<Shape>& shapes, int to, int tag) {
    body_data = flatten(shapes);
    count = static_cast<int64_t>(body_data.size());
    head = c.isend(&count, sizeof count, comm::Type::kByte, to, tag);
    body = c.isend(body_data.data(), body_data.size() * sizeof(int64_t), comm::Type::kByte, to,
                   tag + 1);
  }
  void wait() {
    if (head) head->wait();
    if (body) body->wait();
  }
};

void check_shapes(comm::Communicator& c, const std::vector<Shape>& want, int from, int tag,
                  const char* what) {
  int64_t m = 0;
  c.recv(&m, sizeof m, comm::Type::kByte, from, tag);
  XDIT_CHECK(m >= 0 && m < (1 << 20), "PipeFusion stage ", c.rank(), ": a bad shape count ", m,
             " from stage ", from);
  std::vector<int64_t> got(static_cast<size_t>(m));
  c.recv(got.data(), got.size() * sizeof(int64_t), comm::Type::kByte, from, tag + 1);
  // Unflatten what the sender will send: [rank, dims...] per message.
  std::vector<Shape> sent;
  for (size_t i = 0; i < got.size();) {
    const int64_t rank = got[i];
    XDIT_CHECK(rank >= 0 && i + 1 + static_cast<size_t>(rank) <= got.size(), "PipeFusion stage ",
               c.rank(), ": a malformed shape list from stage ", from);
    sent.emplace_back(got.begin() + static_cast<std::ptrdiff_t>(i + 1),
                      got.begin() + static_cast<std::ptrdiff_t>(i + 1 + rank));
    i += 1 + static_cast<size_t>(rank);
  }
  XDIT_CHECK(sent.size() == want.size(), "PipeFusion stage ", c.rank(), " expects ", want.size(),
             " messages of ", what, " from stage ", from, ", which will send ", sent.size(),
             ": start every rank with the same model, image size and parallel flags");
  for (size_t i = 0; i < sent.size(); ++i)
    XDIT_CHECK(want[i] == sent[i], "PipeFusion stage ", c.rank(), " expects ", what, " ",
               shape_str(want[i]), " from stage ", from, ", which will send ", shape_str(sent[i]),
               " (message ", i,
               "): start every rank with the same model, image size and parallel flags");
}

}  // namespace

Tensor Denoiser::pipefusion_loop() {
  parallel::Mesh& mesh = *rt_.mesh();
  parallel::PipeFusionAttention* pipefusion = rt_.pipefusion();
  Tensor& latents = latents_;
  const LoopInputs& li = li_;
  comm::Communicator& pp = mesh.pp_group();
  const auto& pc = mesh.config();
  const int P = pc.pipefusion_parallel_degree, s = mesh.coord().pp;
  const bool first = s == 0, last = s == P - 1;
  const int64_t C = latents.dim(1), w = latents.dim(4);
  const models::DiTSpec spec = model_.spec();
  // gh: token rows (frames × patch rows), the rows patches and shares are made of.
  const int64_t p = spec.patch, gw = w / p, gh = token_rows_, d = spec.hidden, MB = li.batch;
  const auto patches = pc.patches(gh);
  const int64_t M = static_cast<int64_t>(patches.size());
  const int64_t requested = pc.num_pipeline_patch > 0 ? pc.num_pipeline_patch : P;
  if (M != requested)
    XDIT_WARN("--num_pipeline_patch ", requested, " does not fit the ", gh, " token rows: using ",
              M);
  const auto& ts = sched_.timesteps();
  // Steps [b, S) of the scheduler's; the first `warmup` of them run whole.
  const int64_t b = begin_, S = end_;
  const int64_t warmup = b + pc.sync_steps(S - b);  // all of them under --sync_mode full_sync
  pf_stats_ = {};
  for (StepHook* hook : hooks_) hook->begin_loop(*this);

  Shape in_shape = latents.shape();
  in_shape[0] = MB;
  Tensor model_in = Tensor::empty(in_shape);
  auto fill_model_in = [&] {
    const int64_t plane = latents.numel() / li.prompts;
    for (int64_t k = 0; k < MB; ++k)
      std::memcpy(model_in.data<float>() + k * plane,
                  latents.data<float>() + (k % li.prompts) * plane, static_cast<size_t>(plane) * 4);
  };
  auto inputs = [&](int64_t step, int64_t r0, int64_t r1) {
    return li.at(model_in, ts[static_cast<size_t>(step)], r0, r1);
  };
  // The last stage: noise for rows [r0, r1) from the stage output, then the step.
  auto finish_rows = [&](const Tensor& out, int64_t r0, int64_t r1, int64_t step) {
    Tensor noise = noise_prediction(out, r0, r1, nullptr, ts[static_cast<size_t>(step)]);
    Tensor rows = parallel::take_rows(latents, r0 * p, r1 * p);
    sched_.step(noise.data<float>(), rows.data<float>(), latents.shape(), r0 * p, r1 * p);
    parallel::put_rows(latents, rows, r0 * p);
    return rows;
  };
  // The text-stream tokens every hidden-state message carries beside the rows.
  const int64_t text = model_.stream_text_tokens(li.at(latents, 0, 0, 0));

  // The shapes of every message between the stages, in order: hidden states
  // (this SP rank's rows) for the warm-up and then each patch, and latent rows
  // (the last stage to stage 0) likewise. The receive buffers are sized from
  // them, after the shape exchange has checked them against the sender's.
  std::vector<Shape> hidden_shapes, latent_shapes;
  {
    const auto [w0, w1] = rt_.my_rows(0, gh);
    hidden_shapes.push_back({MB, text + (w1 - w0) * gw, d});
    latent_shapes.push_back(latents.shape());
    for (const auto& [r0, r1] : patches) {
      const auto [l0, l1] = rt_.my_rows(r0, r1);
      hidden_shapes.push_back({MB, text + (l1 - l0) * gw, d});
      latent_shapes.push_back({li.prompts, C, (r1 - r0) * p, w});
    }
  }
  if (P > 1) {
    ShapeSend hidden_out, latent_out;
    if (!last) hidden_out.post(pp, hidden_shapes, s + 1, kShapeTag);
    if (last) latent_out.post(pp, latent_shapes, 0, kShapeTag + 2);
    if (!first) check_shapes(pp, hidden_shapes, s - 1, kShapeTag, "hidden states");
    if (first) check_shapes(pp, latent_shapes, P - 1, kShapeTag + 2, "latent rows");
    hidden_out.wait();
    latent_out.wait();
  }

  Outbox outbox(pp);
  // Between the blocks of each forward, the in-flight messages are tested
  // (PipeFusionAttention::set_progress); cleared before they go out of scope.
  struct ProgressScope {
    parallel::PipeFusionAttention* pf;
    ~ProgressScope() { pf->set_progress({}); }
  } progress_scope{pipefusion};
  pipefusion->set_progress([&outbox] { outbox.progress(); });
  int msg = 0;                            // message index, the same sequence on every stage
  for (int64_t i = b; i < warmup; ++i) {  // warm-up: the whole image, synchronously
    const auto t0 = std::chrono::steady_clock::now();
    const StepInfo info{i - b, S - b, ts[static_cast<size_t>(i)]};
    for (StepHook* hook : hooks_) hook->before_step(info);
    pipefusion->set_window(gh * gw, 0, gh * gw);
    fill_model_in();
    const auto [w0, w1] = rt_.my_rows(0, gh);
    const models::DiTInputs in = inputs(i, w0, w1);
    Tensor hidden;
    if (!first) {
      trace::Span span("recv warm-up " + std::to_string(i), "comm");
      hidden = Tensor::empty(hidden_shapes[0]);
      pp.recv(hidden.raw(), static_cast<size_t>(hidden.numel()), comm::Type::kF32, s - 1,
              kHiddenTag + msg);
    }
    Tensor out;
    {
      trace::Span span("warm-up step " + std::to_string(i), "compute");
      out = model_.forward(in, first ? nullptr : &hidden);
    }
    if (!last) {
      outbox.send(out, s + 1, kHiddenTag + msg);
    } else {
      finish_rows(out, 0, gh, i);
    }
    ++msg;
    if (last) check_finite_latents(latents, i + 1, static_cast<int64_t>(ts.size()));
    if (P > 1) {  // stage 0 needs the updated latents for the next step
      if (last) outbox.send(latents.clone(), 0, kLatentTag + static_cast<int>(i));
      if (first)
        pp.recv(latents.raw(), static_cast<size_t>(latents.numel()), comm::Type::kF32, P - 1,
                kLatentTag + static_cast<int>(i));
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (StepHook* hook : hooks_) hook->after_step(info, sec);
  }

  // The patch pipeline. Receive buffers are sized once per patch. Beside each
  // patch message travels the sender's micro-step (a Lamport clock: a patch
  // forward's micro-step is one more than the later of this stage's previous
  // one and the sender's), so each stage knows where in the M·S + P − 1
  // micro-step schedule its forwards fell (exposed for tests, and in the trace).
  std::vector<Tensor> hidden_in(static_cast<size_t>(M)), latent_in(static_cast<size_t>(M)),
      clock_in(static_cast<size_t>(M));
  int64_t clock = 0;
  for (int64_t j = 0; j < M; ++j) {
    clock_in[static_cast<size_t>(j)] = Tensor::empty({1});
    if (!first)
      hidden_in[static_cast<size_t>(j)] = Tensor::empty(hidden_shapes[static_cast<size_t>(1 + j)]);
    if (first)
      latent_in[static_cast<size_t>(j)] = Tensor::empty(latent_shapes[static_cast<size_t>(1 + j)]);
  }
  // The receive this stage needs for (step i, patch j), posted ahead of time.
  struct Pending {
    std::unique_ptr<comm::Request> data, clock;
  };
  auto post = [&](int64_t i, int64_t j, int m) -> Pending {
    if (i >= S) return {};
    float* c = clock_in[static_cast<size_t>(j)].data<float>();
    if (!first) {
      Tensor& b = hidden_in[static_cast<size_t>(j)];
      return {pp.irecv(b.raw(), static_cast<size_t>(b.numel()), comm::Type::kF32, s - 1,
                       kHiddenTag + m),
              pp.irecv(c, 1, comm::Type::kF32, s - 1, kClockTag + m)};
    }
    if (i > warmup &&
        P > 1) {  // stage 0: patch j's rows as the last stage updated them in step i−1
      Tensor& b = latent_in[static_cast<size_t>(j)];
      const int tag = static_cast<int>((i - 1) * M + j) + 1024;
      return {pp.irecv(b.raw(), static_cast<size_t>(b.numel()), comm::Type::kF32, P - 1,
                       kLatentTag + tag),
              pp.irecv(c, 1, comm::Type::kF32, P - 1, kClockTag + (1 << 19) + tag)};
    }
    return {};
  };
  // The micro-step as a 1-element message (exact in f32 below 2^24).
  auto clock_message = [](int64_t step) {
    Tensor t = Tensor::empty({1});
    t.data<float>()[0] = static_cast<float>(step);
    return t;
  };
  Pending pending = post(warmup, 0, msg);
  pipefusion->set_progress([&outbox, &pending] {
    outbox.progress();
    if (pending.data) pending.data->test();
    if (pending.clock) pending.clock->test();
  });
  for (int64_t i = warmup; i < S; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepInfo info{i - b, S - b, ts[static_cast<size_t>(i)]};
    for (StepHook* hook : hooks_) hook->before_step(info);
    for (int64_t j = 0; j < M; ++j) {
      const auto [r0, r1] = patches[static_cast<size_t>(j)];
      Pending mine = std::move(pending);
      const int64_t ni = j + 1 < M ? i : i + 1, nj = j + 1 < M ? j + 1 : 0;
      pending = post(ni, nj, msg + 1);  // the next receive, before computing this patch
      int64_t sender = 0;
      if (mine.data) {
        trace::Span span("wait patch " + std::to_string(j) + " step " + std::to_string(i), "comm");
        mine.data->wait();
        mine.clock->wait();
        sender = static_cast<int64_t>(clock_in[static_cast<size_t>(j)].data<float>()[0]);
      }
      clock = std::max(clock, sender) + 1;
      if (pf_stats_.first_micro_step == 0) pf_stats_.first_micro_step = clock;
      pf_stats_.last_micro_step = clock;
      if (first && i > warmup && P > 1)
        parallel::put_rows(latents, latent_in[static_cast<size_t>(j)], r0 * p);
      pipefusion->set_window(gh * gw, r0 * gw, r1 * gw);
      if (first) fill_model_in();
      const auto [l0, l1] = rt_.my_rows(r0, r1);
      const models::DiTInputs in = inputs(i, l0, l1);
      Tensor out;
      {
        trace::Span span("patch " + std::to_string(j) + " step " + std::to_string(i) +
                             " (micro-step " + std::to_string(clock) + ")",
                         "compute");
        out = model_.forward(in, first ? nullptr : &hidden_in[static_cast<size_t>(j)]);
      }
      ++pf_stats_.patch_forwards;
      if (!last) {
        trace::Span span("send patch " + std::to_string(j), "comm");
        outbox.send(out, s + 1, kHiddenTag + msg);
        outbox.send(clock_message(clock), s + 1, kClockTag + msg);
      } else {
        trace::Span span("scheduler patch " + std::to_string(j), "scheduler");
        Tensor rows = finish_rows(out, r0, r1, i);
        if (P > 1 && i + 1 < S) {
          const int tag = static_cast<int>(i * M + j) + 1024;
          outbox.send(rows, 0, kLatentTag + tag);
          outbox.send(clock_message(clock), 0, kClockTag + (1 << 19) + tag);
        }
      }
      ++msg;
    }
    if (last) check_finite_latents(latents, i + 1, static_cast<int64_t>(ts.size()));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (StepHook* hook : hooks_) hook->after_step(info, sec);
  }
  outbox.drain();
  // The last stage holds the final latents; every rank returns them.
  pp.broadcast(latents.raw(), static_cast<size_t>(latents.numel()), comm::Type::kF32, P - 1);
  return latents;
}

}  // namespace xdit::pipeline
