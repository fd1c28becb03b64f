// xdit serve, by concern: its flags and start-up (serve.cpp), rank 0's HTTP
// service (serve_http.cpp), and the rounds every rank runs (serve_ranks.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "app/parallel_options.h"
#include "app/weight_options.h"
#include "comm/communicator.h"
#include "nn/lora.h"
#include "parallel/config.h"
#include "pipeline/pipeline.h"
#include "pipeline/request.h"
#include "serve/lora_dir.h"
#include "serve/output_root.h"

namespace xdit::app {

struct ServeOptions {
  ParallelOptions par;
  WeightOptions weights;  // --transformer, --weights_dtype
  std::string model, dtype = "bf16", host = "127.0.0.1", device = "cpu";
  int port = 6000;
  int max_queue = 16;
  double request_timeout = 600;
  double header_timeout = 10, body_timeout = 30;  // per connection, whole phases
  int max_connections = 64;
  std::string api_key_file;
  std::string api_key;  // read from api_key_file at start
  int threads = 0;
  bool openapi = false;
  // The only folder the service writes into (save_disk_path is relative to
  // it); empty: the service writes no files. Opened at start into
  // output_root.
  std::string output_dir;
  std::shared_ptr<const serve::OutputRoot> output_root = std::make_shared<serve::OutputRoot>();
  // The folder of the LoRAs a request may name (serve/lora_dir.h); empty:
  // none. Checked at start into lora_root.
  std::string lora_dir;
  size_t max_lora_bytes = nn::LoraFile::kDefaultMaxBytes;  // --max_lora_bytes
  std::shared_ptr<const serve::LoraDir> lora_root = std::make_shared<serve::LoraDir>();
  // Each request's limits (0: none); defaults a single machine serves in
  // bounded time.
  pipeline::RequestLimits limits{kDefaultMaxPixels, kDefaultMaxSteps, kDefaultMaxFrames,
                                 kDefaultMaxBatch};
  static constexpr int64_t kDefaultMaxPixels = 2048 * 2048;
  static constexpr int64_t kDefaultMaxSteps = 100;
  static constexpr int64_t kDefaultMaxFrames = 161;  // twice Wan's 81, 10 s at 16 fps
  static constexpr int64_t kDefaultMaxBatch = 4;
};

// --- serve_http.cpp: rank 0's HTTP service -----------------------------------

// SIGTERM / SIGINT: stop taking requests, finish the running ones, exit 0.
// A client that hangs up before its answer does not end the process.
void install_signals();

// Why `host:port` cannot be bound now, or "" when it can: checked before the
// weights load so that a port in use is one line at start, not after minutes
// of loading.
std::string bind_error(const std::string& host, int port);

// The key in `path` (its first line; leading and trailing blanks dropped),
// checked from stat before it is read: a regular file of at most 4 KiB
// holding one printable line. Throws xdit::Error saying what is wrong.
std::string read_api_key(const std::string& path);

// Rank 0 after every rank has loaded: binds, then serves `pipe` until SIGTERM
// (requests checked on `validator`, a weightless pipeline of the same model);
// `model_id` is the model's name in answers. Returns the exit code.
int serve_http(const ServeOptions& o, pipeline::Pipeline& pipe, pipeline::Pipeline& validator,
               parallel::Mesh& mesh, const std::string& model_id);

// --- serve_ranks.cpp: the rounds every rank runs -------------------------------

// Group g of the mesh's data-parallel groups runs plans[g] (none when
// there are fewer); every rank returns every plan's result.
std::vector<pipeline::ImageResult> run_round(pipeline::Pipeline& pipe, parallel::Mesh& mesh,
                                             const std::vector<pipeline::Plan>& plans);

// Rank 0 → every other rank, point to point: run this round (the plans as
// JSON, pipeline::Plan::to_json), or stop.
void send_round(comm::Communicator& world, const std::vector<pipeline::Plan>& plans);
void send_stop(comm::Communicator& world);

// Every rank but 0: runs the rounds rank 0 sends until it says stop; returns
// the exit code.
int follow(pipeline::Pipeline& pipe, parallel::Mesh& mesh);

}  // namespace xdit::app
