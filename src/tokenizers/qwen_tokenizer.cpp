#include "tokenizers/qwen_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <filesystem>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"

namespace xdit::tokenizers {

namespace fs = std::filesystem;

struct QwenTokenizer::Regex {
  std::unique_ptr<icu::RegexPattern> split;
};

namespace {

// Qwen2Tokenizer's pre-tokenizer pattern (transformers' PRETOKENIZE_REGEX).
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";

// An Oniguruma pattern for ICU: \s and \S are Unicode White_Space there,
// [\t\n\f\r\p{Z}] in ICU (no VT, no NEL).
std::string for_icu(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      if (c == 's' || c == 'S') {
        out += c == 's' ? R"(\p{White_Space})" : R"(\P{White_Space})";
      } else {
        out += pattern.substr(i, 2);
      }
      ++i;
      continue;
    }
    out += pattern[i];
  }
  return out;
}

std::string utf8_of(const icu::UnicodeString& u) {
  std::string s;
  u.toUTF8String(s);
  return s;
}

int32_t checked_id(const io::Json& v, const std::string& what, const std::string& where) {
  XDIT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 &&
                 v.get<int64_t>() < std::numeric_limits<int32_t>::max(),
             where, ": the id of ", what, " is not a non-negative integer");
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

QwenTokenizer::QwenTokenizer(const std::string& folder) : regex_(std::make_unique<Regex>()) {
  const std::string cfg_path = folder + "/tokenizer_config.json",
                    json_path = folder + "/tokenizer.json";
  XDIT_CHECK(fs::is_regular_file(cfg_path), cfg_path,
             " is missing: a Qwen2 tokenizer folder has tokenizer_config.json");
  const io::Json cfg = io::read_json_file(cfg_path);
  io::require_object(cfg, cfg_path);
  const std::string cls = io::string_or(cfg, "tokenizer_class", "", cfg_path);
  XDIT_CHECK(cls == "Qwen2Tokenizer" || cls == "Qwen2TokenizerFast", cfg_path, ": tokenizer_class ",
             cls.empty() ? "(none)" : cls,
             " is not a Qwen2 tokenizer (Qwen2Tokenizer expected here)");
  const double max_len = io::number_or(cfg, "model_max_length", 32768, cfg_path);
  if (max_len >= 1 && max_len < 1e9) model_max_length_ = static_cast<int64_t>(max_len);

  std::string pattern = kQwen2Pattern;
  if (fs::is_regular_file(json_path))
    read_tokenizer_json(json_path, pattern);
  else
    read_vocab_and_merges(folder);
  // tokenizer_config.json's added tokens (where tokenizer.json named none
  // of them, or there is no tokenizer.json).
  for (const AddedToken& t : added_tokens_decoder(cfg, cfg_path, false))
    if (added_id(t.content) < 0) added_.push_back(t);
  for (const AddedToken& t : added_) bpe_.note_piece(t.id, t.content);
  longest_first(added_);
  const auto special = [&](const char* key) {
    const std::string text = special_token_text(cfg, key, "", cfg_path);
    if (text.empty()) return -1;
    int32_t id = added_id(text);
    if (id < 0) id = bpe_.find(text);
    XDIT_CHECK(id >= 0, cfg_path, ": the ", key, " \"", text,
               "\" is neither an added token nor in the vocabulary");
    return id;
  };
  eos_ = special("eos_token");
  pad_ = special("pad_token");
  if (pad_ < 0) pad_ = eos_;

  UErrorCode st = U_ZERO_ERROR;
  UParseError pe;
  regex_->split.reset(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(for_icu(pattern)), 0, pe, st));
  XDIT_CHECK(U_SUCCESS(st), folder, ": ICU cannot compile the pre-tokenizer pattern (",
             u_errorName(st), ")");
}

QwenTokenizer::~QwenTokenizer() = default;

void QwenTokenizer::read_tokenizer_json(const std::string& path, std::string& pattern) {
  const io::Json j = io::read_json_file(path);
  io::require_object(j, path);
  XDIT_CHECK(j.contains("model") && j["model"].is_object(), path, ": no \"model\"");
  const io::Json& m = j["model"];
  const std::string type = io::string_or(m, "type", "BPE", path);
  XDIT_CHECK(type == "BPE", path, ": model type ", type,
             " is not the byte-level BPE of a Qwen2 tokenizer");
  XDIT_CHECK(!io::bool_or(m, "byte_fallback", false, path) &&
                 (!m.contains("end_of_word_suffix") || m["end_of_word_suffix"].is_null() ||
                  m["end_of_word_suffix"] == ""),
             path, ": a BPE with byte fallback or an end-of-word suffix is not Qwen2's");
  // The pre-tokenizer: a Split by a pattern, then ByteLevel (without its own regex).
  bool byte_level = false;
  std::string split;
  const auto visit = [&](const io::Json& p) {
    if (!p.is_object()) return;
    const std::string t = io::string_or(p, "type", "", path);
    if (t == "ByteLevel") byte_level = true;
    if (t == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
        p["pattern"].contains("Regex") && p["pattern"]["Regex"].is_string())
      split = p["pattern"]["Regex"].get<std::string>();
  };
  if (j.contains("pre_tokenizer") && j["pre_tokenizer"].is_object()) {
    const io::Json& p = j["pre_tokenizer"];
    visit(p);
    if (p.contains("pretokenizers") && p["pretokenizers"].is_array())
      for (const io::Json& q : p["pretokenizers"]) visit(q);
  }
  XDIT_CHECK(byte_level, path, ": its pre-tokenizer is not byte-level: not a Qwen2 tokenizer");
  if (!split.empty()) pattern = split;
  XDIT_CHECK(m.contains("vocab") && m["vocab"].is_object() && !m["vocab"].empty(), path,
             ": model.vocab must map tokens to ids");
  for (const auto& [token, id] : m["vocab"].items())
    bpe_.add_token(token, checked_id(id, "\"" + token + "\"", path));
  XDIT_CHECK(m.contains("merges") && m["merges"].is_array(), path, ": model.merges is missing");
  size_t k = 0;
  for (const io::Json& merge : m["merges"]) {
    const std::string where = path + " merge " + std::to_string(k++);
    if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      bpe_.add_merge(merge[0].get<std::string>(), merge[1].get<std::string>(), where);
      continue;
    }
    XDIT_CHECK(merge.is_string(), where, ": a merge is a pair of symbols or \"a b\"");
    const std::string s = merge.get<std::string>();
    const size_t sp = s.find(' ');
    XDIT_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size(), where, ": \"", s,
               "\" is not two symbols");
    bpe_.add_merge(s.substr(0, sp), s.substr(sp + 1), where);
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const io::Json& t : j["added_tokens"]) {
      XDIT_CHECK(
          t.is_object() && t.contains("content") && t["content"].is_string() && t.contains("id"),
          path, ": an added token needs \"id\" and \"content\"");
      for (const char* flag : {"lstrip", "rstrip", "single_word"})
        XDIT_CHECK(!io::bool_or(t, flag, false, path), path, ": added token ",
                   t["content"].get<std::string>(), " sets ", flag,
                   ", which xdit's Qwen2 tokenizer does not apply");
      added_.push_back({t["content"].get<std::string>(),
                        checked_id(t["id"], "an added token", path),
                        io::bool_or(t, "normalized", false, path)});
    }
}

void QwenTokenizer::read_vocab_and_merges(const std::string& folder) {
  const std::string vocab_path = folder + "/vocab.json", merges_path = folder + "/merges.txt";
  XDIT_CHECK(fs::is_regular_file(vocab_path) && fs::is_regular_file(merges_path), folder,
             ": a Qwen2 tokenizer folder has tokenizer.json, or vocab.json and merges.txt");
  read_vocab_json(bpe_, vocab_path);
  read_merges_txt(bpe_, merges_path);
}

int32_t QwenTokenizer::added_id(const std::string& content) const {
  for (const AddedToken& t : added_)
    if (t.content == content) return t.id;
  return -1;
}

// The pattern's matches and the stretches between them (the Split's
// "isolated" behaviour), each through the BPE.
void QwenTokenizer::encode_plain(const std::string& text, std::vector<int32_t>& out) const {
  UErrorCode st = U_ZERO_ERROR;
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
  std::unique_ptr<icu::RegexMatcher> m(regex_->split->matcher(u, st));
  XDIT_CHECK(U_SUCCESS(st), "ICU regex matcher: ", u_errorName(st));
  int32_t at = 0;
  while (m->find(st) && U_SUCCESS(st)) {
    const int32_t b = m->start(st), e = m->end(st);
    if (b > at) bpe_.encode(utf8_of(u.tempSubStringBetween(at, b)), "", -1, out);
    bpe_.encode(utf8_of(u.tempSubStringBetween(b, e)), "", -1, out);
    at = e;
  }
  XDIT_CHECK(U_SUCCESS(st), "ICU regex: ", u_errorName(st));
  if (at < u.length()) bpe_.encode(utf8_of(u.tempSubStringBetween(at, u.length())), "", -1, out);
}

std::vector<int32_t> QwenTokenizer::tokenize(const std::string& text) const {
  std::vector<int32_t> out;
  split_at_added(
      added_, text, false,
      [&](const std::string& raw) {
        UErrorCode st = U_ZERO_ERROR;
        const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(st);
        XDIT_CHECK(U_SUCCESS(st), "ICU has no NFC normalizer: ", u_errorName(st));
        const icu::UnicodeString n = nfc->normalize(icu::UnicodeString::fromUTF8(raw), st);
        XDIT_CHECK(U_SUCCESS(st), "ICU cannot normalize the prompt: ", u_errorName(st));
        split_at_added(
            added_, utf8_of(n), true, [&](const std::string& s) { encode_plain(s, out); }, out);
      },
      out);
  return out;
}

Tokens QwenTokenizer::encode(const std::string& text, int64_t max_length) const {
  XDIT_CHECK(max_length >= 1, "a Qwen2 token sequence needs a length of at least 1, got ",
             max_length);
  XDIT_CHECK(pad_ >= 0, "this Qwen2 tokenizer names no pad or eos token to pad with");
  const std::vector<int32_t> body = tokenize(text);
  Tokens t;
  t.untruncated = static_cast<int64_t>(body.size());
  const size_t keep = std::min(body.size(), static_cast<size_t>(max_length));
  t.ids.assign(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(keep));
  t.mask.assign(t.ids.size(), 1);
  t.ids.resize(static_cast<size_t>(max_length), pad_);
  t.mask.resize(static_cast<size_t>(max_length), 0);
  return t;
}

std::vector<std::string> QwenTokenizer::pieces(const std::vector<int32_t>& ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const int32_t id : ids) out.push_back(bpe_.piece(id));
  return out;
}

}  // namespace xdit::tokenizers
