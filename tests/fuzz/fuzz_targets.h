// The fuzz targets: one function per loader, fed arbitrary bytes. Each must
// either succeed or throw xdit::Error; anything else (a crash, a sanitizer
// report, another exception) is a finding. They are linked twice: into
// libFuzzer binaries built with clang (libfuzzer/, coverage-guided runs) and
// into test_fuzz_corpus, which replays the committed corpora and every past
// finding on each test run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdit::fuzz {

// A safetensors file: the header checks, every tensor read back.
void safetensors_bytes(const uint8_t* data, size_t size);
// A config.json: parsed as each model's config (transformer, T5, VAE,
// scheduler); what parses is used as the engine uses it (weight lists,
// parameter counts, the schedule, the memory estimate).
void config_bytes(const uint8_t* data, size_t size);

}  // namespace xdit::fuzz
