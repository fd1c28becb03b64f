// Prompt cleaning as diffusers' pipelines do it before tokenizing.
#pragma once

#include <string>

namespace xdit::tokenizers {

// Python's html.unescape (Lib/html/__init__.py) on UTF-8 text: every
// character reference "&name;", "&#n;" or "&#xh;" replaced by its text under
// HTML5's rules (named references from HTML5's table, the longest known
// prefix of an unknown name, ';' optional where HTML allows it, the numeric
// references HTML remaps or drops), the rest as it is.
std::string html_unescape(const std::string& text);

// WanPipeline's prompt_clean (diffusers pipelines/wan/pipeline_wan.py) as it
// runs without ftfy installed: html.unescape twice, strip, every run of
// white space (Python's \s) one space, strip.
std::string wan_prompt_clean(const std::string& text);

}  // namespace xdit::tokenizers
