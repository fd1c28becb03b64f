#include "serve/lora_dir.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "serve/request_schema.h"

namespace xdit::serve {

namespace fs = std::filesystem;

LoraDir::LoraDir(const std::string& dir) {
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  XDIT_CHECK(!ec && fs::is_directory(root), "--lora_dir ", dir, ": not a folder",
             ec ? " (" + ec.message() + ")" : "");
  root_ = root.string();
}

std::string LoraDir::resolve(const std::string& name) const {
  const auto bad = [&](const std::string& why) {
    throw BadRequest(400, "loras", "LoRA '" + name + "': " + why);
  };
  if (!enabled()) bad("this server takes no LoRAs per request (start it with --lora_dir)");
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find('\0') != std::string::npos)
    bad("a name is a file of the server's LoRA folder, not a path");
  const fs::path root(root_);
  fs::path file = root / name;
  std::error_code ec;  // (the error_code forms: a name too long, say, is a 400, not a throw)
  if (!fs::exists(file, ec) && file.extension() != ".safetensors") file += ".safetensors";
  const fs::path real = fs::canonical(file, ec);
  if (ec) bad("no such file in the server's LoRA folder");
  if (real.parent_path() != root) bad("a symbolic link out of the server's LoRA folder");
  if (!fs::is_regular_file(real, ec)) bad("not a file");
  return real.string();
}

std::vector<std::string> LoraDir::resolve_all(const std::vector<std::string>& names) const {
  std::vector<std::string> files;
  for (const std::string& name : names) {
    const std::string file = resolve(name);
    for (size_t i = 0; i < files.size(); ++i)
      if (files[i] == file)
        throw BadRequest(400, "loras",
                         "LoRA '" + name + "' is the file of '" + names[i] +
                             "' again; name each LoRA once (its scale adds up the weights)");
    files.push_back(file);
  }
  return files;
}

}  // namespace xdit::serve
