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
// A GGUF file: the header, metadata and tensor table checks, every tensor
// dequantized.
void gguf_bytes(const uint8_t* data, size_t size);
// A config.json: parsed as each model's config (transformer, T5, VAE,
// scheduler); what parses is used as the engine uses it (weight lists,
// parameter counts, the schedule, the memory estimate).
void config_bytes(const uint8_t* data, size_t size);
// An HTTP request as xdit serve reads it (serve/http_server.h: the parser
// with the server's limits, the head's checks and the API key); a POST's
// body through the request schema (parse_request_body); the bytes also as a
// body of each endpoint. A refusal must be a 4xx whose body is JSON; a
// throw other than BadRequest or xdit::Error is a finding (a 500).
void http_request_bytes(const uint8_t* data, size_t size);

}  // namespace xdit::fuzz
