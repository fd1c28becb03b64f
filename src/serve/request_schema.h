// The HTTP service's requests in one place: each endpoint's fields (name,
// JSON type, bounds, meaning), the parser that turns a JSON body into the
// pipeline's ImageRequest (the same struct `xdit generate` fills from its
// flags, checked afterwards by the same planner, Pipeline::plan), and the OpenAPI
// document generated from the same tables (committed as docs/openapi.json;
// a test keeps the two equal).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/request.h"

namespace xdit::serve {

enum class Endpoint {
  kGenerate,  // POST /generate: xDiT's http-service body and response
  kImages,    // POST /v1/images/generations: OpenAI's shape plus our extras
};

const char* endpoint_path(Endpoint e);

enum class FieldType {
  kString,
  kInteger,
  kNumber,
  kLoras,  // [{"name": string, "scale": number}], at most `max` items
};

struct Field {
  std::string name;
  FieldType type = FieldType::kString;
  bool required = false;
  double min = 0, max = 0;           // numbers: the value; strings: the length in bytes
  std::vector<std::string> allowed;  // strings: the values taken (empty: any)
  std::string pattern;               // strings: an ECMA regex the value must match
  std::string description;
  bool min_exclusive = false;  // numbers: above `min`, not at it
};

// The fields an endpoint's body takes; any other field is refused.
const std::vector<Field>& fields(Endpoint e);

// A request the service refuses before it reaches the queue: the HTTP status
// (400, or 413 for a body over the limit), the field at fault (empty for
// the body as a whole) and one line saying what is wrong and what to send.
class BadRequest : public std::runtime_error {
 public:
  BadRequest(int status, std::string field, const std::string& message)
      : std::runtime_error(message), status_(status), field_(std::move(field)) {}
  int status() const { return status_; }
  const std::string& field() const { return field_; }

 private:
  int status_;
  std::string field_;
};

// What a body asks for.
struct ServeRequest {
  Endpoint endpoint = Endpoint::kGenerate;
  pipeline::ImageRequest image;               // n copies of the prompt under /v1 (one noise batch)
  std::optional<std::string> save_disk_path;  // /generate: a folder to write the PNG into
  // `loras`: names in the server's --lora_dir, scales and whether what
  // matches nothing is skipped, which the server resolves into image.loras
  // (serve/lora_dir.h).
  struct Lora {
    std::string name;
    double scale = 1.0;
    bool ignore_unmatched = false;
  };
  std::vector<Lora> loras;
};

// The largest body the service reads (a prompt is text; 1 MiB is plenty).
constexpr size_t kMaxBodyBytes = size_t{1} << 20;

// Parses and checks `body` against the endpoint's fields; throws BadRequest.
// Omitted fields keep the pipeline's defaults (the model's steps, guidance
// and size, as diffusers and `xdit generate`), seed 42.
ServeRequest parse_request(Endpoint e, const std::string& body);

// The error body every endpoint answers with:
// {"error": {"message", "type", "param", "code"}} (OpenAI's shape).
nlohmann::json error_body(int status, const std::string& message, const std::string& field = "");

// RFC 4648 base64 (the images in JSON responses).
std::string base64_encode(const std::vector<uint8_t>& bytes);

// The OpenAPI 3.0 document of the service (every endpoint, the request
// schemas from fields(), the responses).
nlohmann::json openapi();

}  // namespace xdit::serve
