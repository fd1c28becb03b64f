// The CLIP tokenizer (FLUX.1's and SD3's tokenizer/ and tokenizer_2/):
// byte-level BPE from vocab.json + merges.txt, with the special tokens of
// tokenizer_config.json / special_tokens_map.json. Matches transformers'
// CLIPTokenizer (5.x, the tokenizers-library pipeline; no ftfy) for
// tokenizer(text, padding="max_length", max_length=N, truncation=True):
//   - added tokens (the special tokens, and anything in added_tokens_decoder)
//     are split out whole: those marked normalized=false on the raw text,
//     the others on the normalized text (so "<|ENDOFTEXT|>" is one);
//   - normalization: Unicode NFC, runs of white space → one space,
//     lower-casing per character (full case mapping, no final-sigma context);
//   - pre-tokenization: the CLIP regex
//       <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
//     keeping the matches, then each piece's UTF-8 bytes mapped through
//     GPT-2's bytes_to_unicode table;
//   - BPE: the piece's symbols, "</w>" on the last, merged by merge rank
//     (lowest first, leftmost among equal), symbols missing from the vocab
//     become the unknown token;
//   - BOS + at most N − 2 tokens + EOS, then padding with the folder's pad
//     token (<|endoftext|> for CLIP-L / FLUX, "!" for SD3's tokenizer_2).
//
// The BPE is byte_bpe.h's (written here: no Debian package implements it);
// ICU provides NFC, case mapping and the Unicode classes of the regex.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizers/byte_bpe.h"
#include "tokenizers/tokens.h"

namespace xdit::tokenizers {

class ClipTokenizer {
 public:
  // `folder` holds vocab.json, merges.txt and tokenizer_config.json (or
  // special_tokens_map.json). A missing or malformed file, or a merge line
  // that is not two symbols, throws one line naming the file.
  explicit ClipTokenizer(const std::string& folder);
  ~ClipTokenizer();

  Tokens encode(const std::string& text, int64_t max_length) const;
  // Token ids of `text` without BOS, EOS, truncation or padding.
  std::vector<int32_t> tokenize(const std::string& text) const;
  // The vocabulary strings of ids ("</w>" ends a word), for display.
  std::vector<std::string> pieces(const std::vector<int32_t>& ids) const;

  int64_t model_max_length() const { return model_max_length_; }
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }
  int32_t vocab_size() const { return static_cast<int32_t>(bpe_.size()); }

 private:
  struct Regex;  // ICU pattern objects

  // Normalization of a stretch without the raw pass's added tokens.
  std::string normalize(const std::string& text) const;
  void encode_plain(const std::string& text, std::vector<int32_t>& out) const;

  ByteBpe bpe_;
  std::vector<AddedToken> added_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;
  int64_t model_max_length_ = 77;
  std::unique_ptr<Regex> regex_;
};

}  // namespace xdit::tokenizers
