// Qwen2's byte-level BPE tokenizer against transformers' Qwen2Tokenizer
// (tools/goldens/make_qwen_tokenizer.py): a tiny trained vocabulary with
// Qwen2's normalizer, pattern and added tokens, read from tokenizer.json and
// from vocab.json + merges.txt, on a battery of prompts — unicode (NFC of a
// combining accent, CJK, emoji), digits, runs of white space and line
// breaks, contractions in upper case, added tokens inside the text, Qwen-Image's
// and Z-Image's templates, a long prompt. Then padding, and folders of
// another kind refused in one line.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/json.h"
#include "test_util.h"
#include "tokenizers/qwen_tokenizer.h"

namespace xdit::tokenizers {
namespace {

const std::string kDir = std::string(XDIT_TEST_DATA) + "/qwen";

TEST(QwenTokenizer, BatteryMatchesTransformers) {
  const io::Json battery = io::read_json_file(kDir + "/tokenizer_battery.json");
  for (const char* folder : {"tokenizer", "tokenizer_slow"}) {
    SCOPED_TRACE(folder);
    const QwenTokenizer tok(kDir + "/" + folder);
    EXPECT_EQ(tok.added_id("<|im_start|>"), 1);
    EXPECT_EQ(tok.pad_id(), tok.added_id("<|endoftext|>"));
    const auto& prompts = battery["prompts"];
    ASSERT_EQ(prompts.size(), battery["ids"].size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string p = prompts[i].get<std::string>();
      EXPECT_EQ(tok.tokenize(p), battery["ids"][i].get<std::vector<int32_t>>())
          << "prompt " << i << ": \"" << p << "\"";
    }
  }
}

TEST(QwenTokenizer, PadsAndTruncatesOnTheRight) {
  const QwenTokenizer tok(kDir + "/tokenizer");
  const std::vector<int32_t> body = tok.tokenize("a red fox in the snow");
  ASSERT_GT(body.size(), 3u);
  Tokens t = tok.encode("a red fox in the snow", static_cast<int64_t>(body.size()) + 4);
  EXPECT_EQ(std::vector<int32_t>(t.ids.begin(), t.ids.begin() + static_cast<long>(body.size())),
            body);
  for (size_t k = body.size(); k < t.ids.size(); ++k) {
    EXPECT_EQ(t.ids[k], tok.pad_id());
    EXPECT_EQ(t.mask[k], 0);
  }
  EXPECT_FALSE(t.truncated());
  t = tok.encode("a red fox in the snow", 3);
  EXPECT_EQ(t.ids, std::vector<int32_t>(body.begin(), body.begin() + 3));
  EXPECT_TRUE(t.truncated());
  EXPECT_EQ(tok.pieces({tok.added_id("<|im_end|>")}), std::vector<std::string>{"<|im_end|>"});
}

// A copy of the fast folder with one file replaced.
std::string broken(const std::string& file, const std::string& text) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("xdit_qwen_tok_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  std::filesystem::copy(kDir + "/tokenizer", dir);
  std::ofstream(dir + "/" + file) << text;
  return dir;
}

TEST(QwenTokenizer, TokenizersOfAnotherKindAreOneLine) {
  const auto err = [](const std::string& dir) {
    return test::error_message([&] { QwenTokenizer t(dir); });
  };
  EXPECT_NE(err(broken("tokenizer_config.json", R"({"tokenizer_class": "T5Tokenizer"})"))
                .find("tokenizer_class T5Tokenizer is not a Qwen2 tokenizer"),
            std::string::npos);
  io::Json j = io::read_json_file(kDir + "/tokenizer/tokenizer.json");
  j["model"]["type"] = "Unigram";
  EXPECT_NE(err(broken("tokenizer.json", j.dump())).find("model type Unigram"), std::string::npos);
  j = io::read_json_file(kDir + "/tokenizer/tokenizer.json");
  j["pre_tokenizer"] = io::Json{{"type", "Whitespace"}};
  EXPECT_NE(err(broken("tokenizer.json", j.dump())).find("not byte-level"), std::string::npos);
  j = io::read_json_file(kDir + "/tokenizer/tokenizer.json");
  j["model"]["merges"].push_back(io::Json::array({"zz", "qq"}));
  EXPECT_NE(err(broken("tokenizer.json", j.dump())).find("not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(err(kDir + "/no-such-folder").find("tokenizer_config.json is missing"),
            std::string::npos);
}

}  // namespace
}  // namespace xdit::tokenizers
