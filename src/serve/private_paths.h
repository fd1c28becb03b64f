// An error message as a client of xdit serve may see it: the server's own
// folders (the model's, the LoRA folder's) taken out of the paths it names.
// The whole message goes to the server's log; the answer names files as the
// client knows them ("transformer/diffusion_pytorch_model.safetensors"), not
// where the server keeps them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace xdit::serve {

class PrivatePaths {
 public:
  // Hides `folder` when it is one (as given, and its canonical and absolute
  // forms): a path under it — where a path starts — is shown as `shown_as`
  // + its part below the folder.
  void add(const std::string& folder, const std::string& shown_as);
  // `message` with every known folder replaced.
  std::string shown(const std::string& message) const;

 private:
  std::vector<std::pair<std::string, std::string>> folders_;  // "/srv/m/" → "model/", longest first
};

}  // namespace xdit::serve
