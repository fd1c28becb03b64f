#include "serve/private_paths.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace xdit::serve {

void PrivatePaths::add(const std::string& folder, const std::string& shown_as) {
  std::error_code ec;
  // A folder only (a Hugging Face id is not one), as given and canonical.
  if (folder.empty() || !std::filesystem::is_directory(folder, ec)) return;
  std::vector<std::string> forms = {folder};
  const std::filesystem::path canonical = std::filesystem::canonical(folder, ec);
  if (!ec) forms.push_back(canonical.string());
  if (std::filesystem::path(folder).is_relative()) {
    const std::filesystem::path absolute = std::filesystem::absolute(folder, ec);
    if (!ec) forms.push_back(absolute.lexically_normal().string());
  }
  for (std::string f : forms) {
    while (f.size() > 1 && f.back() == '/') f.pop_back();
    folders_.emplace_back(f + "/", shown_as);
  }
  // Longest first: a folder inside another is replaced before its parent.
  std::sort(folders_.begin(), folders_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

std::string PrivatePaths::shown(const std::string& message) const {
  // A folder where a path starts: the message's start, or after a space, a
  // quote or an opening bracket (not "r/" inside "transformer/").
  const auto starts_path = [](const std::string& s, size_t at) {
    return at == 0 || std::string(" '\"([=,:").find(s[at - 1]) != std::string::npos;
  };
  std::string out = message;
  for (const auto& [folder, as] : folders_)
    for (size_t at = out.find(folder); at != std::string::npos; at = out.find(folder, at + 1)) {
      if (!starts_path(out, at)) continue;
      out.replace(at, folder.size(), as);
    }
  return out;
}

}  // namespace xdit::serve
