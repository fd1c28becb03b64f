// What the byte-level BPE tokenizers (CLIP's, Qwen2's) share: GPT-2's
// bytes_to_unicode table, the vocabulary and merge ranks, the merge loop,
// and the split of a text at its added tokens. No Debian package implements
// these tokenizers (libsentencepiece is a different algorithm), so the BPE
// is written here; ICU provides normalization and the pre-tokenizers' regex
// classes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/json.h"

namespace xdit::tokenizers {

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to
// U+0100 onwards in byte order; the UTF-8 text of each byte's symbol.
const std::vector<std::string>& byte_symbols();

class ByteBpe {
 public:
  // Vocabulary entries and merges (in rank order, the first the strongest);
  // a merge of symbols not in the vocabulary throws one line naming `where`.
  void add_token(const std::string& token, int32_t id);
  void add_merge(const std::string& a, const std::string& b, const std::string& where);
  // A piece's UTF-8 bytes as byte symbols (`suffix` appended to the last:
  // CLIP's "</w>"), merged by rank — the lowest-ranked adjacent pair
  // everywhere, left to right, until none merges (a trained merge list
  // ranks a pair above the merges that made its parts, so this equals the
  // tokenizers library's heap order) — and appended to `out` as ids (a
  // symbol missing from the vocabulary as `unk`; dropped when unk < 0).
  void encode(const std::string& piece, const std::string& suffix, int32_t unk,
              std::vector<int32_t>& out) const;
  // -1 when absent.
  int32_t find(const std::string& token) const;
  // The id's vocabulary string ("<?>" for an unknown id); names an added
  // token once noted.
  std::string piece(int32_t id) const;
  void note_piece(int32_t id, const std::string& text);
  size_t size() const { return id_to_token_.size(); }
  size_t merges() const { return merge_rank_.size(); }

 private:
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "a b" → rank
};

// A token matched whole before pre-tokenization (special tokens, and the
// folder's added tokens): on the raw text unless `normalized`, then on the
// normalized text.
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool normalized = false;
};

// Splits `text` at the added tokens of one pass (`normalized`: those marked
// so; `added` longest first, so that one containing another wins), leftmost
// first: each hit's id goes to `out`, each stretch between them to `plain`.
void split_at_added(const std::vector<AddedToken>& added, const std::string& text, bool normalized,
                    const std::function<void(const std::string&)>& plain,
                    std::vector<int32_t>& out);

// Sorts added tokens longest first (stable).
void longest_first(std::vector<AddedToken>& added);

// The files of a transformers tokenizer folder, each throwing one line
// naming the file: vocab.json (tokens → ids) into `bpe`; merges.txt ("a b"
// a line, a "#version" first line skipped) into `bpe`'s merges;
// tokenizer_config.json's added_tokens_decoder (none when absent), an entry
// without "normalized" taking `normalized`; a special token's text (a
// string or an object with "content"; `fallback` when absent or null).
void read_vocab_json(ByteBpe& bpe, const std::string& path);
void read_merges_txt(ByteBpe& bpe, const std::string& path);
std::vector<AddedToken> added_tokens_decoder(const io::Json& cfg, const std::string& where,
                                             bool normalized);
std::string special_token_text(const io::Json& j, const std::string& key,
                               const std::string& fallback, const std::string& where);

}  // namespace xdit::tokenizers
