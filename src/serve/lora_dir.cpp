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
  if (!fs::exists(file) && file.extension() != ".safetensors") file += ".safetensors";
  std::error_code ec;
  const fs::path real = fs::canonical(file, ec);
  if (ec) bad("no such file in the server's LoRA folder");
  if (real.parent_path() != root) bad("a symbolic link out of the server's LoRA folder");
  if (!fs::is_regular_file(real)) bad("not a file");
  return real.string();
}

}  // namespace xdit::serve
