// A diffusers pipeline folder: model_index.json naming the components, one
// subfolder per component (transformer/, scheduler/, vae/, text_encoder/, ...).
#pragma once

#include <memory>
#include <string>

#include "io/json.h"

namespace xdit::io {

class ModelFolder {
 public:
  // Checks that `root` is a folder with a readable model_index.json.
  explicit ModelFolder(std::string root);

  const std::string& root() const { return root_; }
  const Json& model_index() const;
  // The pipeline class named in model_index.json ("PixArtAlphaPipeline", ...).
  std::string pipeline_class() const;
  // Path of a component subfolder; throws if it is missing.
  std::string component(const std::string& name) const;
  // A component's JSON config (e.g. ("transformer", "config.json")).
  Json component_config(const std::string& name, const std::string& file) const;

 private:
  std::string root_;
  std::shared_ptr<Json> index_;
};

}  // namespace xdit::io
