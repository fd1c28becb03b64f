// xdit serve under mpirun with 2 ranks: every request runs on the whole
// layout and its image equals the serial `xdit generate` (Ulysses 2; data
// parallel 2 with two requests served at once, one per group — also with
// different per-request LoRAs on the two groups); a request the
// layout cannot serve is a 400 that says why, and the job goes on; SIGTERM
// to the serving rank ends every rank with exit 0.
#include <atomic>
#include <map>
#include <thread>

#include "serve_util.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModels = XDIT_MODELS;

using ServeMpi = test::ServeTest;

TEST_F(ServeMpi, Ulysses2ServesTheSerialImage) {
  const std::string model = "--model '" + kModels + "/flux-schnell-tiny' --dtype f32";
  test::ServeProcess s(model + " --ulysses_degree 2", dir_, 2);
  ASSERT_TRUE(s.listening()) << s.log();
  auto c = s.client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(json::parse(health->body)["ranks"], 2);
  const test::Reply r =
      test::post_json(c, "/generate",
                      R"({"prompt": "a harbour at dusk", "height": 96, "width": 64, "seed": 3,
          "num_inference_steps": 3})");
  ASSERT_EQ(r.status, 200) << r.body.dump() << s.log();
  const io::PngImage want =
      generate(model +
                   " --prompt 'a harbour at dusk' --height 96 --width 64 --seed 3 "
                   "--num_inference_steps 3",
               "serial.png");
  const io::PngImage served = test::png_of_base64(r.body["output"]);
  EXPECT_LE(test::max_pixel_diff(served, want), 1);
  // The answer and the PNG name the layout and that the image is exact.
  const std::string layout = "dp=1 cfg=1 pp=1 ulysses=2 ring=1 tp=1; exact";
  EXPECT_EQ(r.body["parallel"], layout);
  EXPECT_EQ(served.text.at("parallel"), layout);
  const test::CommandResult end = s.stop();
  EXPECT_EQ(end.code, 0) << end.err;
  EXPECT_NE(end.err.find("stopped: 1 request served"), std::string::npos) << end.err;
}

TEST_F(ServeMpi, DataParallel2ServesEachRequestTheSerialImage) {
  const std::string model = "--model '" + kModels + "/pixart-sigma-tiny' --dtype f32";
  test::ServeProcess s(model + " --data_parallel_degree 2", dir_, 2);
  ASSERT_TRUE(s.listening()) << s.log();
  EXPECT_NE(s.log().find("2 requests at a time"), std::string::npos) << s.log();
  // Two different requests (prompts, seeds, sizes, steps) sent together; and
  // one of two images (n = 2) on one group.
  const std::vector<std::string> bodies = {
      R"({"prompt": "a red fox", "seed": 5, "height": 128, "width": 96, "num_inference_steps": 3,
          "cfg": 3.0})",
      R"({"prompt": "a blue bird", "seed": 9, "height": 64, "width": 64, "num_inference_steps": 2})"};
  std::vector<test::Reply> replies(bodies.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < bodies.size(); ++i)
    clients.emplace_back([&, i] {
      auto c = s.client();
      replies[i] = test::post_json(c, "/generate", bodies[i]);
    });
  for (auto& t : clients) t.join();
  ASSERT_EQ(replies[0].status, 200) << replies[0].body.dump() << s.log();
  ASSERT_EQ(replies[1].status, 200) << replies[1].body.dump();
  EXPECT_LE(test::max_pixel_diff(
                test::png_of_base64(replies[0].body["output"]),
                generate(model + " --prompt 'a red fox' --seed 5 --height 128 --width 96 "
                                 "--num_inference_steps 3 --guidance_scale 3",
                         "fox.png")),
            1);
  EXPECT_LE(test::max_pixel_diff(test::png_of_base64(replies[1].body["output"]),
                                 generate(model + " --prompt 'a blue bird' --seed 9 --height 64 "
                                                  "--width 64 --num_inference_steps 2",
                                          "bird.png")),
            1);
  auto c = s.client();
  const test::Reply two = test::post_json(
      c, "/v1/images/generations",
      R"({"prompt": "a red fox", "n": 2, "seed": 5, "size": "96x128", "num_inference_steps": 3,
          "guidance_scale": 3})");
  ASSERT_EQ(two.status, 200) << two.body.dump();
  ASSERT_EQ(two.body["data"].size(), 2u);
  // The first image of a batch of two is the batch's, drawn from one seed:
  // the serial batch of the same prompt twice.
  generate(model +
               " --prompt 'a red fox' --prompt 'a red fox' --seed 5 --height 128 --width 96 "
               "--num_inference_steps 3 --guidance_scale 3",
           "pair.png");
  for (int i = 0; i < 2; ++i)
    EXPECT_LE(test::max_pixel_diff(test::png_of_base64(two.body["data"][i]["b64_json"]),
                                   io::read_png(path("pair_" + std::to_string(i) + ".png"))),
              1);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("xdit_images_total 4\n"), std::string::npos) << metrics->body;
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

// Per-request LoRAs with data parallel 2: two requests at a time, one per
// group, one with a LoRA and one without, then the other way round — each
// group's ranks switch their side paths to their own request's LoRAs; every
// image equals `xdit generate`'s (--lora merged: within 1/255).
TEST_F(ServeMpi, DataParallel2SwitchesEachGroupsLoras) {
  const fs::path loras = dir_ / "loras";
  fs::create_directories(loras);
  for (const char* n : {"flux_a", "flux_b"})
    fs::copy_file(std::string(XDIT_TEST_DATA) + "/lora/" + n + ".safetensors",
                  loras / (std::string(n) + ".safetensors"));
  const std::string model = "--model '" + kModels + "/flux-schnell-tiny' --dtype f32";
  test::ServeProcess s(model + " --data_parallel_degree 2 --lora_dir '" + loras.string() + "'",
                       dir_, 2);
  ASSERT_TRUE(s.listening()) << s.log();
  const std::string request =
      R"("prompt": "a red fox", "num_inference_steps": 3, "seed": 5, "height": 48, "width": 80)";
  const std::string cli = model +
                          " --prompt 'a red fox' --num_inference_steps 3 --seed 5 "
                          "--height 48 --width 80";
  const std::string a = R"([{"name": "flux_a", "scale": 0.7}])",
                    b = R"([{"name": "flux_b", "scale": -0.4}])";
  const std::map<std::string, std::string> flags = {
      {a, " --lora '" + (loras / "flux_a.safetensors").string() + "':0.7"},
      {b, " --lora '" + (loras / "flux_b.safetensors").string() + "':-0.4"},
      {"[]", ""}};
  for (const auto& round : std::vector<std::vector<std::string>>{{a, "[]"}, {"[]", b}}) {
    std::vector<test::Reply> replies(round.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < round.size(); ++i)
      clients.emplace_back([&, i] {
        auto c = s.client();
        replies[i] =
            test::post_json(c, "/generate", "{" + request + R"(, "loras": )" + round[i] + "}");
      });
    for (auto& t : clients) t.join();
    for (size_t i = 0; i < round.size(); ++i) {
      SCOPED_TRACE(round[i]);
      ASSERT_EQ(replies[i].status, 200) << replies[i].body.dump() << s.log();
      EXPECT_LE(test::max_pixel_diff(test::png_of_base64(replies[i].body["output"]),
                                     generate(cli + flags.at(round[i]), "cli.png")),
                1);
    }
  }
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(ServeMpi, ARequestTheLayoutCannotServeIsA400AndTheJobGoesOn) {
  const std::string model = "--model '" + kModels + "/pixart-sigma-tiny' --dtype f32";
  test::ServeProcess s(model + " --use_cfg_parallel", dir_, 2);
  ASSERT_TRUE(s.listening()) << s.log();
  auto c = s.client();
  // CFG parallel needs classifier-free guidance: guidance 1 turns it off.
  const test::Reply no_cfg =
      test::post_json(c, "/generate", R"({"prompt": "x", "cfg": 1.0, "num_inference_steps": 2})");
  EXPECT_EQ(no_cfg.status, 400) << no_cfg.body.dump();
  EXPECT_NE(no_cfg.body["error"]["message"].get<std::string>().find("--use_cfg_parallel"),
            std::string::npos)
      << no_cfg.body.dump();
  const test::Reply ok = test::post_json(
      c, "/generate", R"({"prompt": "x", "cfg": 4.0, "num_inference_steps": 2, "seed": 1})");
  ASSERT_EQ(ok.status, 200) << ok.body.dump() << s.log();
  EXPECT_LE(test::max_pixel_diff(
                test::png_of_base64(ok.body["output"]),
                generate(model + " --prompt x --guidance_scale 4 --num_inference_steps 2 --seed 1",
                         "cfg.png")),
            1);
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(ServeMpi, ARankThatFailsEndsTheWholeJobWithItsMessage) {
  // The serving rank or another one; by an error or by dying without a word.
  for (const auto& [rank, how] :
       std::vector<std::pair<int, std::string>>{{1, "throw"}, {1, "kill"}, {0, "throw"}}) {
    test::ServeProcess s("--model '" + kModels + "/flux-schnell-tiny' --ulysses_degree 2", dir_, 2,
                         "XDIT_FAULT_RANK=" + std::to_string(rank) + " XDIT_FAULT=" + how);
    ASSERT_TRUE(s.listening()) << s.log();
    auto c = s.client();
    const auto t0 = std::chrono::steady_clock::now();
    const test::Reply r =
        test::post_json(c, "/generate", R"({"prompt": "x", "height": 64, "width": 64})");
    EXPECT_NE(r.status, 200) << how;  // no image: the job ended under the request
    const test::CommandResult end = s.wait();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(end.code, 0) << how << ": " << end.err;
    EXPECT_LT(took, 60) << how << ": the job must end, not hang";
    if (how == "throw") {
      EXPECT_NE(end.err.find("injected fault (XDIT_FAULT_RANK=" + std::to_string(rank) + ")"),
                std::string::npos)
          << end.err;
    }
  }
}

TEST_F(ServeMpi, ALayoutThatDoesNotFitTheJobIsOneLineBeforeLoading) {
  test::ServeProcess s("--model '" + kModels + "/pixart-sigma-tiny' --ulysses_degree 4", dir_, 2);
  EXPECT_FALSE(s.listening()) << s.log();
  EXPECT_TRUE(s.exited());
  EXPECT_NE(s.exit_code(), 0);
  EXPECT_NE(s.log().find("xdit: error:"), std::string::npos) << s.log();
  EXPECT_EQ(s.log().find("serving"), std::string::npos) << s.log();
}

}  // namespace
}  // namespace xdit
