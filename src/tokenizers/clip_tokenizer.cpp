#include "tokenizers/clip_tokenizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"

namespace xdit::tokenizers {

namespace fs = std::filesystem;

struct ClipTokenizer::Regex {
  std::unique_ptr<icu::RegexPattern> split;
};

namespace {

// The pre-tokenizer of transformers' CLIPTokenizer. \s there is Oniguruma's,
// which is Unicode White_Space; ICU's own \s is narrower, hence the property.
constexpr const char* kSplit =
    R"(<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|)"
    R"([^\p{White_Space}\p{L}\p{N}]+)";

std::string utf8(const icu::UnicodeString& u) {
  std::string s;
  u.toUTF8String(s);
  return s;
}

}  // namespace

ClipTokenizer::ClipTokenizer(const std::string& folder) : regex_(std::make_unique<Regex>()) {
  const std::string vocab_path = folder + "/vocab.json", merges_path = folder + "/merges.txt";
  XDIT_CHECK(
      fs::is_regular_file(vocab_path), vocab_path,
      " is missing: a CLIP tokenizer folder has vocab.json and merges.txt",
      fs::exists(folder + "/spiece.model") ? " (this folder holds a SentencePiece model)" : "");
  XDIT_CHECK(fs::is_regular_file(merges_path), merges_path,
             " is missing: a CLIP tokenizer folder has vocab.json and merges.txt");

  // Configuration first: a folder of another kind is refused before the vocabulary loads.
  io::Json cfg = io::Json::object(), map = io::Json::object();
  const std::string cfg_path = folder + "/tokenizer_config.json",
                    map_path = folder + "/special_tokens_map.json";
  if (fs::is_regular_file(cfg_path)) {
    cfg = io::read_json_file(cfg_path);
    io::require_object(cfg, cfg_path);
    const std::string cls = io::string_or(cfg, "tokenizer_class", "CLIPTokenizer", cfg_path);
    XDIT_CHECK(cls == "CLIPTokenizer" || cls == "CLIPTokenizerFast", cfg_path, ": tokenizer_class ",
               cls, " is not a CLIP tokenizer (CLIPTokenizer expected here)");
    const double max_len = io::number_or(cfg, "model_max_length", 77, cfg_path);
    // transformers writes 1e30 for "no limit"; CLIP's position table has 77.
    model_max_length_ = max_len >= 1 && max_len < 1e9 ? static_cast<int64_t>(max_len) : 77;
  }
  if (fs::is_regular_file(map_path)) {
    map = io::read_json_file(map_path);
    io::require_object(map, map_path);
  }

  read_vocab_json(bpe_, vocab_path);
  read_merges_txt(bpe_, merges_path);
  // Added tokens: the folder's added_tokens_decoder, then the special tokens
  // (transformers registers them too, not normalized unless listed).
  added_ = added_tokens_decoder(cfg, cfg_path, true);
  const auto special = [&](const char* key, const char* fallback) {
    const std::string text =
        special_token_text(cfg, key, special_token_text(map, key, fallback, map_path), cfg_path);
    for (const AddedToken& t : added_)
      if (t.content == text) return t.id;
    const int32_t id = bpe_.find(text);
    XDIT_CHECK(id >= 0, folder, ": the ", key, " \"", text,
               "\" is neither in vocab.json nor in added_tokens_decoder");
    added_.push_back({text, id, false});
    return id;
  };
  bos_ = special("bos_token", "<|startoftext|>");
  eos_ = special("eos_token", "<|endoftext|>");
  unk_ = special("unk_token", "<|endoftext|>");
  pad_ = special("pad_token", "<|endoftext|>");
  for (const AddedToken& t : added_) bpe_.note_piece(t.id, t.content);
  longest_first(added_);  // one added token containing another wins

  UErrorCode st = U_ZERO_ERROR;
  UParseError pe;
  regex_->split.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kSplit), 0, pe, st));
  XDIT_CHECK(U_SUCCESS(st), "ICU cannot compile the CLIP pre-tokenizer pattern: ", u_errorName(st));
}

ClipTokenizer::~ClipTokenizer() = default;

// Normalization: NFC, white space runs → " ", lower case per character.
std::string ClipTokenizer::normalize(const std::string& text) const {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(st);
  XDIT_CHECK(U_SUCCESS(st), "ICU has no NFC normalizer: ", u_errorName(st));
  const icu::UnicodeString n = nfc->normalize(icu::UnicodeString::fromUTF8(text), st);
  XDIT_CHECK(U_SUCCESS(st), "ICU cannot normalize the prompt: ", u_errorName(st));
  icu::UnicodeString norm;
  bool in_space = false;
  for (int32_t k = 0; k < n.length();) {
    const UChar32 c = n.char32At(k);
    k += U16_LENGTH(c);
    if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) {
      if (!in_space) norm.append(static_cast<UChar>(' '));
      in_space = true;
      continue;
    }
    in_space = false;
    icu::UnicodeString one(c);
    norm.append(one.toLower(icu::Locale::getRoot()));
  }
  return utf8(norm);
}

// Pre-tokenizer and BPE on normalized text without added tokens.
void ClipTokenizer::encode_plain(const std::string& text, std::vector<int32_t>& out) const {
  UErrorCode st = U_ZERO_ERROR;
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
  std::unique_ptr<icu::RegexMatcher> m(regex_->split->matcher(u, st));
  XDIT_CHECK(U_SUCCESS(st), "ICU regex matcher: ", u_errorName(st));
  while (m->find(st) && U_SUCCESS(st)) bpe_.encode(utf8(m->group(st)), "</w>", unk_, out);
  XDIT_CHECK(U_SUCCESS(st), "ICU regex: ", u_errorName(st));
}

std::vector<int32_t> ClipTokenizer::tokenize(const std::string& text) const {
  // Added tokens on the raw text, then (normalized) on each stretch between.
  std::vector<int32_t> out;
  split_at_added(
      added_, text, false,
      [&](const std::string& raw) {
        split_at_added(
            added_, normalize(raw), true, [&](const std::string& n) { encode_plain(n, out); }, out);
      },
      out);
  return out;
}

Tokens ClipTokenizer::encode(const std::string& text, int64_t max_length) const {
  XDIT_CHECK(max_length >= 2, "a CLIP token sequence needs room for BOS and EOS, got length ",
             max_length);
  const std::vector<int32_t> body = tokenize(text);
  Tokens t;
  t.untruncated = static_cast<int64_t>(body.size()) + 2;
  const size_t keep = std::min(body.size(), static_cast<size_t>(max_length - 2));
  t.ids.reserve(static_cast<size_t>(max_length));
  t.ids.push_back(bos_);
  t.ids.insert(t.ids.end(), body.begin(), body.begin() + static_cast<std::ptrdiff_t>(keep));
  t.ids.push_back(eos_);
  t.mask.assign(t.ids.size(), 1);
  t.ids.resize(static_cast<size_t>(max_length), pad_);
  t.mask.resize(static_cast<size_t>(max_length), 0);
  return t;
}

std::vector<std::string> ClipTokenizer::pieces(const std::vector<int32_t>& ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const int32_t id : ids) out.push_back(bpe_.piece(id));
  return out;
}

}  // namespace xdit::tokenizers
