// Where xdit serve finds the LoRAs a request names: one folder given at
// start (--lora_dir). A request names a file in it, never a path.
#pragma once

#include <string>
#include <vector>

namespace xdit::serve {

class LoraDir {
 public:
  LoraDir() = default;  // none: every request's `loras` is refused
  // Checks `dir` is a folder (throws xdit::Error with one line otherwise).
  explicit LoraDir(const std::string& dir);
  bool enabled() const { return !root_.empty(); }
  const std::string& path() const { return root_; }

  // The file a request's LoRA `name` is: "style" or "style.safetensors" in
  // the folder. A name with a '/', "..", a NUL byte, an absolute path, a
  // missing file, or a symbolic link that leads out of the folder throws
  // BadRequest(400, "loras").
  std::string resolve(const std::string& name) const;
  // The resolved files of a request's LoRAs; throws BadRequest(400, "loras")
  // when two name the same file (it would apply twice).
  std::vector<std::string> resolve_all(const std::vector<std::string>& names) const;

 private:
  std::string root_;  // canonical
};

}  // namespace xdit::serve
