// The T5 tokenizer as PixArt's pipelines call it: SentencePiece (the folder's
// spiece.model) + EOS, truncated and padded to a maximum length, with the
// attention mask. Matches transformers' T5Tokenizer for
// tokenizer(text, padding="max_length", max_length=N, truncation=True,
// add_special_tokens=True) after diffusers' clean_caption=False preprocessing
// (lowercase and strip).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizers/tokens.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace xdit::tokenizers {

class T5Tokenizer {
 public:
  // `folder` is the pipeline's tokenizer/ folder (spiece.model inside).
  explicit T5Tokenizer(const std::string& folder);
  ~T5Tokenizer();

  Tokens encode(const std::string& text, int64_t max_length) const;
  // Pieces of ids (for warnings about truncated text).
  std::string decode(const std::vector<int32_t>& ids) const;
  // The piece of each id ("▁cat", "</s>", "<extra_id_0>"), for display.
  std::vector<std::string> pieces(const std::vector<int32_t>& ids) const;
  int32_t vocab_size() const;  // SentencePiece pieces (T5's 100 extra ids come after)
  // The longest text the encoder accepts: tokenizer_config.json's
  // model_max_length, or T5's 512 where that file has none or transformers'
  // "no limit" placeholder (1e30).
  int64_t model_max_length() const { return model_max_length_; }

  static constexpr int32_t kPad = 0, kEos = 1;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int64_t model_max_length_ = 512;
};

// diffusers' caption preprocessing with clean_caption=False: text.lower().strip(),
// as Python does them (full Unicode lower-casing with the final-sigma rule,
// Python's white space), through ICU.
std::string lower_strip(const std::string& text);

}  // namespace xdit::tokenizers
