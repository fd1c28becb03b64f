// xdit serve: the rounds every rank runs. The main thread of rank 0 is the
// only one that talks to the other ranks: it sends each round to every rank
// (point to point, so idle ranks sleep instead of spinning in a collective),
// and every rank runs its data-parallel group's request through the same
// Pipeline as `xdit generate`; the groups' images come back to every rank.
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "app/rank_agreement.h"
#include "app/serve.h"
#include "app/startup.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "pipeline/distributed.h"
#include "serve/request_schema.h"

namespace xdit::app {

using nlohmann::json;

namespace {

// Rank 0 → every other rank: one command (a JSON text), point to point.
constexpr int kCommandTag = 7001;
void send_command(comm::Communicator& w, const std::string& text) {
  const uint64_t n = text.size();
  for (int r = 1; r < w.size(); ++r) {
    w.send(&n, sizeof n, comm::Type::kByte, r, kCommandTag);
    w.send(text.data(), n, comm::Type::kByte, r, kCommandTag + 1);
  }
}

// A follower's wait for rank 0's next command: polled with short sleeps,
// so an idle server costs no CPU on the other ranks.
std::string receive_command(comm::Communicator& w) {
  uint64_t n = 0;
  auto req = w.irecv(&n, sizeof n, comm::Type::kByte, 0, kCommandTag);
  while (!req->test()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::string text(n, '\0');
  w.recv(text.data(), n, comm::Type::kByte, 0, kCommandTag + 1);
  return text;
}

}  // namespace

std::vector<pipeline::ImageResult> run_round(pipeline::Pipeline& pipe, parallel::Mesh& mesh,
                                             const std::vector<pipeline::Plan>& plans) {
  // Every rank runs what rank 0 sent: checked per round (two small messages).
  check_ranks_agree(mesh.world(), plan_digests(plans), "received a different",
                    "the ranks disagree on a request (a bug: please report it)");
  // Before any page of the weights is touched: a model file truncated or
  // rewritten under the server would end it by SIGBUS, or mix two models.
  const std::vector<std::string> changed = io::changed_mapped_files();
  XDIT_CHECK(changed.empty(), "the model file ", changed.empty() ? "" : changed[0],
             " changed on disk while xdit serve was running (truncated or rewritten in place): "
             "requests are refused until the server is restarted (replace model files by "
             "renaming new ones into place to keep a running server safe)");
  return pipeline::generate_groups(pipe, mesh, plans, maybe_inject_fault);
}

void send_round(comm::Communicator& world, const std::vector<pipeline::Plan>& plans) {
  json cmd = {{"op", "run"}, {"plans", json::array()}};
  for (const auto& p : plans) cmd["plans"].push_back(p.to_json());
  send_command(world, cmd.dump());
}

void send_stop(comm::Communicator& world) {
  send_command(world, json{{"op", "stop"}}.dump());
}

int follow(pipeline::Pipeline& pipe, parallel::Mesh& mesh) {
  for (;;) {
    const json cmd = json::parse(receive_command(mesh.world()));
    if (cmd.at("op") == "stop") return 0;
    std::vector<pipeline::Plan> plans;
    for (const json& p : cmd.at("plans")) plans.push_back(pipeline::Plan::from_json(p));
    run_round(pipe, mesh, plans);
  }
}

}  // namespace xdit::app
