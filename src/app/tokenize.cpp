// xdit tokenize: a prompt's token ids and mask from one of a model folder's
// tokenizers, as JSON, to see where and why a prompt was cut.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "core/error.h"
#include "io/json.h"
#include "io/model_ref.h"
#include "tokenizers/clip_tokenizer.h"
#include "tokenizers/qwen_tokenizer.h"
#include "tokenizers/t5_tokenizer.h"

namespace xdit::app {

namespace {

struct TokenizeOptions {
  std::string model, tokenizer = "tokenizer", prompt;
  int64_t max_length = 0;
};

int run_tokenize(const TokenizeOptions& o) {
  const io::ModelRef ref = io::resolve_model(o.model.empty() ? default_model_dir() : o.model);
  const std::string dir = ref.folder + "/" + o.tokenizer;
  namespace fs = std::filesystem;
  XDIT_CHECK(fs::is_directory(dir), ref.describe(), " has no ", o.tokenizer, "/ folder");
  // Qwen2's folders name their class (and may hold vocab.json + merges.txt too).
  bool qwen = false;
  if (fs::is_regular_file(dir + "/tokenizer_config.json")) {
    const io::Json cfg = io::read_json_file(dir + "/tokenizer_config.json");
    qwen = cfg.is_object() && cfg.contains("tokenizer_class") &&
           cfg["tokenizer_class"].is_string() &&
           cfg["tokenizer_class"].get<std::string>().rfind("Qwen2Tokenizer", 0) == 0;
  }
  const bool clip = !qwen && (fs::is_regular_file(dir + "/vocab.json") ||
                              fs::is_regular_file(dir + "/merges.txt"));
  const bool t5 = !qwen && fs::is_regular_file(dir + "/spiece.model");
  XDIT_CHECK(qwen || clip || t5, dir,
             " is not a tokenizer folder xdit reads (no vocab.json + merges.txt for CLIP, no "
             "spiece.model for T5, no tokenizer_config.json naming Qwen2Tokenizer)");
  tokenizers::Tokens t;
  std::vector<std::string> pieces;
  int64_t max_length = o.max_length;
  std::string kind;
  if (qwen) {
    const tokenizers::QwenTokenizer tok(dir);
    // No padding asked: the prompt's own length (Qwen2 adds no special tokens).
    if (max_length == 0) max_length = std::max<int64_t>(1, tok.tokenize(o.prompt).size());
    t = tok.encode(o.prompt, max_length);
    pieces = tok.pieces(t.ids);
    kind = "qwen2";
  } else if (clip) {
    const tokenizers::ClipTokenizer tok(dir);
    if (max_length == 0) max_length = tok.model_max_length();
    t = tok.encode(o.prompt, max_length);
    pieces = tok.pieces(t.ids);
    kind = "clip";
  } else {
    const tokenizers::T5Tokenizer tok(dir);
    if (max_length == 0) max_length = tok.model_max_length();
    t = tok.encode(o.prompt, max_length);
    pieces = tok.pieces(t.ids);
    kind = "t5";
  }
  int64_t real = 0;
  for (const uint8_t m : t.mask) real += m;
  const nlohmann::ordered_json j = {{"tokenizer", o.tokenizer},
                                    {"kind", kind},
                                    {"max_length", max_length},
                                    {"length", real},
                                    {"untruncated", t.untruncated},
                                    {"truncated", t.truncated()},
                                    {"ids", t.ids},
                                    {"mask", t.mask},
                                    {"tokens", pieces}};
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

std::function<int()> add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* t = app.add_subcommand(
      "tokenize",
      "print a prompt's token ids and mask as JSON, as transformers' tokenizer(prompt, "
      "padding=\"max_length\", max_length=N, truncation=True) gives them");
  t->add_option("--model", o->model,
                "diffusers folder or Hugging Face repo id ORG/NAME[@REVISION] in the local cache "
                "(default: the built-in tiny model)");
  t->add_option("--tokenizer", o->tokenizer, "which of the folder's tokenizers")
      ->check(CLI::IsMember({"tokenizer", "tokenizer_2", "tokenizer_3"}))
      ->capture_default_str();
  t->add_option("--prompt", o->prompt, "the text to tokenize")->required();
  t->add_option("--max_sequence_length,--max-length", o->max_length,
                "padded length (default: the tokenizer's model_max_length: 77 for CLIP; Qwen2: the "
                "prompt's own length)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 16));
  return [o] { return run_tokenize(*o); };
}

}  // namespace xdit::app
