// The tiny-model table (tests/tiny_models.h) against the registry: every
// pipeline class xdit runs has a tiny model that the family-looping suites
// take, and each row's folder is the class it says.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "pipeline/model_family.h"
#include "test_util.h"
#include "tiny_models.h"

namespace xdit {
namespace {

TEST(TinyModels, EveryRegisteredPipelineHasATinyModelInTheParallelSuite) {
  std::set<std::string> covered;
  for (const test::TinyModel& m : test::tiny_models())
    if (m.suites.count(test::Suite::kParallel) > 0) covered.insert(m.pipeline);
  for (const std::string& cls : pipeline::ModelFamily::supported_pipelines())
    EXPECT_EQ(covered.count(cls), 1u)
        << cls << " is registered (pipeline/model_family.cpp) but no row of tests/tiny_models.h "
        << "runs it: add its tiny model (tools/goldens/) and a row";
}

TEST(TinyModels, EachRowIsTheFolderItNames) {
  for (const test::TinyModel& m : test::tiny_models()) {
    const std::string path = test::models_dir() + "/" + m.name + "-tiny/model_index.json";
    std::ifstream f(path);
    ASSERT_TRUE(f.good()) << path << " is missing";
    const auto index = nlohmann::json::parse(f);
    EXPECT_EQ(index.at("_class_name").get<std::string>(), m.pipeline) << path;
    EXPECT_FALSE(m.suites.empty()) << m.name << " is in no suite";
  }
}

}  // namespace
}  // namespace xdit
