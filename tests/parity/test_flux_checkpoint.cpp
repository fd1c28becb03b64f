// FLUX.1's original (BFL) layout under diffusers' names
// (models/flux_checkpoint.h) against diffusers' own converter at FLUX.1's
// real widths (tools/goldens/make_flux_checkpoint.py): every weight of two
// double and two single blocks, the embedders and the final layer comes
// from the same original tensor, rows and halves.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "models/flux_checkpoint.h"

namespace xdit {
namespace {

TEST(FluxCheckpoint, OriginalRowsAreDiffusersConversion) {
  std::ifstream in(std::string(XDIT_TEST_DATA) + "/flux_checkpoint/rows.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  const int64_t inner = golden["inner_dim"], mlp = golden["mlp_hidden"];
  ASSERT_GE(golden["rows"].size(), 100u);
  for (const auto& [name, want] : golden["rows"].items()) {
    SCOPED_TRACE(name);
    const auto got = models::flux_original_rows(name, inner, mlp);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->name, want[0].get<std::string>());
    EXPECT_EQ(got->begin, want[1].get<int64_t>());
    EXPECT_EQ(got->count < 0 ? want[4].get<int64_t>() : got->count, want[2].get<int64_t>());
    EXPECT_EQ(got->swap_halves, want[3].get<bool>());
  }
  // Names FLUX.1 has not.
  for (const char* n : {"transformer_blocks.0.attn.norm_q.bias", "pos_embed.weight",
                        "single_transformer_blocks.1.ff.net.2.weight", "proj_out"})
    EXPECT_FALSE(models::flux_original_rows(n, inner, mlp).has_value()) << n;
}

}  // namespace
}  // namespace xdit
