#include "serve/private_paths.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace xdit::serve {

void PrivatePaths::add(const std::string& folder, const std::string& shown_as) {
  if (folder.empty()) return;
  std::vector<std::string> forms = {folder};
  std::error_code ec;
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
  std::string out = message;
  for (const auto& [folder, as] : folders_)
    for (size_t at = out.find(folder); at != std::string::npos;
         at = out.find(folder, at + as.size())) {
      out.replace(at, folder.size(), as);
    }
  return out;
}

}  // namespace xdit::serve
