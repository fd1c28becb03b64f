// WanPipeline's prompt_clean against diffusers (tools/goldens/make_prompt_clean.py):
// double html.unescape (named references, the longest known prefix, numeric
// references remapped, dropped or replaced, ';' optional), strip, and runs of
// white space collapsed as the `regex` module's \s does.
#include <gtest/gtest.h>

#include "io/json.h"
#include "tokenizers/prompt_clean.h"

namespace xdit::tokenizers {
namespace {

TEST(PromptClean, WanMatchesDiffusers) {
  const io::Json j = io::read_json_file(std::string(XDIT_TEST_DATA) + "/wan/prompt_clean.json");
  const auto& cases = j.at("cases");
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    const std::string in = c.at(0).get<std::string>(), want = c.at(1).get<std::string>();
    EXPECT_EQ(wan_prompt_clean(in), want) << "prompt: " << in;
  }
}

TEST(PromptClean, HtmlUnescapeLeavesPlainTextAlone) {
  EXPECT_EQ(html_unescape("plain text, no ampersand"), "plain text, no ampersand");
  EXPECT_EQ(html_unescape("&amp;amp;"), "&amp;");  // once
  EXPECT_EQ(html_unescape(""), "");
  // A lead byte without its continuation is a character of its own: the
  // reference after it stays whole (Python, decoding with errors="replace").
  EXPECT_EQ(html_unescape("&amp\xC3&lt;"), "&\xC3<");
  EXPECT_EQ(html_unescape("&\xE2\x82;"), "&\xE2\x82;");
}

}  // namespace
}  // namespace xdit::tokenizers
