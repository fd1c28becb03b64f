#!/usr/bin/env python3
"""WanPipeline's prompt_clean on awkward prompts (character references,
Unicode white space), as diffusers runs it without ftfy installed.

    python3 tools/goldens/make_prompt_clean.py      # from the repository root

Writes tests/data/wan/prompt_clean.json: {"cases": [[prompt, cleaned], ...]}
and the versions.
"""
import json
import sys

import diffusers
from diffusers.pipelines.wan import pipeline_wan
from diffusers.utils import is_ftfy_available

assert not is_ftfy_available(), "run without ftfy: xdit cleans as diffusers does without it"
PROMPTS = [
    "A cat &amp; a dog", "&amp;lt;b&amp;gt;bold&amp;lt;/b&amp;gt;", "&notit; &notin; &not",
    "caf&eacute; &Eacute;T&Eacute;", "&#x1F600; &#128512 &#X41;&#65;", "&#0;&#x80;&#x9F;&#13;",
    "&#xD800; &#99999999999999999999; &#1;&#x7f;end", "&unknown; &ampx &AMP &copy2023",
    "&# &#x; &#xyz; & alone; &;", "  lead\tand\n\ntrail  ", "a\u3000b\u00a0c\u2028d\x1ce\x85f",
    "&" + "\u00e9" * 40 + ";", "&amp" + "x" * 40 + ";", "&lt&gt&quot;&apos;", "no references here",
    "&Afr;&NotNestedGreaterGreater;&frac34&frac345", "&#x00000041;&#000066;", "\u00e9&eacute\u00e9",
    "   ", "&nbsp;&nbsp;x&nbsp;", "&ThinSpace;y&#x2003;z",
]
cases = [[p, pipeline_wan.prompt_clean(p)] for p in PROMPTS]
with open("tests/data/wan/prompt_clean.json", "w") as f:
    json.dump({"python": sys.version.split()[0], "diffusers": diffusers.__version__,
               "cases": cases}, f, ensure_ascii=True, indent=1)
for p, c in cases:
    print(repr(p), "->", repr(c))
