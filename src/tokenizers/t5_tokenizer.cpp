#include "tokenizers/t5_tokenizer.h"

#include <sentencepiece_processor.h>
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <filesystem>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "tokenizers/python_text.h"

namespace xdit::tokenizers {

T5Tokenizer::T5Tokenizer(const std::string& folder)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const std::string path = (std::filesystem::path(folder) / "spiece.model").string();
  XDIT_CHECK(std::filesystem::is_regular_file(path), "tokenizer model ", path,
             " is missing (the T5 tokenizer reads tokenizer/spiece.model)");
  // Checked before SentencePiece opens it: a regular file of a sane size.
  io::check_side_file(path, io::kMaxJsonFileBytes, "tokenizer file");
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

std::string lower_strip(const std::string& text) {
  // Python's str.lower(): full Unicode case mapping with the final-sigma rule,
  // which ICU's root-locale lower-casing implements too.
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
  u.toLower(icu::Locale::getRoot());
  const auto [b, e] = python_strip_range(u);  // str.strip()
  std::string out;
  u.tempSubStringBetween(b, e).toUTF8String(out);
  return out;
}

}  // namespace xdit::tokenizers
