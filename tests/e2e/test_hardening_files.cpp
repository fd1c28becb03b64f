// Issue 41 (hardening, second round), the CLI's side: outputs written only
// through exclusive temporaries with unpredictable names, never through a
// link, and removed on every signal and write error however many there are;
// side files refused from their size before they are read; OpenMP's thread
// count bounded; silent fallbacks refused; a FIFO among the model's files
// refused at once. Each case ends as test_hardening.cpp's do: one line,
// cheap, nothing left behind.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "cli_util.h"
#include "e2e/hardening.h"
#include "io/file.h"
#include "io/json.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "test_util.h"

namespace xdit {
namespace {

// `file` grown to `bytes` with a hole (no disk used, reads as NUL bytes).
void grow_sparse(const fs::path& file, uintmax_t bytes) {
  fs::resize_file(file, bytes);
}

// --- outputs -----------------------------------------------------------

TEST_F(Hardening, TemporaryNamesAreUnpredictableAndExclusive) {
  std::set<std::string> names;
  {
    io::OutputFile a(path("out.png")), b(path("out.png"));
    for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
  }
  std::set<std::string> temporaries;
  for (const auto& n : names)
    if (n.rfind(".out.png.xdit-", 0) == 0) temporaries.insert(n);
  ASSERT_EQ(temporaries.size(), 2u);
  for (const auto& n : temporaries)  // 64 random bits, not mkstemp's 6 letters
    EXPECT_TRUE(std::regex_match(n, std::regex("\\.out\\.png\\.xdit-[0-9a-f]{16}"))) << n;
  EXPECT_EQ(stray_files(), std::set<std::string>{});  // both removed uncommitted
}

TEST_F(Hardening, AReplacedTemporaryIsNotWrittenThrough) {
  // Someone swaps the reserved temporary for a link to a file of ours: the
  // commit refuses instead of writing through it.
  std::ofstream(path("victim.txt")) << "precious";
  io::OutputFile out(path("out.png"));
  std::string tmp;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind(".out.png.xdit-", 0) == 0) tmp = e.path().string();
  ASSERT_FALSE(tmp.empty());
  fs::remove(tmp);
  fs::create_symlink(path("victim.txt"), tmp);
  EXPECT_THROW(out.commit("png", 3), Error);
  std::ifstream in(path("victim.txt"));
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "precious");
  EXPECT_FALSE(fs::exists(path("out.png")));
}

TEST_F(Hardening, ASignalRemovesEveryTemporaryHoweverMany) {
  // More than the 4096 of the former fixed table.
  constexpr int kOutputs = 5000;
  const fs::path out = dir_ / "many";
  fs::create_directory(out);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      std::vector<io::OutputFile> files;
      files.reserve(kOutputs);
      for (int i = 0; i < kOutputs; ++i)
        files.emplace_back((out / (std::to_string(i) + ".png")).string());
      ::raise(SIGTERM);
    } catch (...) {
    }
    ::_exit(3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  size_t left = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(out)) ++left;
  EXPECT_EQ(left, 0u) << "temporary files left behind";
}

TEST_F(Hardening, AFileSizeLimitIsAWriteErrorThatCleansUp) {
  // ulimit -f (in 512-byte blocks under sh): the PNG does not fit. SIGXFSZ
  // used to end the process and leave its temporary file.
  const auto r =
      test::run_command("sh -c \"ulimit -f 1; exec env XDIT_QUIET=1 OMP_NUM_THREADS=1 '" +
                            std::string(XDIT_BINARY) + "' " + generate("") + "\"",
                        path("stderr.txt"));
  expect_refused(r, "failed writing");
  EXPECT_NE(r.err.find("ulimit -f"), std::string::npos) << r.err;
}

TEST_F(Hardening, AnEmptyOutputNameIsRefused) {
  const auto r = xdit("generate --model '" + model() + "' --prompt x -o ''");
  expect_refused(r, "-o/--output is empty");
}

// --- side files and memory ----------------------------------------------

TEST_F(Hardening, AConfigWithAGigabyteAppendedIsRefusedFromItsSize) {
  const fs::path cfg = fs::path(model()) / "vae" / "config.json";
  grow_sparse(cfg, fs::file_size(cfg) + (uintmax_t{1} << 30));
  expect_refused(xdit(generate("")), "at most 67108864 are read");
}

TEST_F(Hardening, JsonWithBytesAfterANulIsRefused) {
  const fs::path cfg = fs::path(model()) / "transformer" / "config.json";
  {
    std::ofstream f(cfg, std::ios::app | std::ios::binary);
    f.write("\0{\"garbage\": ", 13);
  }
  const auto r = xdit(generate(""));
  expect_refused(r, "a NUL byte at offset");
  EXPECT_NE(r.err.find("transformer/config.json"), std::string::npos) << r.err;
}

TEST_F(Hardening, AHugeTokenizerFileIsRefusedFromItsSize) {
  const fs::path sp = fs::path(model()) / "tokenizer" / "spiece.model";
  grow_sparse(sp, uintmax_t{1} << 30);
  expect_refused(xdit(generate("")), "tokenizer file");
}

TEST_F(Hardening, AHugeRefIsRefusedFromItsSize) {
  const fs::path refs = dir_ / "hub" / "models--acme--tiny" / "refs";
  fs::create_directories(refs);
  std::ofstream(refs / "main") << "";
  grow_sparse(refs / "main", uintmax_t{1} << 30);
  const auto r =
      test::run_command(std::string("env XDIT_QUIET=1 OMP_NUM_THREADS=1 HF_HUB_CACHE='") +
                            (dir_ / "hub").string() + "' '" + XDIT_BINARY +
                            "' generate --model acme/tiny --prompt x -o '" + path("out.png") + "'",
                        path("stderr.txt"));
  expect_refused(r, "at most 4096 are read", {"hub"});
}

TEST_F(Hardening, HugeLatentsAreRefusedFromTheirSize) {
  std::ofstream(path("latents.safetensors")) << "";
  grow_sparse(path("latents.safetensors"), uintmax_t{3} << 30);
  expect_refused(xdit(generate("--latents '" + path("latents.safetensors") + "'")),
                 "--latents file", {"latents.safetensors"});
}

TEST_F(Hardening, LatentsOfTheWrongShapeAreRefusedBeforeTheyAreRead) {
  // 1 GiB of latents (a sparse file), the wrong shape: refused from the
  // header, unread (the former code converted the whole file first).
  const std::string header =
      R"({"latents":{"dtype":"F32","shape":[1,4,1,16384,4096],"data_offsets":[0,1073741824]}})";
  {
    std::ofstream f(path("latents.safetensors"), std::ios::binary);
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header;
  }
  grow_sparse(path("latents.safetensors"), 8 + header.size() + (uintmax_t{1} << 30));
  const auto r = xdit(generate("--latents '" + path("latents.safetensors") + "'"));
  expect_refused(r, "latents have shape", {"latents.safetensors"});
  EXPECT_LT(r.max_rss_mb, 600.0) << "the latents were read";
}

// LoRA files are bounded (issue 68): a file over --max_lora_bytes is refused
// from its size before anything is read; a header that declares 1 GiB of a
// tensor no module takes is listed and refused without reading it, and with
// --lora_ignore_unmatched the LoRA applies without reading it either (it
// cost twice the tensor's size and seconds before).
TEST_F(Hardening, LoraFilesAreBoundedAndReadOnlyWhereTheyApply) {
  const io::WeightStore w(model() + "/transformer");
  const std::string mod = "transformer_blocks.0.attn1.to_q";
  const Shape q = w.shape(mod + ".weight");  // [out, in]
  const int64_t a_bytes = 2 * q[1] * 4, b_bytes = q[0] * 2 * 4;
  constexpr uint64_t kBig = uint64_t{1} << 30;
  io::Json header;
  header["transformer." + mod + ".lora_A.weight"] = {
      {"dtype", "F32"}, {"shape", {2, q[1]}}, {"data_offsets", {0, a_bytes}}};
  header["transformer." + mod + ".lora_B.weight"] = {
      {"dtype", "F32"}, {"shape", {q[0], 2}}, {"data_offsets", {a_bytes, a_bytes + b_bytes}}};
  header["transformer." + mod + ".dora_scale"] = {
      {"dtype", "F32"},
      {"shape", {kBig / 4}},
      {"data_offsets", {a_bytes + b_bytes, a_bytes + b_bytes + static_cast<int64_t>(kBig)}}};
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  const std::string lora = path("big.safetensors");
  {
    std::ofstream f(lora, std::ios::binary);
    const uint64_t n = text.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << text;
    for (const Tensor& t :
         {Tensor::from_vector(test::randn(static_cast<size_t>(2 * q[1]), 3), {2, q[1]}),
          Tensor::from_vector(test::randn(static_cast<size_t>(2 * q[0]), 4), {q[0], 2})})
      f.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  }
  grow_sparse(lora, 8 + text.size() + static_cast<uintmax_t>(a_bytes + b_bytes) + kBig);
  const std::string with = "--lora '" + lora + "' ";
  expect_refused(xdit(generate(with + "--max_lora_bytes 1000000")), "--max_lora_bytes",
                 {"big.safetensors"});
  const auto refused = xdit(generate(with));
  expect_refused(refused, "1 tensors adapt nothing xdit applies", {"big.safetensors"});
  const auto applied = xdit(generate(with + "--lora_ignore_unmatched"));
  ASSERT_EQ(applied.code, 0) << applied.err;
  EXPECT_LT(applied.max_rss_mb, 600.0) << "the unused tensor was read";
  EXPECT_NE(io::read_png(path("out.png")).text["lora"].find("; 1 unmatched skipped"),
            std::string::npos);
  const auto base = xdit(generate("", "base.png"));
  ASSERT_EQ(base.code, 0) << base.err;
  EXPECT_NE(io::read_png(path("out.png")).rgb, io::read_png(path("base.png")).rgb)
      << "the LoRA's valid adapter changes the image";
}

TEST_F(Hardening, OpenMpThreadCountsFromTheEnvironmentAreBounded) {
  for (const char* v :
       {"OMP_NUM_THREADS=100000", "OMP_NUM_THREADS=4,100000", "OMP_THREAD_LIMIT=100000"}) {
    SCOPED_TRACE(v);
    const auto r = test::run_command(
        std::string("env XDIT_QUIET=1 ") + v + " '" + XDIT_BINARY + "' " + generate(""),
        path("stderr.txt"));
    expect_refused(r, "as for --threads");
  }
}

// --- silent fallbacks -----------------------------------------------------

TEST_F(Hardening, FormerSilentFallbacksAreRefused) {
  expect_refused(xdit(generate("--num_inference_steps -1")), "--num_inference_steps");
  expect_refused(xdit(generate("--max_sequence_length 0")), "--max_sequence_length");
  expect_refused(xdit(generate("--patch_weights 1e308")), "--patch_weights must be numbers in");
  expect_refused(xdit("bench transformer --resolutions -512"), "--resolutions");
  const auto r = xdit("bench --row attention:abc:bf16");
  expect_refused(r, "--row: RES 'abc' is not a whole number");
  EXPECT_EQ(r.err.find("stoll"), std::string::npos) << r.err;
}

TEST_F(Hardening, ANanAttentionMaskIsRefused) {
  auto emb = test::randn(1 * 7 * 32, 5);
  std::vector<float> mask(7, 1.0f);
  mask[3] = std::nanf("");
  io::write_safetensors(path("embeds.safetensors"),
                        {{"prompt_embeds", Tensor::from_vector(emb, {1, 7, 32})},
                         {"prompt_attention_mask", Tensor::from_vector(mask, {1, 7})}});
  expect_refused(
      xdit("generate --model '" + model() + "' --prompt_embeds '" + path("embeds.safetensors") +
           "' --guidance_scale 1 --height 48 --width 80 " + "-o '" + path("out.png") + "'"),
      "prompt_attention_mask hold 1 NaN/Inf", {"embeds.safetensors"});
}

// --- model files ------------------------------------------------------------

TEST_F(Hardening, AFifoAsTheShardedIndexIsRefusedAtOnce) {
  const fs::path t = fs::path(model()) / "transformer";
  fs::remove(t / "diffusion_pytorch_model.safetensors.index.json");  // the tiny model is sharded
  ASSERT_EQ(::mkfifo((t / "diffusion_pytorch_model.safetensors.index.json").c_str(), 0666), 0);
  // (timeout: the former code waited for a writer forever)
  const auto r = test::run_command("timeout 20 env XDIT_QUIET=1 OMP_NUM_THREADS=1 '" +
                                       std::string(XDIT_BINARY) + "' " + generate(""),
                                   path("stderr.txt"));
  expect_refused(r, "is not a regular file");
}

TEST_F(Hardening, AllZeroVaeWeightsWarnOfAFlatImage) {
  // Every VAE weight zeroed: the decoder gives one flat colour for anything.
  const fs::path vae = fs::path(model()) / "vae";
  for (const auto& e : fs::directory_iterator(vae)) {
    if (e.path().extension() != ".safetensors") continue;
    std::vector<std::pair<std::string, Tensor>> zeroed;
    for (auto& [name, t] : io::read_safetensors_f32(e.path().string()))
      zeroed.emplace_back(name, Tensor::zeros(t.shape()));
    io::write_safetensors(e.path().string(), zeroed);
  }
  const auto r = xdit(generate(""));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: the VAE decoder produced 1 of 1 image(s) of one flat colour"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace xdit
