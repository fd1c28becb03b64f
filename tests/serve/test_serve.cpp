// xdit serve end to end over loopback, with cpp-httplib's client against the
// tiny models: each endpoint's PNG equals `xdit generate`'s for the same
// request, every malformed-body class gets its 4xx, many clients with bad
// requests among them are all answered, a full queue answers 429, a late
// request 504, SIGTERM lets the running request finish and exits 0, and a
// busy port or a broken model ends the start with one line and no listener.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <thread>

#include "io/video.h"
#include "serve_util.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModels = XDIT_MODELS;

using Serve = test::ServeTest;

TEST_F(Serve, GenerateEndpointEqualsXditGenerate) {
  const std::string model = "--model '" + kModels + "/pixart-sigma-tiny' --dtype f32";
  test::ServeProcess s(model + " --output_dir '" + dir_.string() + "'", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  auto c = s.client();
  const test::Reply r =
      test::post_json(c, "/generate",
                      R"({"prompt": "a red fox", "num_inference_steps": 3, "seed": 5, "cfg": 3.0,
          "height": 128, "width": 96, "negative_prompt": "blurry"})");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["message"], "Image generated successfully");
  EXPECT_EQ(r.body["save_to_disk"], false);
  EXPECT_TRUE(std::regex_match(r.body["elapsed_time"].get<std::string>(),
                               std::regex("[0-9]+\\.[0-9]{2} sec")));
  const io::PngImage served = test::png_of_base64(r.body["output"]);
  const io::PngImage cli = generate(
      model +
          " --prompt 'a red fox' --negative_prompt blurry --num_inference_steps 3 --seed 5 "
          "--guidance_scale 3 --height 128 --width 96",
      "cli.png");
  EXPECT_EQ(served.width, 96);
  EXPECT_EQ(served.height, 128);
  EXPECT_EQ(test::max_pixel_diff(served, cli), 0);
  EXPECT_EQ(served.text.at("prompt"), "a red fox");
  EXPECT_EQ(served.text.at("seed"), "5");

  // Defaults: the model's steps and size, as `xdit generate` without flags.
  const test::Reply d = test::post_json(c, "/generate", R"({"prompt": "plain"})");
  ASSERT_EQ(d.status, 200) << d.body.dump();
  EXPECT_EQ(test::max_pixel_diff(test::png_of_base64(d.body["output"]),
                                 generate(model + " --prompt plain", "plain.png")),
            0);

  // A step cache per request: its image equals `xdit generate --cache`'s,
  // and the answer and the PNG say what it did; a bad threshold is a 400.
  const test::Reply cached =
      test::post_json(c, "/generate",
                      R"({"prompt": "a red fox", "num_inference_steps": 8, "seed": 5, "height": 128,
          "width": 96, "cache": "fbcache", "cache_threshold": 0.4})");
  ASSERT_EQ(cached.status, 200) << cached.body.dump();
  const io::PngImage cached_png = test::png_of_base64(cached.body["output"]);
  EXPECT_EQ(test::max_pixel_diff(cached_png, generate(model + " --prompt 'a red fox' "
                                                              "--num_inference_steps 8 --seed 5 "
                                                              "--height 128 --width 96 --cache "
                                                              "fbcache --cache_threshold 0.4",
                                                      "cached.png")),
            0);
  const std::string line = cached.body["cache"].get<std::string>();
  EXPECT_NE(line.find("fbcache threshold 0.4: "), std::string::npos) << line;
  EXPECT_NE(line.find(" of 8 steps in full"), std::string::npos) << line;
  EXPECT_EQ(cached_png.text.at("cache"), line);
  const test::Reply zero = test::post_json(
      c, "/generate", R"({"prompt": "x", "cache": "fbcache", "cache_threshold": 0})");
  EXPECT_EQ(zero.status, 400) << zero.body.dump();

  // save_disk_path: the PNG lands in the folder (under --output_dir), its
  // path comes back.
  const fs::path out = dir_ / "saved";
  fs::create_directories(out);
  const test::Reply saved = test::post_json(c, "/generate",
                                            json{{"prompt", "a red fox"},
                                                 {"num_inference_steps", 3},
                                                 {"seed", 5},
                                                 {"cfg", 3.0},
                                                 {"height", 128},
                                                 {"width", 96},
                                                 {"negative_prompt", "blurry"},
                                                 {"save_disk_path", "saved"}}
                                                .dump());
  ASSERT_EQ(saved.status, 200) << saved.body.dump();
  EXPECT_EQ(saved.body["save_to_disk"], true);
  const std::string file = saved.body["output"];
  EXPECT_EQ(fs::path(file).parent_path(), out);
  EXPECT_EQ(test::max_pixel_diff(io::read_png(file), cli), 0);
  const test::Reply nowhere = test::post_json(
      c, "/generate", json{{"prompt", "x"}, {"save_disk_path", "no/such/dir"}}.dump());
  EXPECT_EQ(nowhere.status, 400);
  EXPECT_EQ(nowhere.body["error"]["param"], "save_disk_path");
  EXPECT_EQ(s.stop().code, 0);
}

// A video model's /generate answer is one H.264 MP4 of the frames (base64,
// or a .mp4 under --output_dir), with num_frames and format; the frame count
// is rounded as diffusers rounds it.
TEST_F(Serve, VideoAnswersAreMp4) {
  if (io::h264_encoder().empty()) GTEST_SKIP() << "this FFmpeg build has no H.264 encoder";
  const std::string model = "--model '" + kModels + "/wan21-tiny' --dtype f32";
  test::ServeProcess s(model + " --output_dir '" + dir_.string() + "'", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  auto c = s.client();
  const json ask = {{"prompt", "a fox"}, {"num_frames", 8}, {"num_inference_steps", 2},
                    {"height", 48},      {"width", 80},     {"seed", 3}};
  const test::Reply r = test::post_json(c, "/generate", ask.dump());
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["message"], "Video generated successfully");
  EXPECT_EQ(r.body["format"], "mp4");
  EXPECT_EQ(r.body["num_frames"], 9);
  const std::vector<uint8_t> mp4 = test::base64_decode(r.body["output"]);
  const fs::path file = dir_ / "answer.mp4";
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(mp4.data()), static_cast<std::streamsize>(mp4.size()));
  const io::VideoInfo v = io::read_video(file.string());
  EXPECT_EQ(v.codec, "h264");
  EXPECT_EQ(v.width, 80);
  EXPECT_EQ(v.height, 48);
  EXPECT_EQ(v.frames, 9);
  EXPECT_EQ(v.fps, 16);
  EXPECT_EQ(v.metadata.at("prompt"), "a fox");
  json saved_ask = ask;
  saved_ask["save_disk_path"] = "";
  const test::Reply saved = test::post_json(c, "/generate", saved_ask.dump());
  ASSERT_EQ(saved.status, 200) << saved.body.dump();
  const std::string path = saved.body["output"];
  EXPECT_EQ(fs::path(path).extension(), ".mp4");
  EXPECT_EQ(io::read_video(path).frames, 9);
  // One frame of the video model: a PNG.
  json one = ask;
  one["num_frames"] = 1;
  const test::Reply still = test::post_json(c, "/generate", one.dump());
  ASSERT_EQ(still.status, 200) << still.body.dump();
  EXPECT_EQ(still.body["format"], "png");
  EXPECT_EQ(test::png_of_base64(still.body["output"]).width, 80);
  EXPECT_EQ(s.stop().code, 0);
}

TEST_F(Serve, OpenAIEndpointEqualsXditGenerateAndTheInfoEndpointsAnswer) {
  const std::string model = "--model '" + kModels + "/flux-schnell-tiny' --dtype f32";
  // No size or batch limit: the memory estimate is what refuses below.
  test::ServeProcess s(model + " --max_pixels 0 --max_batch 0", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  auto c = s.client();
  const test::Reply r = test::post_json(
      c, "/v1/images/generations",
      R"({"prompt": "a lighthouse", "n": 2, "size": "96x64", "response_format": "b64_json",
          "seed": 11, "num_inference_steps": 2, "model": "flux-schnell-tiny"})");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  ASSERT_EQ(r.body["data"].size(), 2u);
  EXPECT_GT(r.body["created"].get<int64_t>(), 1700000000);
  generate(model +
               " --prompt 'a lighthouse' --prompt 'a lighthouse' --width 96 --height 64 --seed 11 "
               "--num_inference_steps 2",
           "cli.png");
  for (int i = 0; i < 2; ++i) {
    const io::PngImage served = test::png_of_base64(r.body["data"][i]["b64_json"]);
    EXPECT_EQ(served.width, 96);
    EXPECT_EQ(served.height, 64);
    EXPECT_EQ(test::max_pixel_diff(served, io::read_png(path("cli_" + std::to_string(i) + ".png"))),
              0)
        << "image " << i;
  }

  // A request the model cannot hold in this machine's memory: the pipeline's
  // own estimate, as a 400 before the queue (ten 16384 px images need ~470 GB).
  const test::Reply huge = test::post_json(c, "/v1/images/generations",
                                           R"({"prompt": "x", "n": 10, "size": "16384x16384"})");
  EXPECT_EQ(huge.status, 400) << huge.body.dump();
  EXPECT_NE(huge.body["error"]["message"].get<std::string>().find("memory"), std::string::npos)
      << huge.body.dump();

  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const json h = json::parse(health->body);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["queue_depth"], 0);
  EXPECT_EQ(h["ranks"], 1);

  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "flux-schnell-tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");

  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  const std::string t = metrics->body;
  EXPECT_NE(t.find("xdit_requests_total{endpoint=\"/v1/images/generations\",status=\"200\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("xdit_images_total 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("xdit_queue_depth 0\n"), std::string::npos) << t;

  auto missing = c.Get("/v2/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(json::parse(missing->body).contains("error"));
  ASSERT_TRUE(c.Get("/v3/other"));
  const std::string after = c.Get("/metrics")->body;
  EXPECT_NE(after.find("xdit_requests_total{endpoint=\"other\",status=\"404\"} 2\n"),
            std::string::npos)
      << after;  // unknown paths share one label
  EXPECT_EQ(after.find("/v2/nothing"), std::string::npos);
  EXPECT_EQ(s.stop().code, 0);
}

TEST_F(Serve, MalformedBodiesAreRefusedNamingTheFieldAndTheServerGoesOn) {
  test::ServeProcess s("--model '" + kModels + "/pixart-sigma-tiny'", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  auto c = s.client();
  struct Case {
    const char* path;
    std::string body;
    int status;
    const char* param;  // nullptr: the body as a whole
  };
  const std::vector<Case> cases = {
      {"/generate", R"({"prompt": "x",)", 400, nullptr},                       // bad JSON
      {"/generate", "[1, 2]", 400, nullptr},                                   // not an object
      {"/generate", R"({"prompt": ["x"]})", 400, "prompt"},                    // wrong type
      {"/generate", R"({"prompt": "x", "seed": "five"})", 400, "seed"},        // wrong type
      {"/v1/images/generations", R"({"prompt": "x", "n": "2"})", 400, "n"},    // wrong type
      {"/generate", R"({"cfg": 2})", 400, "prompt"},                           // missing prompt
      {"/v1/images/generations", R"({"size": "64x64"})", 400, "prompt"},       // missing prompt
      {"/generate", R"({"prompt": "x", "height": 99999999})", 400, "height"},  // absurd size
      {"/v1/images/generations", R"({"prompt": "x", "size": "100000x8"})", 400, "size"},
      {"/generate", R"({"prompt": "x", "num_inference_steps": -5})", 400, "num_inference_steps"},
      {"/generate", R"({"prompt": "x", "guidance": 3})", 400, "guidance"},  // unknown field
      {"/v1/images/generations", R"({"prompt": "x", "quality": "hd"})", 400, "quality"},
      {"/v1/images/generations", R"({"prompt": "x", "response_format": "url"})", 400,
       "response_format"},
      {"/generate", json{{"prompt", std::string(10 << 20, 'a')}}.dump(), 413, nullptr},  // 10 MB
  };
  for (const Case& k : cases) {
    const test::Reply r = test::post_json(c, k.path, k.body);
    EXPECT_EQ(r.status, k.status) << k.path << " " << k.body.substr(0, 80);
    ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << k.body.substr(0, 80);
    EXPECT_FALSE(r.body["error"]["message"].get<std::string>().empty());
    if (k.param != nullptr) {
      EXPECT_EQ(r.body["error"]["param"], k.param) << r.body.dump();
      EXPECT_NE(r.body["error"]["message"].get<std::string>().find(k.param), std::string::npos)
          << "the message names the field: " << r.body.dump();
    }
  }
  // Still serving.
  const test::Reply ok =
      test::post_json(c, "/generate", R"({"prompt": "x", "num_inference_steps": 1})");
  EXPECT_EQ(ok.status, 200) << ok.body.dump();
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(Serve, EightClientsTwoHundredRequestsTenPercentMalformed) {
  test::ServeProcess s("--model '" + kModels + "/pixart-sigma-tiny' --max_queue 16", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  std::atomic<int> good_ok{0}, bad_400{0}, wrong{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t)
    clients.emplace_back([&, t] {
      auto c = s.client();
      for (int i = 0; i < 25; ++i) {
        const int k = t * 25 + i;
        if (k % 10 == 3) {  // malformed: one of several classes
          const char* bad[] = {R"({"prompt": 1})", R"({"prompt": "x", "height": -1})", "{",
                               R"({"prompt": "x", "extra": true})"};
          const test::Reply r = test::post_json(c, "/generate", bad[k % 4]);
          (r.status == 400 ? bad_400 : wrong)++;
          continue;
        }
        const test::Reply r = test::post_json(
            c, k % 2 ? "/generate" : "/v1/images/generations",
            json{{"prompt", "prompt " + std::to_string(k)}, {"seed", k}, {"num_inference_steps", 1}}
                .dump());
        const std::string key = k % 2 ? "output" : "data";
        const bool image = r.status == 200 && r.body.contains(key);
        if (image) {
          const std::string b64 = k % 2 ? r.body["output"].get<std::string>()
                                        : r.body["data"][0]["b64_json"].get<std::string>();
          (test::png_of_base64(b64).width > 0 ? good_ok : wrong)++;
        } else {
          wrong++;
        }
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(good_ok.load(), 180);
  EXPECT_EQ(bad_400.load(), 20);
  EXPECT_EQ(wrong.load(), 0);
  auto health = s.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(json::parse(health->body)["queue_depth"], 0);
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

// A request of the tiny FLUX.1 [dev] that takes about 1.4 s on 2 cores (the
// timing tests need it to outlast their clients' steps by a wide margin).
const char* kSlow = R"({"prompt": "slow", "height": 512, "width": 512, "num_inference_steps": 16})";

TEST_F(Serve, AFullQueueAnswers429WithRetryAfter) {
  test::ServeProcess s("--model '" + kModels + "/flux-dev-tiny' --max_queue 1", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  std::vector<test::Reply> replies(6);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < replies.size(); ++i)
    clients.emplace_back([&, i] {
      auto c = s.client();
      replies[i] = test::post_json(c, "/generate", kSlow);
    });
  for (auto& t : clients) t.join();
  int ok = 0, full = 0;
  for (const auto& r : replies) {
    if (r.status == 200) ok++;
    if (r.status == 429) {
      full++;
      EXPECT_EQ(r.body["error"]["type"], "queue_full");
      ASSERT_FALSE(r.retry_after.empty());
      EXPECT_GE(std::stoi(r.retry_after), 1);
    }
  }
  // One runs, one waits, the rest find the queue full.
  EXPECT_GE(ok, 2);
  EXPECT_GE(full, 1);
  EXPECT_EQ(ok + full, 6);
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(Serve, ARequestPastItsTimeoutAnswers504AndTheServerGoesOn) {
  test::ServeProcess s("--model '" + kModels + "/flux-dev-tiny' --request_timeout 0.3", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  auto c = s.client();
  const auto t0 = std::chrono::steady_clock::now();
  const test::Reply r = test::post_json(c, "/generate", kSlow);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 504) << r.body.dump();
  EXPECT_EQ(r.body["error"]["type"], "timeout");
  EXPECT_LT(waited, 5.0) << "answered at the deadline, not when the work ended";
  // The abandoned request runs to its end (a round is not interrupted);
  // then the server takes the next one.
  for (int i = 0; i < 6000; ++i) {
    auto h = c.Get("/health");
    if (h && json::parse(h->body)["running"] == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const test::Reply quick = test::post_json(
      c, "/generate", R"({"prompt": "q", "height": 64, "width": 64, "num_inference_steps": 1})");
  EXPECT_EQ(quick.status, 200) << quick.body.dump();
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(Serve, SigtermFinishesTheRunningRequestRefusesTheRestAndExitsZero) {
  test::ServeProcess s("--model '" + kModels + "/flux-dev-tiny'", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  test::Reply running, queued;
  std::thread a([&] {
    auto c = s.client();
    running = test::post_json(c, "/generate", kSlow);
  });
  // Wait until it runs, then queue a second one behind it.
  auto c = s.client();
  for (int i = 0; i < 500; ++i) {
    auto h = c.Get("/health");
    if (h && json::parse(h->body)["running"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::thread b([&] {
    auto c2 = s.client();
    queued = test::post_json(c2, "/generate", kSlow);
  });
  for (int i = 0; i < 500; ++i) {
    auto h = c.Get("/health");
    if (h && json::parse(h->body)["queue_depth"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const test::CommandResult end = s.stop(SIGTERM);
  a.join();
  b.join();
  EXPECT_EQ(end.code, 0) << end.err;
  EXPECT_EQ(running.status, 200) << running.body.dump();
  EXPECT_EQ(queued.status, 503) << queued.body.dump();
  EXPECT_NE(end.err.find("stopped: 1 request served"), std::string::npos) << end.err;
}

// Connects to 127.0.0.1:port, sends `bytes`, and hangs up without reading.
void send_and_hang_up(int port, const std::string& bytes) {
  const int fd = test::loopback_connect(port);
  ASSERT_GE(fd, 0) << "cannot connect to 127.0.0.1:" << port;
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

TEST_F(Serve, AClientThatHangsUpDoesNotDisturbTheOthers) {
  test::ServeProcess s("--model '" + kModels + "/flux-dev-tiny'", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  const std::string body = kSlow;
  // One hangs up after a whole request (its answer then goes to a closed
  // socket), one in the middle of its body, one after half its headers.
  send_and_hang_up(s.port(),
                   "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                   "application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body);
  send_and_hang_up(s.port(),
                   "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"pro");
  send_and_hang_up(s.port(), "POST /v1/images/generations HTTP/1.1\r\nHost:");
  auto c = s.client();
  for (int i = 0; i < 3; ++i) {
    const test::Reply r = test::post_json(c, "/generate",
                                          json{{"prompt", "after"},
                                               {"seed", i},
                                               {"height", 64},
                                               {"width", 64},
                                               {"num_inference_steps", 1}}
                                              .dump());
    EXPECT_EQ(r.status, 200) << r.body.dump();
  }
  // The abandoned request ran and its answer found no one: still serving.
  for (int i = 0; i < 3000; ++i) {
    auto h = c.Get("/health");
    if (h && json::parse(h->body)["running"] == 0 && json::parse(h->body)["queue_depth"] == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const test::Reply last = test::post_json(
      c, "/generate", R"({"prompt": "last", "height": 64, "width": 64, "num_inference_steps": 1})");
  EXPECT_EQ(last.status, 200) << last.body.dump();
  const test::CommandResult end = s.stop();
  EXPECT_EQ(end.code, 0) << end.err;
  EXPECT_NE(end.err.find("stopped: 5 requests served"), std::string::npos) << end.err;
}

TEST_F(Serve, APortInUseIsOneLineAtStart) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  const auto r =
      test::run_command(test::xdit_env() + "timeout 60 '" + XDIT_BINARY + "' serve --port " +
                            std::to_string(port) + " --model '" + kModels + "/pixart-sigma-tiny'",
                        path("err.txt"));
  ::close(fd);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(port)), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.find("serving"), std::string::npos) << r.err;
}

TEST_F(Serve, BadServerOptionsAreOneLineEach) {
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"--max_queue 0", "--max_queue must be 1"},
           {"--max_queue 5000", "--max_queue must be 1"},
           {"--port 70000", "--port must be 0"},
           {"--request_timeout -2", "--request_timeout must be a positive"},
           // 1e308 s overflowed the deadline: every request answered 504.
           {"--request_timeout 1e308", "--request_timeout must be a positive"},
           {"--header_timeout 0", "--header_timeout must be 0.01"},
           {"--body_timeout 1e9", "--body_timeout must be 0.01"},
           {"--max_connections 0", "--max_connections must be 1"},
           {"--api_key_file /no/such/key", "--api_key_file /no/such/key"},
           {"--host no-such-host.invalid --port 6001", "cannot resolve --host"},
           {"--ulysses_degree 2", "ulysses"},
           {"--device tpu", "--device must be cpu, cuda or cuda:N"}}) {
    const auto r =
        test::run_command(test::xdit_env() + "timeout 60 '" + XDIT_BINARY + "' serve --model '" +
                              kModels + "/pixart-sigma-tiny' " + flags,
                          path("err.txt"));
    EXPECT_EQ(r.code, 1) << flags << ": " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << flags << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flags << ": " << r.err;
  }
}

TEST_F(Serve, AModelThatFailsToLoadGetsNoListenerAndANonZeroExit) {
  const fs::path broken = dir_ / "broken";
  fs::copy(kModels + "/pixart-sigma-tiny", broken, fs::copy_options::recursive);
  const fs::path weights =
      broken / "transformer" / "diffusion_pytorch_model-00002-of-00004.safetensors";
  ASSERT_TRUE(fs::exists(weights));
  fs::resize_file(weights, fs::file_size(weights) / 2);  // truncated
  test::ServeProcess s("--model '" + broken.string() + "'", dir_);
  EXPECT_FALSE(s.listening()) << s.log();
  EXPECT_TRUE(s.exited());
  EXPECT_NE(s.exit_code(), 0);
  EXPECT_NE(s.log().find("error"), std::string::npos) << s.log();
  EXPECT_EQ(s.log().find("serving"), std::string::npos) << s.log();
}

}  // namespace
}  // namespace xdit
