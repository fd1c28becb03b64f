// Qwen2's tokenizer (Qwen-Image's Qwen2.5-VL, Z-Image's and FLUX.2 [klein]'s
// Qwen3): byte-level BPE, as transformers' Qwen2Tokenizer tokenizes
// tokenizer(text) — no special tokens added, right padding:
//   - from the folder's tokenizer.json (model BPE, its vocabulary, merges and
//     added tokens, the Split pattern of its pre-tokenizer), or, where the
//     folder has none, from vocab.json + merges.txt with tokenizer_config.json's
//     added_tokens_decoder and Qwen2's own pattern;
//   - added tokens (<|im_start|>, <|im_end|>, <|endoftext|>, …) split out
//     whole: those marked normalized=false on the raw text, the others after
//     normalization;
//   - normalization: Unicode NFC;
//   - pre-tokenization: the pattern's matches and the stretches between them,
//     each piece's UTF-8 bytes through GPT-2's bytes_to_unicode table;
//     Qwen2's pattern is
//       (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
//       ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//     (its \s is Oniguruma's, Unicode White_Space: given to ICU as such);
//   - BPE by merge rank (byte_bpe.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizers/byte_bpe.h"
#include "tokenizers/tokens.h"

namespace xdit::tokenizers {

class QwenTokenizer {
 public:
  // `folder` holds tokenizer_config.json naming Qwen2Tokenizer, and
  // tokenizer.json or vocab.json + merges.txt. A tokenizer of another kind,
  // a missing or malformed file, or a merge of unknown symbols throws one
  // line naming the file.
  explicit QwenTokenizer(const std::string& folder);
  ~QwenTokenizer();

  // The ids of `text` (none added: Qwen2 has no BOS).
  std::vector<int32_t> tokenize(const std::string& text) const;
  // At most max_length of them, right-padded to max_length with the pad
  // token; the mask marks the real ones.
  Tokens encode(const std::string& text, int64_t max_length) const;
  std::vector<std::string> pieces(const std::vector<int32_t>& ids) const;

  int64_t model_max_length() const { return model_max_length_; }
  int32_t pad_id() const { return pad_; }
  int32_t eos_id() const { return eos_; }
  int32_t vocab_size() const { return static_cast<int32_t>(bpe_.size()); }
  // The id of an added token's text, -1 when there is none.
  int32_t added_id(const std::string& content) const;

 private:
  struct Regex;  // the ICU pattern
  void read_tokenizer_json(const std::string& path, std::string& pattern);
  void read_vocab_and_merges(const std::string& folder);
  void encode_plain(const std::string& text, std::vector<int32_t>& out) const;

  ByteBpe bpe_;
  std::vector<AddedToken> added_;
  int32_t pad_ = -1, eos_ = -1;
  int64_t model_max_length_ = 32768;
  std::unique_ptr<Regex> regex_;
};

}  // namespace xdit::tokenizers
