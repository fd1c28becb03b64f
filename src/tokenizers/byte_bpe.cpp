#include "tokenizers/byte_bpe.h"

#include <unicode/unistr.h>

#include <algorithm>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/file.h"

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

void read_vocab_json(ByteBpe& bpe, const std::string& path) {
  const io::Json vocab = io::read_json_file(path);
  XDIT_CHECK(vocab.is_object() && !vocab.empty(), path,
             " must be a JSON object mapping tokens to ids");
  for (const auto& [token, id] : vocab.items()) {
    XDIT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                   id.get<int64_t>() < std::numeric_limits<int32_t>::max(),
               path, ": the id of \"", token, "\" is not a non-negative integer");
    bpe.add_token(token, static_cast<int32_t>(id.get<int64_t>()));
  }
}

void read_merges_txt(ByteBpe& bpe, const std::string& path) {
  std::istringstream in(io::read_small_file(path, io::kMaxJsonFileBytes, "tokenizer file"));
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if ((line_no == 1 && line.rfind("#version", 0) == 0) || line.empty()) continue;
    const size_t sp = line.find(' ');
    XDIT_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() &&
                   line.find(' ', sp + 1) == std::string::npos,
               path, " line ", line_no, ": \"", line, "\" is not two symbols");
    bpe.add_merge(line.substr(0, sp), line.substr(sp + 1),
                  path + " line " + std::to_string(line_no));
  }
  XDIT_CHECK(!in.bad(), "cannot read ", path);
}

std::vector<AddedToken> added_tokens_decoder(const io::Json& cfg, const std::string& where,
                                             bool normalized) {
  std::vector<AddedToken> added;
  if (!cfg.contains("added_tokens_decoder") || cfg["added_tokens_decoder"].is_null()) return added;
  const io::Json& dec = cfg["added_tokens_decoder"];
  XDIT_CHECK(dec.is_object(), where, ": added_tokens_decoder must be an object");
  for (const auto& [key, t] : dec.items()) {
    XDIT_CHECK(t.is_object() && t.contains("content") && t["content"].is_string(), where,
               ": added_tokens_decoder[\"", key, "\"] has no \"content\"");
    int32_t id = -1;
    try {
      id = static_cast<int32_t>(std::stol(key));
    } catch (const std::exception&) {
    }
    XDIT_CHECK(id >= 0, where, ": added_tokens_decoder key \"", key, "\" is not an id");
    added.push_back(
        {t["content"].get<std::string>(), id, io::bool_or(t, "normalized", normalized, where)});
  }
  return added;
}

std::string special_token_text(const io::Json& j, const std::string& key,
                               const std::string& fallback, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  const io::Json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  XDIT_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), where, ": ", key,
             " must be a string or an object with \"content\"");
  return v["content"].get<std::string>();
}

}  // namespace xdit::tokenizers
