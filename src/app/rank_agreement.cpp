#include "app/rank_agreement.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file.h"

namespace xdit::app {

namespace fs = std::filesystem;

namespace {

uint64_t digest_of(const std::string& bytes) {
  return std::hash<std::string>{}(bytes);  // the same binary on every rank
}

// Up to `limit` bytes of `f` from `offset` (fewer at its end).
std::string read_bytes(std::ifstream& f, uint64_t offset, uint64_t limit) {
  std::string s(limit, '\0');
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(s.data(), static_cast<std::streamsize>(limit));
  s.resize(static_cast<size_t>(std::max<std::streamsize>(0, f.gcount())));
  return s;
}

Digest digest_file(const std::string& name, const fs::path& p) {
  constexpr uint64_t kWhole = 16ull << 20;  // files read whole up to this size
  const uint64_t size = fs::file_size(p);
  std::string key = std::to_string(size);
  if (size <= kWhole) {
    key += '\0' + io::read_small_file(p.string(), kWhole, name);
  } else if (p.extension() == ".safetensors") {
    std::ifstream f(p, std::ios::binary);
    XDIT_CHECK(f.good(), "cannot read ", p.string());
    uint64_t header = 0;  // little-endian length, then the JSON header
    const std::string n = read_bytes(f, 0, 8);
    if (n.size() == 8) std::memcpy(&header, n.data(), 8);
    key += '\0' + read_bytes(f, 8, std::min(header, kWhole));
  }
  return {name, digest_of(key)};
}

}  // namespace

void check_ranks_agree(comm::Communicator& world, const std::vector<Digest>& mine,
                       const std::string& verb, const std::string& why) {
  if (world.size() == 1) return;
  // Rank 0's list, as text, to every rank.
  std::ostringstream os;
  for (const Digest& d : mine) os << d.name << '\0' << d.value << '\n';
  std::string list = world.rank() == 0 ? os.str() : std::string();
  uint64_t n = list.size();
  world.broadcast(&n, sizeof n, comm::Type::kByte, 0);
  list.resize(n);
  world.broadcast(list.data(), n, comm::Type::kByte, 0);
  std::vector<Digest> first;
  std::istringstream is(list);
  for (std::string name, value; std::getline(is, name, '\0') && std::getline(is, value);)
    first.push_back({name, std::stoull(value)});
  // The first entry where this rank differs (-1: none).
  int64_t at = -1;
  for (size_t i = 0; at < 0 && i < std::max(first.size(), mine.size()); ++i)
    if (i >= first.size() || i >= mine.size() || first[i].name != mine[i].name ||
        first[i].value != mine[i].value)
      at = static_cast<int64_t>(i);
  std::vector<int64_t> all(static_cast<size_t>(world.size()));
  world.allgather(&at, all.data(), sizeof at, comm::Type::kByte);
  for (int r = 1; r < world.size(); ++r) {
    const int64_t i = all[static_cast<size_t>(r)];
    if (i < 0) continue;
    const std::string name =
        static_cast<size_t>(i) < first.size()
            ? first[static_cast<size_t>(i)].name
            : "set of entries (rank 0 has " + std::to_string(first.size()) + ")";
    XDIT_FAIL("rank ", r, " ", verb, " ", name, " than rank 0: ", why);
  }
}

std::vector<Digest> option_digests(const CLI::App& command) {
  std::vector<Digest> out = {{"subcommand", digest_of(command.get_name())}};
  for (const CLI::Option* opt : command.get_options()) {
    const std::string name = opt->get_name();
    if (name == "--help" || name == "--threads") continue;
    std::string given = std::to_string(opt->count());
    for (const std::string& v : opt->results()) given += '\0' + v;
    out.push_back({name, digest_of(given)});
  }
  return out;
}

std::vector<Digest> file_digests(const std::string& label, const std::string& path) {
  std::vector<Digest> out;
  if (!fs::is_directory(path)) {
    if (fs::is_regular_file(path)) out.push_back(digest_file(label, path));
    return out;
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(path); it != fs::end(it); ++it) {
    const std::string leaf = it->path().filename().string();
    if (!leaf.empty() && leaf[0] == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->path().extension() == ".md" || !fs::is_regular_file(it->path())) continue;
    files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files)
    out.push_back(digest_file(label + " " + fs::relative(f, path).string(), f));
  return out;
}

std::vector<Digest> plan_digests(const std::vector<pipeline::Plan>& plans) {
  std::vector<Digest> out;
  for (size_t i = 0; i < plans.size(); ++i) {
    const nlohmann::json fields = plans[i].to_json();
    for (const auto& [field, value] : fields.items())
      out.push_back({"request " + std::to_string(i) + " field " + field, digest_of(value.dump())});
  }
  return out;
}

void check_ranks_agree(comm::Communicator& world, const CLI::App& command) {
  check_ranks_agree(world, option_digests(command), "was started with a different",
                    "every rank must run the same command (only --threads may differ)");
}

void check_files_agree(comm::Communicator& world, const std::string& model_folder,
                       const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (world.size() == 1) return;
  std::vector<Digest> all = file_digests("model file", model_folder);
  for (const auto& [label, path] : inputs)
    if (!path.empty())
      for (Digest& d : file_digests(label, path)) all.push_back(std::move(d));
  check_ranks_agree(world, all, "reads a different",
                    "every rank must read the same files (copy the model folder and the inputs "
                    "to every machine)");
}

}  // namespace xdit::app
