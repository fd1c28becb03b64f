// The service's request schema, queue and wire helpers, in process: every
// malformed-body class is refused with the field it names, good bodies turn
// into the ImageRequest `xdit generate` would build, the committed OpenAPI
// file is the one the field tables make, and the queue is a bounded FIFO.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "serve/job_queue.h"
#include "serve/metrics.h"
#include "serve/private_paths.h"
#include "serve/request_schema.h"
#include "serve/startup_line.h"

namespace xdit::serve {
namespace {

using nlohmann::json;

// The status and field of the refusal of `body`, or {0, ""} when accepted.
std::pair<int, std::string> refusal(Endpoint e, const std::string& body) {
  try {
    parse_request(e, body);
  } catch (const BadRequest& b) {
    EXPECT_FALSE(std::string(b.what()).empty());
    EXPECT_EQ(std::string(b.what()).find('\n'), std::string::npos) << "one line: " << b.what();
    return {b.status(), b.field()};
  }
  return {0, ""};
}

TEST(ServeSchema, GenerateBodyBecomesTheRequestGenerateBuilds) {
  const ServeRequest r =
      parse_request(Endpoint::kGenerate,
                    R"({"prompt": "a red fox", "num_inference_steps": 7, "seed": 1234, "cfg": 3.25,
          "height": 96, "width": 160, "negative_prompt": "blur"})");
  ASSERT_EQ(r.image.prompts, std::vector<std::string>{"a red fox"});
  EXPECT_EQ(r.image.num_inference_steps, 7);
  EXPECT_EQ(r.image.seed, 1234u);
  EXPECT_DOUBLE_EQ(r.image.guidance_scale, 3.25);
  EXPECT_EQ(r.image.height, 96);
  EXPECT_EQ(r.image.width, 160);
  EXPECT_EQ(r.image.negative_prompt.value_or(""), "blur");
  EXPECT_FALSE(r.save_disk_path.has_value());
  EXPECT_TRUE(r.image.resolution_binning);  // as `xdit generate` without --no_resolution_binning
  EXPECT_FALSE(r.image.cache.on());
  // The step cache, per request, on both endpoints.
  for (const Endpoint e : {Endpoint::kGenerate, Endpoint::kImages}) {
    const ServeRequest c =
        parse_request(e, R"({"prompt": "x", "cache": "fbcache", "cache_threshold": 0.15})");
    EXPECT_EQ(c.image.cache.kind, pipeline::CacheKind::kFirstBlock);
    EXPECT_EQ(c.image.cache.threshold, std::optional<double>(0.15));
    const ServeRequest t = parse_request(e, R"({"prompt": "x", "cache": "teacache"})");
    EXPECT_EQ(t.image.cache.kind, pipeline::CacheKind::kTeaCache);
    EXPECT_FALSE(t.image.cache.threshold.has_value());  // the planner's default, 0.12
  }
}

TEST(ServeSchema, OmittedFieldsKeepThePipelineDefaults) {
  const ServeRequest r = parse_request(Endpoint::kGenerate, R"({"prompt": "x"})");
  const pipeline::ImageRequest d;
  EXPECT_EQ(r.image.num_inference_steps, pipeline::kDefaultSteps);
  EXPECT_EQ(r.image.guidance_scale, pipeline::kDefaultGuidance);
  EXPECT_EQ(r.image.guidance_scale_2, pipeline::kDefaultGuidance);
  EXPECT_EQ(r.image.height, 0);
  // Wan2.2's second expert's guidance, beside cfg.
  EXPECT_DOUBLE_EQ(parse_request(Endpoint::kGenerate, R"({"prompt": "x", "guidance_scale_2": 2.5})")
                       .image.guidance_scale_2,
                   2.5);
  // True CFG (FLUX.1, Qwen-Image) and Z-Image's CFG limits: the model's
  // default, or as given.
  EXPECT_EQ(r.image.true_cfg_scale, pipeline::kDefaultGuidance);
  EXPECT_EQ(r.image.cfg_truncation, 1.0);
  EXPECT_EQ(r.image.cfg_normalization, 0.0);
  const auto limits =
      parse_request(Endpoint::kGenerate, R"({"prompt": "x", "true_cfg_scale": 4.5, )"
                                         R"("cfg_truncation": 0.25, "cfg_normalization": 1.5})");
  EXPECT_EQ(limits.image.true_cfg_scale, 4.5);
  EXPECT_EQ(limits.image.cfg_truncation, 0.25);
  EXPECT_EQ(limits.image.cfg_normalization, 1.5);
  EXPECT_EQ(r.image.seed, d.seed);
  EXPECT_FALSE(r.image.negative_prompt.has_value());
  // null reads as absent
  EXPECT_EQ(parse_request(Endpoint::kGenerate, R"({"prompt": "x", "seed": null})").image.seed,
            d.seed);
}

TEST(ServeSchema, OpenAIBodyTakesSizeAndNCopiesOfThePrompt) {
  const ServeRequest r =
      parse_request(Endpoint::kImages,
                    R"({"prompt": "p", "n": 3, "size": "160x96", "response_format": "b64_json",
          "model": "whatever", "user": "u", "guidance_scale": 2, "num_inference_steps": 5,
          "seed": -1})");
  EXPECT_EQ(r.image.prompts, std::vector<std::string>(3, "p"));
  EXPECT_EQ(r.image.width, 160);
  EXPECT_EQ(r.image.height, 96);
  EXPECT_DOUBLE_EQ(r.image.guidance_scale, 2.0);
  EXPECT_EQ(r.image.num_inference_steps, 5);
  EXPECT_EQ(r.image.seed, ~uint64_t{0});  // torch: -1 wraps to 2^64 - 1
  EXPECT_EQ(
      parse_request(Endpoint::kImages, R"({"prompt":"p","seed":18446744073709551615})").image.seed,
      ~uint64_t{0});
}

TEST(ServeSchema, EveryMalformedClassIsRefusedNamingTheField) {
  using P = std::pair<int, std::string>;
  const Endpoint g = Endpoint::kGenerate, o = Endpoint::kImages;
  // bad JSON, not an object
  EXPECT_EQ(refusal(g, R"({"prompt": "x",)"), P(400, ""));
  EXPECT_EQ(refusal(g, "\xff\xfe"), P(400, ""));
  EXPECT_EQ(refusal(g, R"(["prompt"])"), P(400, ""));
  EXPECT_EQ(refusal(g, ""), P(400, ""));
  // wrong types
  EXPECT_EQ(refusal(g, R"({"prompt": 5})"), P(400, "prompt"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "num_inference_steps": "20"})"),
            P(400, "num_inference_steps"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "num_inference_steps": 2.5})"),
            P(400, "num_inference_steps"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "cfg": "high"})"), P(400, "cfg"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "seed": 1.5})"), P(400, "seed"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "seed": 1e30})"), P(400, "seed"));
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "n": true})"), P(400, "n"));
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "size": 512})"), P(400, "size"));
  // missing prompt
  EXPECT_EQ(refusal(g, R"({"num_inference_steps": 3})"), P(400, "prompt"));
  EXPECT_EQ(refusal(o, R"({})"), P(400, "prompt"));
  EXPECT_EQ(refusal(o, R"({"prompt": null})"), P(400, "prompt"));
  // absurd sizes
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "height": 1000000})"), P(400, "height"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "width": 0})"), P(400, "width"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "width": -64})"), P(400, "width"));
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "size": "99999x64"})"), P(400, "size"));
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "size": "64by64"})"), P(400, "size"));
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "size": "0x64"})"), P(400, "size"));
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "n": 11})"), P(400, "n"));
  // negative steps, guidance out of range
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "num_inference_steps": -3})"),
            P(400, "num_inference_steps"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "num_inference_steps": 0})"),
            P(400, "num_inference_steps"));
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "guidance_scale": -1})"), P(400, "guidance_scale"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "guidance_scale_2": -1})"), P(400, "guidance_scale_2"));
  // unknown fields (each endpoint's own: cfg is /generate's, n is OpenAI's)
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "steps": 3})"), P(400, "steps"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "n": 2})"), P(400, "n"));
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "cfg": 2})"), P(400, "cfg"));
  // step caches: an unknown one, a threshold out of range
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "cache": "fastcache"})"), P(400, "cache"));
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "cache_threshold": -0.5})"), P(400, "cache_threshold"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "cache_threshold": 0})"), P(400, "cache_threshold"));
  EXPECT_EQ(refusal(g, R"({"prompt": "x", "taylorseer_order": 4})"), P(400, "taylorseer_order"));
  // enum: url images are not served
  EXPECT_EQ(refusal(o, R"({"prompt": "x", "response_format": "url"})"), P(400, "response_format"));
  // a prompt over the limit, a body over the limit
  EXPECT_EQ(refusal(g, json{{"prompt", std::string(20000, 'a')}}.dump()), P(400, "prompt"));
  EXPECT_EQ(refusal(g, json{{"prompt", std::string(kMaxBodyBytes, 'a')}}.dump()), P(413, ""));
}

// A plan as rank 0 sends it: every field set to a value unlike its default.
json plan_json() {
  return {{"prompts", {"x", "y", "z"}},
          {"negative_prompt", "no"},
          {"max_sequence_length", 99},
          {"height", 200},
          {"width", 120},
          {"run_height", 192},
          {"run_width", 128},
          {"num_frames", 13},
          {"latent_frames", 4},
          {"num_inference_steps", 3},
          {"guidance_scale", 2.25},
          {"guidance_scale_2", 1.75},
          {"true_cfg_scale", 3.5},
          {"cfg_truncation", 0.625},
          {"cfg_normalization", 1.25},
          {"skip_layer_guidance.layers", {7, 8, 9}},
          {"skip_layer_guidance.scale", 1.5},
          {"skip_layer_guidance.start", 0.125},
          {"skip_layer_guidance.stop", 0.375},
          {"cache", "taylorseer"},
          {"cache_threshold", 0.625},
          {"taylorseer_interval", 4},
          {"taylorseer_warmup", 2},
          {"taylorseer_order", 3},
          {"loras", json::array({{{"path", "/l/a.safetensors"},
                                  {"scale", -0.75},
                                  {"ignore_unmatched", true},
                                  {"skipped", 7}},
                                 {{"path", "/l/b.safetensors"},
                                  {"scale", 2.5},
                                  {"ignore_unmatched", false},
                                  {"skipped", 0}}})},
          {"seed", ~uint64_t{0} - 3},
          {"resize_back", true},
          {"cfg", true},
          {"output", "latents"}};
}

TEST(ServeSchema, PlansCrossRanksUnchanged) {
  const pipeline::Plan a = pipeline::Plan::from_json(plan_json());
  const pipeline::Plan b = pipeline::Plan::from_json(json::parse(a.to_json().dump()));
  EXPECT_EQ(b->prompts, a->prompts);
  EXPECT_EQ(b->negative_prompt, a->negative_prompt);
  EXPECT_EQ(b->height, a->height);
  EXPECT_EQ(b->width, a->width);
  EXPECT_EQ(b->num_inference_steps, a->num_inference_steps);
  EXPECT_EQ(b->guidance_scale, a->guidance_scale);
  EXPECT_EQ(b->seed, a->seed);
  EXPECT_EQ(b->max_sequence_length, a->max_sequence_length);
  json no_negative = plan_json();
  no_negative.erase("negative_prompt");
  EXPECT_FALSE(pipeline::Plan::from_json(
                   json::parse(pipeline::Plan::from_json(no_negative).to_json().dump()))
                   ->negative_prompt.has_value());
}

// Every row of the plan's table travels: each field set to a value unlike
// its default, then compared after the round trip (skip-layer guidance
// included, which the hand-written protocol before the table dropped).
TEST(ServeSchema, EveryPlanFieldCrossesRanks) {
  const json want = plan_json();
  const pipeline::Plan b =
      pipeline::Plan::from_json(json::parse(pipeline::Plan::from_json(want).to_json().dump()));
  EXPECT_EQ(b->prompts, (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(b->negative_prompt, std::optional<std::string>("no"));
  EXPECT_EQ(b->max_sequence_length, 99);
  EXPECT_EQ(b->height, 200);
  EXPECT_EQ(b->width, 120);
  EXPECT_EQ(b->run_height, 192);
  EXPECT_EQ(b->run_width, 128);
  EXPECT_EQ(b->num_frames, 13);
  EXPECT_EQ(b->latent_frames, 4);
  EXPECT_EQ(b->num_inference_steps, 3);
  EXPECT_EQ(b->guidance_scale, 2.25);
  EXPECT_EQ(b->guidance_scale_2, 1.75);
  EXPECT_EQ(b->true_cfg_scale, 3.5);
  EXPECT_EQ(b->cfg_truncation, 0.625);
  EXPECT_EQ(b->cfg_normalization, 1.25);
  EXPECT_EQ(b->skip_layer_guidance.layers, (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(b->skip_layer_guidance.scale, 1.5);
  EXPECT_EQ(b->skip_layer_guidance.start, 0.125);
  EXPECT_EQ(b->skip_layer_guidance.stop, 0.375);
  EXPECT_EQ(b->cache.kind, pipeline::CacheKind::kTaylorSeer);
  EXPECT_EQ(b->cache.threshold, std::optional<double>(0.625));  // (the table, not validate)
  EXPECT_EQ(b->cache.interval, std::optional<int64_t>(4));
  EXPECT_EQ(b->cache.warmup, std::optional<int64_t>(2));
  EXPECT_EQ(b->cache.order, std::optional<int64_t>(3));
  EXPECT_EQ(b->loras, (std::vector<pipeline::LoraRef>{{"/l/a.safetensors", -0.75, true, 7},
                                                      {"/l/b.safetensors", 2.5, false, 0}}));
  EXPECT_EQ(b->loras.at(0).skipped, 7);
  EXPECT_EQ(b->seed, ~uint64_t{0} - 3);
  EXPECT_TRUE(b->resize_back);
  EXPECT_TRUE(b->cfg);
  EXPECT_EQ(b->output, pipeline::Output::kLatents);
  // The fields compared above are the table's rows, all of them.
  EXPECT_EQ(pipeline::Plan::field_count(), want.size());
  EXPECT_EQ(pipeline::Plan::field_count(), 29u);
  // A field missing from the JSON is an error, not a default.
  json partial = want;
  partial.erase("seed");
  EXPECT_THROW(pipeline::Plan::from_json(partial), std::exception);
  // Initial latents and embeddings do not travel: refused, not dropped.
  const pipeline::Plan a = pipeline::Plan::from_json(want);
  EXPECT_THROW(a.share(0, 1, Tensor::from_vector({1.0f}, {1})).to_json(), Error);
  pipeline::PromptEmbeddings e;
  e.cond.set(models::kText, Tensor::from_vector(std::vector<float>(6, 0.5f), {3, 1, 2}));
  EXPECT_THROW(a.with_embeddings(e).to_json(), Error);
}

TEST(ServeSchema, CommittedOpenApiIsTheOneTheFieldTablesMake) {
  std::ifstream in(std::string(XDIT_SOURCE_DIR) + "/docs/openapi.json");
  ASSERT_TRUE(in.good())
      << "docs/openapi.json is missing: xdit serve --openapi > docs/openapi.json";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(json::parse(ss.str()), openapi())
      << "docs/openapi.json is stale: regenerate it with xdit serve --openapi > docs/openapi.json";
  // Every field of every endpoint is in its schema, with additionalProperties false.
  const json doc = openapi();
  for (const auto& [e, name] : {std::pair{Endpoint::kGenerate, "GenerateRequest"},
                                std::pair{Endpoint::kImages, "ImagesRequest"}}) {
    const json& s = doc["components"]["schemas"][name];
    EXPECT_EQ(s["additionalProperties"], false);
    EXPECT_EQ(s["properties"].size(), fields(e).size());
    EXPECT_EQ(s["required"], json::array({"prompt"}));
  }
}

TEST(ServeSchema, Base64MatchesRfc4648) {
  auto enc = [](const std::string& s) {
    return base64_encode(std::vector<uint8_t>(s.begin(), s.end()));
  };
  EXPECT_EQ(enc(""), "");
  EXPECT_EQ(enc("f"), "Zg==");
  EXPECT_EQ(enc("fo"), "Zm8=");
  EXPECT_EQ(enc("foo"), "Zm9v");
  EXPECT_EQ(enc("foob"), "Zm9vYg==");
  EXPECT_EQ(enc("fooba"), "Zm9vYmE=");
  EXPECT_EQ(enc("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode({0xff, 0xfe, 0x00}), "//4A");
}

TEST(ServeSchema, ErrorBodiesHaveOpenAIsShape) {
  const json e = error_body(400, "field 'n' must be ...", "n");
  EXPECT_EQ(e["error"]["message"], "field 'n' must be ...");
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_EQ(e["error"]["code"], 400);
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(error_body(429, "full")["error"]["param"].is_null());
  EXPECT_EQ(error_body(429, "full")["error"]["type"], "queue_full");
}

std::shared_ptr<Job> job(const std::string& prompt, double seconds = 60) {
  ServeRequest r;
  r.image.prompts = {prompt};
  return std::make_shared<Job>(r, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(seconds)));
}

// An answer names files below the server's folders, never the folders
// (issue 68): a path under one loses its folder where a path starts; the
// same text inside another path, or a name that is no folder (a Hugging
// Face id), is left alone.
TEST(ServePrivatePaths, AnswersNameFilesBelowTheServersFolders) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("xdit_private_" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  serve::PrivatePaths p;
  p.add((dir / "sub").string() + "/", "");
  p.add("org/not-a-folder", "");
  const std::string sub = (dir / "sub").string();
  EXPECT_EQ(p.shown("the model file " + sub + "/transformer/a.safetensors changed"),
            "the model file transformer/a.safetensors changed");
  EXPECT_EQ(p.shown("'" + sub + "/vae/b' and " + sub + "way/c"), "'vae/b' and " + sub + "way/c");
  EXPECT_EQ(p.shown("see x" + sub + "/d"), "see x" + sub + "/d") << "not where a path starts";
  EXPECT_EQ(p.shown("org/not-a-folder/e"), "org/not-a-folder/e");
  fs::remove_all(dir);
}

TEST(ServeQueue, BoundedFifoTakesOnePerGroup) {
  JobQueue q(3);
  for (const char* p : {"a", "b", "c"}) EXPECT_EQ(q.push(job(p)), JobQueue::Push::kQueued);
  EXPECT_EQ(q.push(job("d")), JobQueue::Push::kFull);
  EXPECT_EQ(q.depth(), 3u);
  auto two = q.take(2, std::chrono::milliseconds(0));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0]->request().image.prompts[0], "a");
  EXPECT_EQ(two[1]->request().image.prompts[0], "b");
  EXPECT_EQ(q.push(job("e")), JobQueue::Push::kQueued);
  auto rest = q.take(5, std::chrono::milliseconds(0));
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0]->request().image.prompts[0], "c");
  EXPECT_EQ(rest[1]->request().image.prompts[0], "e");
  const auto t0 = Clock::now();
  EXPECT_TRUE(q.take(1, std::chrono::milliseconds(50)).empty());
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(45));
}

TEST(ServeQueue, AbandonedJobsAreSkippedAndCloseHandsBackTheWaiting) {
  JobQueue q(4);
  auto late = job("late", 0.02);
  q.push(late);
  q.push(job("kept"));
  EXPECT_FALSE(late->wait().has_value());  // its client gave up at the deadline
  EXPECT_TRUE(late->abandoned());
  auto got = q.take(4, std::chrono::milliseconds(0));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]->request().image.prompts[0], "kept");
  q.push(job("x"));
  q.push(job("y"));
  const auto left = q.close();
  EXPECT_EQ(left.size(), 2u);
  EXPECT_EQ(q.push(job("z")), JobQueue::Push::kClosed);
  EXPECT_TRUE(q.take(1, std::chrono::milliseconds(1000)).empty());  // closed: no wait
}

TEST(ServeQueue, AWaitingClientGetsTheResultFromAnotherThread) {
  auto j = job("p");
  std::thread t([j] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    JobResult r;
    r.status = 200;
    r.width = 3;
    j->finish(std::move(r));
    j->finish(JobResult::error(500, "second answer is ignored"));
  });
  auto r = j->wait();
  t.join();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->width, 3);
}

TEST(ServeStartup, TheLineItPrintsIsTheLineItsStartersRead) {
  for (const auto& [host, loopback] :
       {std::pair{"127.0.0.1", true}, std::pair{"0.0.0.0", false}, std::pair{"::1", true}}) {
    Startup st;
    st.model = "pixart-sigma-tiny";
    st.host = host;
    st.loopback = loopback;
    st.port = 40127;
    st.groups = 2;
    st.max_queue = 16;
    st.request_timeout = 2.5;
    st.pid = 31337;
    const std::string line = startup_line(st);
    EXPECT_NE(line.find(loopback ? "this machine only" : "anyone who can reach it"),
              std::string::npos)
        << line;
    int port = 0, pid = 0;
    ASSERT_TRUE(parse_startup_line("earlier output\n" + line + "\nlater", &port, &pid)) << line;
    EXPECT_EQ(port, 40127);
    EXPECT_EQ(pid, 31337);
  }
  int port = 0, pid = 0;
  EXPECT_FALSE(parse_startup_line("xdit: loading ...\n", &port, &pid));
}

TEST(ServeMetrics, PrometheusTextCountsRequestsAndImages) {
  Metrics m;
  m.request("/generate", 200);
  m.request("/generate", 200);
  m.request("/generate", 400);
  m.generation(3, 0.5, 2.0, 0.25, 3.0);
  const std::string t = m.prometheus(4, 16, 1);
  EXPECT_NE(t.find("xdit_requests_total{endpoint=\"/generate\",status=\"200\"} 2\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("xdit_requests_total{endpoint=\"/generate\",status=\"400\"} 1\n"),
            std::string::npos);
  EXPECT_NE(t.find("xdit_queue_depth 4\n"), std::string::npos);
  EXPECT_NE(t.find("xdit_running_requests 1\n"), std::string::npos);
  EXPECT_NE(t.find("xdit_images_total 3\n"), std::string::npos);
  EXPECT_NE(t.find("xdit_stage_seconds_total{stage=\"denoising\"} 2\n"), std::string::npos);
  EXPECT_EQ(t.find("xdit_images_per_second 0\n"), std::string::npos);  // 3 images just now
  // Every sample line belongs to a declared metric.
  std::istringstream lines(t);
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("# ", 0) == 0) continue;
    const std::string name = l.substr(0, l.find_first_of("{ "));
    EXPECT_NE(t.find("# TYPE " + name + " "), std::string::npos) << l;
  }
}

}  // namespace
}  // namespace xdit::serve
