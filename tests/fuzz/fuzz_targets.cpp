#include "fuzz_targets.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/clip.h"
#include "models/flux.h"
#include "models/pixart.h"
#include "models/qwen_image.h"
#include "models/qwen_text.h"
#include "models/sd3.h"
#include "models/t5.h"
#include "models/vae.h"
#include "models/wan.h"
#include "models/wan_vae.h"
#include "models/zimage_config.h"
#include "pipeline/memory_estimate.h"
#include "schedulers/scheduler_config.h"
#include "serve/http_server.h"

namespace xdit::fuzz {

void safetensors_bytes(const uint8_t* data, size_t size) {
  std::shared_ptr<uint8_t[]> copy(new uint8_t[size + 1]);
  if (size > 0) std::memcpy(copy.get(), data, size);
  try {
    io::SafeTensorsFile f(std::shared_ptr<const void>(copy, copy.get()), size, "fuzz.safetensors");
    for (const auto& [name, e] : f.entries()) {
      if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16") continue;
      Tensor t = f.get(name);
      count_nonfinite(t);
      if (t.numel() <= (1 << 16)) t.to(DType::kF32);
    }
  } catch (const Error&) {
  }
}

void gguf_bytes(const uint8_t* data, size_t size) {
  std::shared_ptr<uint8_t[]> copy(new uint8_t[size + 1]);
  if (size > 0) std::memcpy(copy.get(), data, size);
  try {
    io::GgufFile f(std::shared_ptr<const void>(copy, copy.get()), size, "fuzz.gguf");
    for (const auto& [name, t] : f.tensors())
      if (shape_numel(t.shape) <= (1 << 16)) count_nonfinite(f.dequantized(name));
  } catch (const Error&) {
  }
}

namespace {
template <class F>
void guarded(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}
}  // namespace

void config_bytes(const uint8_t* data, size_t size) {
  io::Json j;
  try {
    j = io::parse_json_text(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const Error&) {
    return;
  }
  guarded([&] {
    const auto c = models::PixArtConfig::from_json(j, "transformer/config.json");
    c.weight_specs({0, c.num_layers / 2, true, false});
    pipeline::MemoryQuery q;
    q.run_height = q.out_height = c.sample_size * 8;
    q.run_width = q.out_width = c.sample_size * 8;
    q.text_tokens = 120;
    pipeline::estimate_memory(c, q).peak();
  });
  guarded([&] {
    const auto c = models::FluxConfig::from_json(j, "transformer/config.json");
    c.weight_specs();
    c.parameter_count();
  });
  guarded([&] {
    const auto c = models::SD3Config::from_json(j, "transformer/config.json");
    c.weight_specs({0, c.num_layers / 2, true, false});
    c.parameter_count();
    pipeline::MemoryQuery q;
    q.run_height = q.out_height = c.sample_size * 8;
    q.run_width = q.out_width = c.sample_size * 8;
    q.text_tokens = 333;
    pipeline::estimate_memory(c.spec(), c.parameter_count(), q).peak();
  });
  guarded([&] {
    const auto c = models::ClipTextConfig::from_json(j, "text_encoder/config.json");
    c.weight_specs();
    c.parameter_count();
  });
  guarded([&] {
    const auto c = models::T5Config::from_json(j, "text_encoder/config.json");
    c.weight_specs("encoder.embed_tokens.weight");
    c.parameter_count();
    c.encoder_flops(2, 120);
    for (int64_t rp : {-1000, -7, 0, 3, 130, 5000})
      models::t5_relative_bucket(rp, c.relative_attention_num_buckets,
                                 c.relative_attention_max_distance);
  });
  guarded([&] {
    const auto c = models::VaeConfig::from_json(j, "vae/config.json");
    c.decoder_parameter_count();
    c.decoder_flops(1, 16, 24);
    c.scale_factor();
  });
  guarded([&] {
    const auto c = models::WanConfig::from_json(j, "transformer/config.json");
    c.weight_specs({0, c.num_layers / 2, true, false});
    c.parameter_count();
    c.rope_axes();
  });
  guarded([&] {
    const auto c = models::WanVaeConfig::from_json(j, "vae/config.json");
    c.decoder_weight_specs();
    c.frames(21);
  });
  guarded([&] {
    const auto c = models::ZImageConfig::from_json(j, "transformer/config.json");
    c.weight_specs({0, c.blocks() / 2, true, false});
    c.parameter_count();
    pipeline::MemoryQuery q;
    q.run_height = q.out_height = q.run_width = q.out_width = 1024;
    q.text_tokens = 512;
    pipeline::estimate_memory(c.spec(), c.parameter_count(), q).peak();
  });
  guarded([&] {
    const auto c = models::QwenImageConfig::from_json(j, "transformer/config.json");
    c.weight_specs({0, c.num_layers / 2, true, false});
    c.parameter_count();
    pipeline::MemoryQuery q;
    q.run_height = q.out_height = q.run_width = q.out_width = 1024;
    q.text_tokens = 512;
    pipeline::estimate_memory(c.spec(), c.parameter_count(), q).peak();
  });
  guarded([&] {
    const auto c = models::QwenTextConfig::from_json(j, "text_encoder/config.json");
    c.weight_specs(c.num_layers - 1);
    c.parameter_count();
    c.flops(2, 200, c.num_layers);
    pipeline::MemoryQuery q;
    q.qwen = &c;
    q.qwen_layers = c.num_layers - 1;
    q.text_tokens = 512;
    pipeline::estimate_memory(models::ZImageConfig::turbo().spec(), 1000, q).peak();
  });
  guarded([&] {
    const auto cfg = schedulers::SchedulerConfig::from_json(j, "scheduler/scheduler_config.json");
    const auto s = cfg.make();
    schedulers::TimestepHints hints;
    if (cfg.flow_match() != nullptr) hints.mu = cfg.flow_match()->mu(4096);
    for (int64_t n : {1, 2, 7, 20, 1000}) guarded([&] { s->set_timesteps(n, hints); });
  });
}

namespace {

// A finding: libFuzzer reports the abort with the input.
void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz finding: %s\n", what);
    std::abort();
  }
}

// A refusal as the server sends it: a 4xx with a JSON error body.
void check_refusal(const serve::HttpResponse& r) {
  require(r.status >= 400 && r.status < 500, "a refusal that is not a 4xx");
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  require(j.is_object() && j.contains("error"), "a refusal whose body is not the JSON error");
}

void body_through_schema(serve::Endpoint e, const std::string& body) {
  try {
    serve::parse_request_body(e, body);
  } catch (const serve::BadRequest& b) {
    check_refusal(serve::error_response(b.status(), b.what(), b.field()));
  } catch (const Error& err) {
    check_refusal(serve::error_response(400, err.what()));
  }
}

}  // namespace

void http_request_bytes(const uint8_t* data, size_t size) {
  static const std::vector<serve::Route> routes = [] {
    std::vector<serve::Route> r;
    for (const auto& [method, path] :
         std::vector<std::pair<std::string, std::string>>{{"POST", "/generate"},
                                                          {"POST", "/v1/images/generations"},
                                                          {"GET", "/health"},
                                                          {"GET", "/v1/models"},
                                                          {"GET", "/metrics"}})
      r.push_back({method, path, method == "POST", path == "/health", nullptr});
    return r;
  }();
  const serve::HttpLimits limits;  // the server's defaults
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const serve::HttpParse p = serve::parse_http_request(bytes, limits, routes, "fuzz-key");
  if (p.state == serve::HttpParse::State::kRefused) check_refusal(p.refusal);
  if (p.state == serve::HttpParse::State::kRequest) {
    require(p.request.body.size() <= limits.max_body_bytes, "a body over the limit was read");
    if (p.request.path == "/generate")
      body_through_schema(serve::Endpoint::kGenerate, p.request.body);
    if (p.request.path == "/v1/images/generations")
      body_through_schema(serve::Endpoint::kImages, p.request.body);
  }
  body_through_schema(serve::Endpoint::kGenerate, bytes);
  body_through_schema(serve::Endpoint::kImages, bytes);
}

}  // namespace xdit::fuzz
