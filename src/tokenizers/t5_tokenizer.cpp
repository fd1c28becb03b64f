#include "tokenizers/t5_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "core/error.h"
#include "io/json.h"

namespace xdit::tokenizers {

T5Tokenizer::T5Tokenizer(const std::string& folder)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const std::string path = (std::filesystem::path(folder) / "spiece.model").string();
  XDIT_CHECK(std::filesystem::is_regular_file(path), "tokenizer model ", path,
             " is missing (the T5 tokenizer reads tokenizer/spiece.model)");
  const auto status = sp_->Load(path);
  XDIT_CHECK(status.ok(), "cannot load SentencePiece model ", path, ": ", status.ToString());
  XDIT_CHECK(sp_->pad_id() == kPad && sp_->eos_id() == kEos, "tokenizer ", path,
             " does not use T5's special ids (pad 0, eos 1): pad ", sp_->pad_id(), ", eos ",
             sp_->eos_id());
  const std::string cfg = (std::filesystem::path(folder) / "tokenizer_config.json").string();
  if (std::filesystem::is_regular_file(cfg)) {
    const io::Json j = io::read_json_file(cfg);
    io::require_object(j, cfg);
    const double n = io::number_or(j, "model_max_length", 512, cfg);
    if (n >= 1 && n <= 1e6) model_max_length_ = static_cast<int64_t>(n);
  }
}

T5Tokenizer::~T5Tokenizer() = default;

int32_t T5Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}

Tokens T5Tokenizer::encode(const std::string& text, int64_t max_length) const {
  XDIT_CHECK(max_length >= 1, "tokenizer max_length must be positive");
  std::vector<int> pieces;
  const auto status = sp_->Encode(text, &pieces);
  XDIT_CHECK(status.ok(), "tokenizer failed on the prompt: ", status.ToString());
  Tokens t;
  t.untruncated = static_cast<int64_t>(pieces.size()) + 1;
  // Truncation keeps room for EOS (transformers truncates the pieces, then adds it).
  const size_t keep = std::min<size_t>(pieces.size(), static_cast<size_t>(max_length - 1));
  t.ids.assign(pieces.begin(), pieces.begin() + static_cast<std::ptrdiff_t>(keep));
  t.ids.push_back(kEos);
  t.mask.assign(t.ids.size(), 1);
  t.ids.resize(static_cast<size_t>(max_length), kPad);
  t.mask.resize(static_cast<size_t>(max_length), 0);
  return t;
}

std::string T5Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int> v;
  for (int32_t i : ids)
    if (i > kEos && i < sp_->GetPieceSize()) v.push_back(i);
  std::string out;
  sp_->Decode(v, &out);
  return out;
}

std::vector<std::string> T5Tokenizer::pieces(const std::vector<int32_t>& ids) const {
  const int32_t n = sp_->GetPieceSize();
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const int32_t i : ids)  // T5's sentinel ids follow the SentencePiece vocabulary, last first
    out.push_back(i >= 0 && i < n ? sp_->IdToPiece(i)
                  : i < n + 100   ? "<extra_id_" + std::to_string(n + 99 - i) + ">"
                                  : std::string("<?>"));
  return out;
}

namespace {

// Simple case mapping for the scripts prompts commonly use (Python's
// str.lower() covers all of Unicode; this covers Latin, Greek and Cyrillic).
char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;  // Latin-1
  if (c == 0x178) return 0xFF;                               // Ÿ → ÿ
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x138 && c != 0x149 && c != 0x17F) {
    // Latin Extended-A: pairs (even upper, odd lower) with two shifted ranges.
    const bool shifted = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (shifted) return (c % 2 == 1) ? c + 1 : c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;  // Greek
  if (c >= 0x410 && c <= 0x42F) return c + 32;                // Cyrillic
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace

std::string lower_strip(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + static_cast<size_t>(len) > text.size()) {  // invalid UTF-8: keep the byte
      out += text[i++];
      continue;
    }
    char32_t c = len == 1 ? b : (b & (0x7F >> len));
    for (int k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    append_utf8(out, to_lower(c));
    i += static_cast<size_t>(len);
  }
  const char* ws = " \t\n\r\f\v";
  const size_t b = out.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  return out.substr(b, out.find_last_not_of(ws) - b + 1);
}

}  // namespace xdit::tokenizers
