#include "tokenizers/byte_bpe.h"

#include <unicode/unistr.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace xdit::tokenizers {

const std::vector<std::string>& byte_symbols() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      icu::UnicodeString(static_cast<UChar32>(printable ? b : next++)).toUTF8String(t[b]);
    }
    return t;
  }();
  return table;
}

void ByteBpe::add_token(const std::string& token, int32_t id) {
  XDIT_CHECK(id >= 0, "a vocabulary id must be non-negative, got ", id, " for \"", token, "\"");
  vocab_[token] = id;
  note_piece(id, token);
}

void ByteBpe::note_piece(int32_t id, const std::string& text) {
  if (id < 0) return;
  if (static_cast<size_t>(id) >= id_to_token_.size())
    id_to_token_.resize(static_cast<size_t>(id) + 1);
  id_to_token_[static_cast<size_t>(id)] = text;
}

void ByteBpe::add_merge(const std::string& a, const std::string& b, const std::string& where) {
  for (const std::string& s : {a, b, a + b})
    XDIT_CHECK(vocab_.count(s) != 0, where, ": the merge \"", a, " ", b, "\" names \"", s,
               "\", which is not in the vocabulary");
  merge_rank_.emplace(a + " " + b, static_cast<int32_t>(merge_rank_.size()));
}

int32_t ByteBpe::find(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it != vocab_.end() ? it->second : -1;
}

std::string ByteBpe::piece(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < id_to_token_.size()
             ? id_to_token_[static_cast<size_t>(id)]
             : std::string("<?>");
}

void ByteBpe::encode(const std::string& piece, const std::string& suffix, int32_t unk,
                     std::vector<int32_t>& out) const {
  const auto& table = byte_symbols();
  std::vector<std::string> sym;
  sym.reserve(piece.size());
  for (const unsigned char b : piece) sym.push_back(table[b]);
  if (sym.empty()) return;
  sym.back() += suffix;
  std::string key;
  while (sym.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    for (size_t k = 0; k + 1 < sym.size(); ++k) {
      key.assign(sym[k]).append(" ").append(sym[k + 1]);
      const auto it = merge_rank_.find(key);
      if (it != merge_rank_.end() && it->second < best) best = it->second;
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    std::vector<std::string> next;
    next.reserve(sym.size());
    for (size_t k = 0; k < sym.size(); ++k) {
      if (k + 1 < sym.size()) {
        key.assign(sym[k]).append(" ").append(sym[k + 1]);
        const auto it = merge_rank_.find(key);
        if (it != merge_rank_.end() && it->second == best) {
          next.push_back(sym[k] + sym[k + 1]);
          ++k;
          continue;
        }
      }
      next.push_back(sym[k]);
    }
    sym.swap(next);
  }
  for (const std::string& s : sym) {
    const int32_t id = find(s);
    if (id >= 0)
      out.push_back(id);
    else if (unk >= 0)
      out.push_back(unk);
  }
}

void split_at_added(const std::vector<AddedToken>& added, const std::string& text, bool normalized,
                    const std::function<void(const std::string&)>& plain,
                    std::vector<int32_t>& out) {
  size_t start = 0, i = 0;
  const auto flush = [&](size_t end) {
    if (end > start) plain(text.substr(start, end - start));
  };
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& t : added)
      if (t.normalized == normalized && !t.content.empty() &&
          text.compare(i, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    flush(i);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  flush(text.size());
}

void longest_first(std::vector<AddedToken>& added) {
  std::stable_sort(added.begin(), added.end(), [](const AddedToken& x, const AddedToken& y) {
    return x.content.size() > y.content.size();
  });
}

}  // namespace xdit::tokenizers
