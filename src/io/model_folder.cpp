#include "io/model_folder.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace xdit::io {

namespace fs = std::filesystem;

ModelFolder::ModelFolder(std::string root) : root_(std::move(root)) {
  XDIT_CHECK(fs::is_directory(root_), "model folder ", root_,
             " does not exist (pass a diffusers pipeline folder with --model)");
  const std::string idx = (fs::path(root_) / "model_index.json").string();
  XDIT_CHECK(fs::is_regular_file(idx), "model folder ", root_,
             " has no model_index.json (is it a diffusers pipeline folder?)");
  index_ = std::make_shared<Json>(read_json_file(idx));
  XDIT_CHECK(index_->is_object(), idx, " is not a JSON object");
}

const Json& ModelFolder::model_index() const {
  return *index_;
}

std::string ModelFolder::pipeline_class() const {
  auto it = index_->find("_class_name");
  return it != index_->end() && it->is_string() ? it->get<std::string>() : std::string{};
}

std::string ModelFolder::component(const std::string& name) const {
  const fs::path p = fs::path(root_) / name;
  XDIT_CHECK(fs::is_directory(p), "model folder ", root_, " has no ", name, "/ subfolder");
  return p.string();
}

Json ModelFolder::component_config(const std::string& name, const std::string& file) const {
  return read_json_file((fs::path(component(name)) / file).string());
}

}  // namespace xdit::io
