// The CLIP tokenizer against transformers' CLIPTokenizer
// (tools/goldens/make_clip.py): ids, masks and untruncated lengths of a
// battery of prompts (punctuation, digits, contractions, non-ASCII, NFC,
// emoji, white space runs, special-token text, over-long prompts) for a
// FLUX-style folder (pad <|endoftext|>) and an SD3 tokenizer_2-style one
// (pad "!", which transformers also splits out of the text); bad folders.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>

#include <fstream>

#include "core/error.h"
#include "io/json.h"
#include "test_util.h"
#include "tokenizers/clip_tokenizer.h"

namespace xdit::tokenizers {
namespace {

namespace fs = std::filesystem;
const std::string kClip = std::string(XDIT_TEST_DATA) + "/clip";

TEST(ClipTokenizer, MatchesTransformersOnEveryPrompt) {
  const io::Json g = io::read_json_file(std::string(XDIT_TEST_DATA) + "/goldens/clip_tokens.json");
  const auto& prompts = g["prompts"];
  ASSERT_GE(prompts.size(), 15u);
  for (const char* name : {"tokenizer", "tokenizer_2"}) {
    const ClipTokenizer tok(kClip + "/" + name);
    const io::Json& want = g[name];
    EXPECT_EQ(tok.pad_id(), want["pad_token_id"].get<int32_t>()) << name;
    EXPECT_EQ(tok.bos_id(), want["bos_token_id"].get<int32_t>()) << name;
    EXPECT_EQ(tok.eos_id(), want["eos_token_id"].get<int32_t>()) << name;
    EXPECT_EQ(tok.model_max_length(), 77);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string p = prompts[i].get<std::string>();
      const Tokens t = tok.encode(p, 77);
      EXPECT_EQ(t.ids, want["input_ids"][i].get<std::vector<int32_t>>())
          << name << " prompt " << i << ": \"" << p << "\"";
      EXPECT_EQ(t.mask, want["attention_mask"][i].get<std::vector<uint8_t>>()) << name << " " << i;
      EXPECT_EQ(t.untruncated, want["untruncated"][i].get<int64_t>()) << name << " " << i;
    }
  }
}

TEST(ClipTokenizer, ShorterLengthsTruncateKeepingEos) {
  const ClipTokenizer tok(kClip + "/tokenizer");
  const Tokens full = tok.encode("a photo of a cat sitting on a mat", 77);
  const Tokens t = tok.encode("a photo of a cat sitting on a mat", 5);
  ASSERT_EQ(t.ids.size(), 5u);
  EXPECT_EQ(std::vector<int32_t>(t.ids.begin(), t.ids.begin() + 4),
            std::vector<int32_t>(full.ids.begin(), full.ids.begin() + 4));
  EXPECT_EQ(t.ids.back(), tok.eos_id());
  EXPECT_TRUE(t.truncated());
  EXPECT_FALSE(full.truncated());
  EXPECT_EQ(tok.pieces({full.ids[1]}), std::vector<std::string>{"a</w>"});
}

// A scratch copy of the tokenizer folder with one file replaced.
std::string broken(const std::string& file, const std::string& content) {
  const fs::path dir = fs::temp_directory_path() / ("xdit_clip_tok_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(kClip + "/tokenizer", dir);
  if (content.empty())
    fs::remove(dir / file);
  else
    std::ofstream(dir / file, std::ios::trunc) << content;
  return dir.string();
}

TEST(ClipTokenizer, BadFoldersGetOneLineNamingTheFile) {
  const auto err = [](const std::string& dir) {
    return test::error_message([&] { ClipTokenizer t(dir); });
  };
  EXPECT_NE(err(broken("vocab.json", "")).find("vocab.json is missing"), std::string::npos);
  EXPECT_NE(err(broken("merges.txt", "")).find("merges.txt is missing"), std::string::npos);
  EXPECT_NE(err(broken("vocab.json", "[1, 2]")).find("vocab.json must be a JSON object"),
            std::string::npos);
  EXPECT_NE(err(broken("vocab.json", "{\"a\": 1")).find("vocab.json"), std::string::npos);
  EXPECT_NE(err(broken("merges.txt", "#version: 0.2\na b c\n"))
                .find("merges.txt line 2: \"a b c\" is not two symbols"),
            std::string::npos);
  EXPECT_NE(err(broken("merges.txt", "#version: 0.2\nab\n")).find("is not two symbols"),
            std::string::npos);
  EXPECT_NE(err(broken("merges.txt", "#version: 0.2\nq \xc3\xa9\xc3\xa9\n"))
                .find("which is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(err(broken("tokenizer_config.json", R"({"tokenizer_class": "T5Tokenizer"})"))
                .find("tokenizer_class T5Tokenizer is not a CLIP tokenizer"),
            std::string::npos);
  // A T5 (SentencePiece) folder where a CLIP one belongs.
  EXPECT_NE(err(std::string(XDIT_MODELS) + "/pixart-alpha-tiny/tokenizer")
                .find("this folder holds a SentencePiece model"),
            std::string::npos);
  fs::remove_all(fs::temp_directory_path() / ("xdit_clip_tok_" + std::to_string(::getpid())));
}

}  // namespace
}  // namespace xdit::tokenizers
