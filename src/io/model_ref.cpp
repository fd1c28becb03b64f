#include "io/model_ref.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"

namespace xdit::io {

namespace fs = std::filesystem;

namespace {

// huggingface_hub's repo id rules: ORG/NAME of letters, digits, '-', '_' and
// '.', no "--" or ".." (they would be ambiguous in the cache's folder names).
bool valid_part(const std::string& s) {
  if (s.empty() || s.size() > 96 || s.find("--") != std::string::npos ||
      s.find("..") != std::string::npos || s.front() == '.' || s.front() == '-')
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

bool is_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// A ref holds a 40-character hash: a larger file is refused before it is read.
constexpr size_t kMaxRefBytes = 4096;

std::string read_ref(const fs::path& p) {
  const std::string text = read_small_file(p.string(), kMaxRefBytes, "Hugging Face cache ref");
  const size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return text.substr(b, text.find_first_of(" \t\r\n", b) - b);
}

// The first symlink under `dir` (in name order) whose target is missing.
std::string first_broken_link(const fs::path& dir) {
  std::vector<fs::path> broken;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    std::error_code e2;
    if (it->is_symlink(e2) && !fs::exists(it->path(), e2)) broken.push_back(it->path());
  }
  if (broken.empty()) return {};
  return std::min_element(broken.begin(), broken.end())->string();
}

std::string download_hint(const std::string& id) {
  return "download it with `huggingface-cli download " + id + "` (or `hf download " + id +
         "`); xdit never downloads by itself";
}

}  // namespace

std::string ModelRef::describe() const {
  if (!from_cache()) return folder;
  return id + "@" + revision + " (snapshot " + commit + ", " + folder + ")";
}

std::string hf_hub_cache() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c != nullptr && *c != '\0') return c;
  if (const char* h = std::getenv("HF_HOME"); h != nullptr && *h != '\0')
    return (fs::path(h) / "hub").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home != nullptr ? home : "/") / ".cache" / "huggingface" / "hub").string();
}

ModelRef resolve_model(const std::string& ref) {
  std::error_code ec;
  const fs::file_status st = fs::status(ref, ec);
  XDIT_CHECK(!ec || ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory,
             "cannot access model folder ", ref, ": ", ec.message());
  if (fs::is_directory(st)) return {ref, "", "", ""};
  XDIT_CHECK(!fs::exists(st), "--model ", ref, " is a file, not a diffusers pipeline folder");
  // ORG/NAME[@REVISION]
  const size_t at = ref.find('@');
  const std::string id = ref.substr(0, at);
  const std::string revision = at == std::string::npos ? "main" : ref.substr(at + 1);
  const size_t slash = id.find('/');
  const bool id_like = !id.empty() && id.front() != '/' && slash != std::string::npos &&
                       id.find('/', slash + 1) == std::string::npos;
  if (!id_like || ref.front() == '.' || ref.front() == '/')
    XDIT_FAIL("model folder ", ref,
              " does not exist (pass a diffusers pipeline folder, or a Hugging Face repo id "
              "ORG/NAME[@REVISION] that is in the local cache)");
  XDIT_CHECK(valid_part(id.substr(0, slash)) && valid_part(id.substr(slash + 1)), "--model ", ref,
             " is neither a folder nor a Hugging Face repo id (ORG/NAME of letters, digits, '-', "
             "'_' and '.', without '..' or '--')");
  XDIT_CHECK(!revision.empty() && revision.find("..") == std::string::npos &&
                 revision.front() != '/' && revision.find('\0') == std::string::npos,
             "--model ", ref, ": revision '", revision, "' is not a branch, tag or commit hash");
  const fs::path cache = hf_hub_cache();
  const fs::path repo = cache / ("models--" + id.substr(0, slash) + "--" + id.substr(slash + 1));
  XDIT_CHECK(fs::is_directory(repo, ec), "model ", id,
             " is neither a folder nor in the Hugging Face cache (looked in ", repo.string(),
             "): ", download_hint(id));
  std::string commit = revision;
  if (!is_hash(revision)) {
    const fs::path r = repo / "refs" / revision;
    XDIT_CHECK(fs::is_regular_file(r, ec), "model ", id, ": the cache has no revision '", revision,
               "' (no ", r.string(), "): ", download_hint(id + " --revision " + revision));
    commit = read_ref(r);
    XDIT_CHECK(is_hash(commit), r.string(), " does not hold a commit hash");
  }
  const fs::path snap = repo / "snapshots" / commit;
  XDIT_CHECK(fs::is_directory(snap, ec), "model ", id, "@", revision, ": snapshot ", commit,
             " is not in the cache (", snap.string(), " is missing): ", download_hint(id));
  const std::string broken = first_broken_link(snap);
  XDIT_CHECK(broken.empty(), "model ", id, "@", revision, ": ", broken,
             " points to a blob that is missing (an interrupted download?): ", download_hint(id));
  return {snap.string(), id, revision, commit};
}

std::vector<CachedModel> list_cached_models() {
  std::vector<CachedModel> out;
  const fs::path cache = hf_hub_cache();
  std::error_code ec;
  if (!fs::is_directory(cache, ec)) return out;
  for (const auto& repo : fs::directory_iterator(cache, ec)) {
    const std::string dir = repo.path().filename().string();
    if (dir.rfind("models--", 0) != 0 || !repo.is_directory()) continue;
    const std::string rest = dir.substr(8);
    const size_t sep = rest.find("--");
    if (sep == std::string::npos) continue;
    const std::string id = rest.substr(0, sep) + "/" + rest.substr(sep + 2);
    std::vector<std::pair<std::string, std::string>> refs;  // (name, commit)
    const fs::path refs_dir = repo.path() / "refs";
    for (auto it = fs::recursive_directory_iterator(refs_dir, ec); !ec && it != fs::end(it);
         it.increment(ec))
      if (it->is_regular_file()) try {
          refs.emplace_back(fs::relative(it->path(), refs_dir).string(), read_ref(it->path()));
        } catch (const Error&) {  // an unreadable or oversized ref names no snapshot
        }
    for (const auto& snap : fs::directory_iterator(repo.path() / "snapshots", ec)) {
      const fs::path index = snap.path() / "model_index.json";
      if (!fs::is_regular_file(index, ec)) continue;
      CachedModel m;
      m.id = id;
      m.commit = snap.path().filename().string();
      m.folder = snap.path().string();
      try {
        m.pipeline_class = string_or(read_json_file(index.string()), "_class_name", "", index);
      } catch (const Error&) {
        m.pipeline_class = "(unreadable model_index.json)";
      }
      for (const auto& [name, commit] : refs)
        if (commit == m.commit) m.refs.push_back(name);
      std::set<fs::path> blobs;
      for (auto it = fs::recursive_directory_iterator(snap.path(), ec); !ec && it != fs::end(it);
           it.increment(ec)) {
        std::error_code e2;
        const fs::path real = fs::canonical(it->path(), e2);
        if (!e2 && fs::is_regular_file(real, e2) && blobs.insert(real).second)
          m.bytes += fs::file_size(real, e2);
      }
      out.push_back(std::move(m));
    }
  }
  std::sort(out.begin(), out.end(), [](const CachedModel& a, const CachedModel& b) {
    return std::tie(a.id, a.commit) < std::tie(b.id, b.commit);
  });
  return out;
}

}  // namespace xdit::io
