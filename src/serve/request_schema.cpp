#include "serve/request_schema.h"

#include <cmath>
#include <regex>

#include "core/error.h"

namespace xdit::serve {

using nlohmann::json;

namespace {

// Bounds that hold for every model; the pipeline then checks the request
// against the model, the layout and the memory left (Pipeline::validate).
constexpr double kMaxSide = 16384;    // px: larger is refused here, not by the allocator
constexpr double kMaxFrames = 65536;  // per prompt (pipeline::Pipeline::kMaxFrames)
constexpr double kMaxPromptBytes = 16384;
constexpr double kMaxSteps = 1000;
constexpr double kMaxImages = 10;  // OpenAI's limit on n
constexpr double kMaxGuidance = 100;
constexpr double kMinSeed = -9223372036854775808.0, kMaxSeed = 18446744073709551615.0;

Field string_field(std::string name, bool required, std::string description) {
  Field f{std::move(name),       FieldType::kString, required, 0, kMaxPromptBytes, {}, {},
          std::move(description)};
  return f;
}
Field number_field(std::string name, FieldType t, double lo, double hi, std::string description) {
  return Field{std::move(name), t, false, lo, hi, {}, {}, std::move(description)};
}

const Field& prompt_field() {
  static const Field f = string_field("prompt", true, "the text of the image");
  return f;
}
const Field& negative_field() {
  static const Field f = string_field(
      "negative_prompt", false,
      "what the image should not show (classifier-free guidance's other half; FLUX: with "
      "guidance above 1, true CFG)");
  return f;
}
const Field& steps_field() {
  static const Field f = number_field("num_inference_steps", FieldType::kInteger, 1, kMaxSteps,
                                      "denoising steps (default: the model's, as diffusers)");
  return f;
}
const Field& seed_field() {
  static const Field f =
      number_field("seed", FieldType::kInteger, kMinSeed, kMaxSeed,
                   "seed of the initial noise, as torch.manual_seed takes it (default 42)");
  return f;
}

// The step cache's fields, on both endpoints (pipeline/cache_settings.h).
std::vector<Field> cache_fields() {
  Field kind = string_field("cache", false,
                            "step cache: none (default), fbcache (First-Block-Cache, as "
                            "diffusers' FirstBlockCacheConfig), taylorseer "
                            "(TaylorSeerCacheConfig) or teacache (TeaCache, as xDiT's)");
  kind.max = 16;
  kind.allowed = {"none", "fbcache", "taylorseer", "teacache"};
  Field threshold = number_field("cache_threshold", FieldType::kNumber, 0, 1000,
                                 "fbcache: run every block when the first block's residual "
                                 "changed by more than this, relative (default 0.05); "
                                 "teacache: when block 0's accumulated, rescaled change "
                                 "reaches it (default 0.12)");
  threshold.min_exclusive = true;
  return {kind, threshold,
          number_field("taylorseer_interval", FieldType::kInteger, 1, 1000,
                       "taylorseer: a full step every this many after the warm-up (default 5)"),
          number_field("taylorseer_warmup", FieldType::kInteger, 0, 1000,
                       "taylorseer: the first steps run in full (default 3)"),
          number_field("taylorseer_order", FieldType::kInteger, 0, 3,
                       "taylorseer: the Taylor factors' highest order (default 1)")};
}

// LoRAs per request, by name in the server's --lora_dir (serve/lora_dir.h).
constexpr double kMaxLoras = 8, kMaxLoraScale = 100;
Field loras_field() {
  Field f;
  f.name = "loras";
  f.type = FieldType::kLoras;
  f.max = kMaxLoras;
  f.description =
      "LoRAs applied to this request only: [{\"name\": a file of the server's --lora_dir "
      "(\"style\" or \"style.safetensors\"; paths are refused), \"scale\": its weight "
      "(default 1), as diffusers' set_adapters, \"ignore_unmatched\": true to skip its tensors "
      "and modules that match nothing in the model (default false: refused, 400)}]; none: the "
      "base model";
  return f;
}

std::vector<Field> with_cache_fields(std::vector<Field> fs) {
  for (Field& f : cache_fields()) fs.push_back(std::move(f));
  fs.push_back(loras_field());
  return fs;
}

std::vector<Field> make_generate_fields() {
  return with_cache_fields(
      {prompt_field(), steps_field(), seed_field(),
       number_field("cfg", FieldType::kNumber, 0, kMaxGuidance,
                    "guidance scale (PixArt, SD3: classifier-free; FLUX.1 [dev]: embedded; "
                    "default: the model's)"),
       number_field("height", FieldType::kInteger, 1, kMaxSide,
                    "image height in px (default: the model's)"),
       number_field("width", FieldType::kInteger, 1, kMaxSide,
                    "image width in px (default: the model's)"),
       number_field("guidance_scale_2", FieldType::kNumber, 0, kMaxGuidance,
                    "Wan2.2: the second expert's (transformer_2's) guidance scale (default: "
                    "cfg)"),
       number_field("true_cfg_scale", FieldType::kNumber, 0, kMaxGuidance,
                    "FLUX.1, Qwen-Image: classifier-free guidance with negative_prompt when > 1 "
                    "(default: the model's, FLUX.1 1, Qwen-Image 4)"),
       number_field("cfg_truncation", FieldType::kNumber, 0, kMaxGuidance,
                    "Z-Image: classifier-free guidance off at the steps whose (1000 - t) / 1000 "
                    "exceeds this (default 1: never)"),
       number_field("cfg_normalization", FieldType::kNumber, 0, kMaxGuidance,
                    "Z-Image: each image's guided prediction's norm capped at this many times "
                    "its conditional prediction's (default 0: off)"),
       number_field("num_frames", FieldType::kInteger, 1, kMaxFrames,
                    "video frames per prompt (default: the model's; Wan: 4k + 1, others rounded "
                    "down to one as diffusers does); a video answers as one MP4"),
       string_field("save_disk_path", false,
                    "a folder under the server's --output_dir, named relative to it (\"\" is "
                    "that folder; '..', absolute paths, NUL bytes and symbolic links are "
                    "refused): the PNG is written there and its path returned instead of "
                    "the image"),
       negative_field()});
}

std::vector<Field> make_images_fields() {
  Field n = number_field("n", FieldType::kInteger, 1, kMaxImages,
                         "images of the prompt, one noise batch (default 1)");
  Field size = string_field("size", false, "\"WIDTHxHEIGHT\" in px (default: the model's)");
  size.max = 16;
  size.pattern = "^[1-9][0-9]{0,5}x[1-9][0-9]{0,5}$";
  Field format = string_field("response_format", false, "how images come back (default b64_json)");
  format.max = 16;
  format.allowed = {"b64_json"};
  Field model = string_field("model", false, "accepted for OpenAI clients; the served model runs");
  model.max = 256;
  Field user = string_field("user", false, "accepted for OpenAI clients; not used");
  user.max = 256;
  return with_cache_fields({prompt_field(), n, size, format, model, user, seed_field(),
                            negative_field(), steps_field(),
                            number_field("guidance_scale", FieldType::kNumber, 0, kMaxGuidance,
                                         "diffusers' guidance_scale (default: the model's)")});
}

const char* type_name(FieldType t) {
  switch (t) {
    case FieldType::kString:
      return "string";
    case FieldType::kInteger:
      return "integer";
    case FieldType::kNumber:
      return "number";
    case FieldType::kLoras:
      return "array";
  }
  return "?";
}

std::string bound(double x) {
  if (x == kMinSeed) return "-2^63";
  if (x == kMaxSeed) return "2^64-1";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", x);
  return buf;
}

std::string field_list(const std::vector<Field>& fs) {
  std::string s;
  for (const Field& f : fs) s += (s.empty() ? "" : ", ") + f.name;
  return s;
}

// Checks `v` against `f`; throws BadRequest naming the field.
void check_value(const Field& f, const json& v) {
  auto bad = [&](const std::string& what) {
    throw BadRequest(400, f.name, "field '" + f.name + "' " + what);
  };
  const std::string range = f.min_exclusive ? "(" + bound(f.min) + " … " + bound(f.max) + "]"
                                            : bound(f.min) + " … " + bound(f.max);
  switch (f.type) {
    case FieldType::kString: {
      if (!v.is_string()) bad(std::string("must be a string, got ") + v.type_name());
      const auto& s = v.get_ref<const std::string&>();
      if (static_cast<double>(s.size()) > f.max)
        bad("is " + std::to_string(s.size()) + " bytes long; at most " + bound(f.max) +
            " are taken");
      if (!f.allowed.empty()) {
        bool ok = false;
        std::string list;
        for (const auto& a : f.allowed) {
          ok = ok || s == a;
          list += (list.empty() ? "" : ", ") + a;
        }
        if (!ok) bad("must be one of: " + list + " (got '" + s + "')");
      }
      if (!f.pattern.empty() && !std::regex_match(s, std::regex(f.pattern)))
        bad("must look like 1024x768 (width x height in px), got '" + s + "'");
      return;
    }
    case FieldType::kInteger: {
      if (!v.is_number_integer()) {
        if (v.is_number_float() && std::isfinite(v.get<double>()) &&
            v.get<double>() == std::floor(v.get<double>()) && std::fabs(v.get<double>()) < 1e15)
          return check_value(f, json(static_cast<int64_t>(v.get<double>())));
        bad(std::string("must be an integer in ") + range + ", got " +
            (v.is_number() ? v.dump() : v.type_name()));
      }
      const double x = v.is_number_unsigned() ? static_cast<double>(v.get<uint64_t>())
                                              : static_cast<double>(v.get<int64_t>());
      if (x < f.min || x > f.max) bad("must be in " + range + ", got " + v.dump());
      return;
    }
    case FieldType::kNumber: {
      if (!v.is_number()) bad(std::string("must be a number, got ") + v.type_name());
      const double x = v.get<double>();
      if (!std::isfinite(x) || x < f.min || (f.min_exclusive && x == f.min) || x > f.max)
        bad("must be in " + range + ", got " + v.dump());
      return;
    }
    case FieldType::kLoras: {
      if (!v.is_array() || static_cast<double>(v.size()) > f.max)
        bad("must be an array of at most " + bound(f.max) +
            " {\"name\", \"scale\", \"ignore_unmatched\"} objects");
      for (const json& l : v) {
        if (!l.is_object() || !l.contains("name") || !l["name"].is_string() ||
            l["name"].get_ref<const std::string&>().size() > 255)
          bad("takes objects with a \"name\" (a string of at most 255 bytes), got " + l.dump());
        for (const auto& [key, x] : l.items()) {
          if (key == "name") continue;
          if (key == "ignore_unmatched") {
            if (!x.is_boolean()) bad("ignore_unmatched must be true or false, got " + x.dump());
            continue;
          }
          if (key != "scale")
            bad("takes objects of \"name\", \"scale\" and \"ignore_unmatched\", not '" + key + "'");
          if (!x.is_number() || !std::isfinite(x.get<double>()) ||
              std::fabs(x.get<double>()) > kMaxLoraScale)
            bad("scale must be a number in -" + bound(kMaxLoraScale) + " … " +
                bound(kMaxLoraScale) + ", got " + x.dump());
        }
      }
      return;
    }
  }
}

int64_t integer(const json& v) {
  return v.is_number_float() ? static_cast<int64_t>(v.get<double>()) : v.get<int64_t>();
}

uint64_t seed_of(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  return static_cast<uint64_t>(integer(v));  // torch: a negative seed wraps to 2^64 + seed
}

}  // namespace

const char* endpoint_path(Endpoint e) {
  return e == Endpoint::kGenerate ? "/generate" : "/v1/images/generations";
}

const std::vector<Field>& fields(Endpoint e) {
  static const std::vector<Field> generate = make_generate_fields();
  static const std::vector<Field> images = make_images_fields();
  return e == Endpoint::kGenerate ? generate : images;
}

ServeRequest parse_request(Endpoint e, const std::string& body) {
  if (body.size() > kMaxBodyBytes)
    throw BadRequest(413, "",
                     "the body is " + std::to_string(body.size()) + " bytes; at most " +
                         std::to_string(kMaxBodyBytes) + " are taken");
  // A NUL ends nlohmann's reading of a text: bytes after it would be
  // ignored rather than refused.
  if (const size_t nul = body.find('\0'); nul != std::string::npos)
    throw BadRequest(
        400, "",
        "the body is not valid JSON: it holds a NUL byte at offset " + std::to_string(nul));
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& err) {
    throw BadRequest(400, "", std::string("the body is not valid JSON: ") + err.what());
  }
  if (!j.is_object())
    throw BadRequest(400, "", std::string("the body must be a JSON object, got ") + j.type_name());
  const std::vector<Field>& fs = fields(e);
  for (const auto& [key, value] : j.items()) {
    const Field* f = nullptr;
    for (const Field& c : fs)
      if (c.name == key) f = &c;
    if (f == nullptr)
      throw BadRequest(
          400, key,
          "unknown field '" + key + "': " + endpoint_path(e) + " takes " + field_list(fs));
    if (value.is_null() && !f->required) continue;  // null reads as absent
    check_value(*f, value);
  }
  for (const Field& f : fs)
    if (f.required && (!j.contains(f.name) || j[f.name].is_null()))
      throw BadRequest(400, f.name, "field '" + f.name + "' is required");

  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  ServeRequest out;
  out.endpoint = e;
  pipeline::ImageRequest& r = out.image;
  const std::string prompt = j["prompt"].get<std::string>();
  r.prompts = {prompt};
  if (has("negative_prompt")) r.negative_prompt = j["negative_prompt"].get<std::string>();
  if (has("num_inference_steps")) r.num_inference_steps = integer(j["num_inference_steps"]);
  if (has("seed")) r.seed = seed_of(j["seed"]);
  if (has("cache")) r.cache.kind = pipeline::CacheSettings::parse(j["cache"].get<std::string>());
  if (has("cache_threshold")) r.cache.threshold = j["cache_threshold"].get<double>();
  if (has("taylorseer_interval")) r.cache.interval = integer(j["taylorseer_interval"]);
  if (has("taylorseer_warmup")) r.cache.warmup = integer(j["taylorseer_warmup"]);
  if (has("taylorseer_order")) r.cache.order = integer(j["taylorseer_order"]);
  if (has("loras"))
    for (const json& l : j["loras"])
      out.loras.push_back({l["name"].get<std::string>(), l.value("scale", 1.0),
                           l.value("ignore_unmatched", false)});
  if (e == Endpoint::kGenerate) {
    if (has("cfg")) r.guidance_scale = j["cfg"].get<double>();
    if (has("guidance_scale_2")) r.guidance_scale_2 = j["guidance_scale_2"].get<double>();
    if (has("true_cfg_scale")) r.true_cfg_scale = j["true_cfg_scale"].get<double>();
    if (has("cfg_truncation")) r.cfg_truncation = j["cfg_truncation"].get<double>();
    if (has("cfg_normalization")) r.cfg_normalization = j["cfg_normalization"].get<double>();
    if (has("height")) r.height = integer(j["height"]);
    if (has("width")) r.width = integer(j["width"]);
    if (has("num_frames")) r.num_frames = integer(j["num_frames"]);
    if (has("save_disk_path")) out.save_disk_path = j["save_disk_path"].get<std::string>();
  } else {
    if (has("guidance_scale")) r.guidance_scale = j["guidance_scale"].get<double>();
    if (has("n")) r.prompts.assign(static_cast<size_t>(integer(j["n"])), prompt);
    if (has("size")) {
      const std::string s = j["size"].get<std::string>();
      const size_t x = s.find('x');
      r.width = std::stoll(s.substr(0, x));
      r.height = std::stoll(s.substr(x + 1));
      if (static_cast<double>(r.width) > kMaxSide || static_cast<double>(r.height) > kMaxSide)
        throw BadRequest(
            400, "size",
            "field 'size' " + s + " is larger than " + bound(kMaxSide) + " px on a side");
    }
  }
  return out;
}

std::string base64_encode(const std::vector<uint8_t>& in) {
  // By hand: none of the project's libraries exports an encoder (cpp-httplib
  // keeps its own in detail::, outside the Debian build's API).
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint32_t{in[i]} << 16) | (uint32_t{in[i + 1]} << 8) | in[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i < in.size()) {
    const bool two = i + 1 < in.size();
    const uint32_t v = (uint32_t{in[i]} << 16) | (two ? uint32_t{in[i + 1]} << 8 : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += two ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

json error_body(int status, const std::string& message, const std::string& field) {
  const char* type = status == 400 || status == 413 ? "invalid_request_error"
                     : status == 429                ? "queue_full"
                     : status == 503                ? "unavailable"
                     : status == 504                ? "timeout"
                     : status == 404                ? "not_found"
                                                    : "server_error";
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", field.empty() ? json(nullptr) : json(field)},
            {"code", status}}}};
}

namespace {

json field_schema(const Field& f) {
  json s = {{"type", type_name(f.type)}, {"description", f.description}};
  if (f.type == FieldType::kLoras) {
    s["maxItems"] = static_cast<int64_t>(f.max);
    s["items"] = {
        {"type", "object"},
        {"additionalProperties", false},
        {"required", {"name"}},
        {"properties",
         {{"name", {{"type", "string"}, {"maxLength", 255}}},
          {"scale", {{"type", "number"}, {"minimum", -kMaxLoraScale}, {"maximum", kMaxLoraScale}}},
          {"ignore_unmatched", {{"type", "boolean"}}}}}};
  } else if (f.type == FieldType::kString) {
    s["maxLength"] = static_cast<int64_t>(f.max);
    if (!f.allowed.empty()) s["enum"] = f.allowed;
    if (!f.pattern.empty()) s["pattern"] = f.pattern;
  } else if (f.min == kMinSeed) {  // beyond a double's exact integers: say it in words
    s["description"] = f.description + "; -2^63 … 2^64-1";
  } else {
    s["minimum"] = f.type == FieldType::kInteger ? json(static_cast<int64_t>(f.min)) : json(f.min);
    if (f.min_exclusive) s["exclusiveMinimum"] = true;  // OpenAPI 3.0's form
    s["maximum"] = f.type == FieldType::kInteger ? json(static_cast<int64_t>(f.max)) : json(f.max);
  }
  return s;
}

json request_schema(Endpoint e) {
  json props = json::object(), required = json::array();
  for (const Field& f : fields(e)) {
    props[f.name] = field_schema(f);
    if (f.required) required.push_back(f.name);
  }
  return {{"type", "object"},
          {"additionalProperties", false},
          {"required", required},
          {"properties", props}};
}

json ref(const char* name) {
  return {{"$ref", std::string("#/components/schemas/") + name}};
}

json json_content(const json& schema) {
  return {{"application/json", {{"schema", schema}}}};
}

json error_responses() {
  json r = json::object();
  for (const auto& [code, what] : std::vector<std::pair<std::string, std::string>>{
           {"400",
            "the body or a field is wrong (the message names it), or the model or the "
            "parallel layout cannot serve the request"},
           {"413", "the body is over 1 MiB"},
           {"429", "the queue is full (Retry-After says when to try again)"},
           {"500", "the generation failed"},
           {"503", "the server is shutting down"},
           {"504", "the request did not finish within --request_timeout"}})
    r[code] = {{"description", what}, {"content", json_content(ref("Error"))}};
  return r;
}

json object_schema(std::vector<std::string> required, json properties) {
  return {
      {"type", "object"}, {"required", std::move(required)}, {"properties", std::move(properties)}};
}

json typed(const char* type, const char* description = nullptr) {
  json t = {{"type", type}};
  if (description != nullptr) t["description"] = description;
  return t;
}

}  // namespace

json openapi() {
  json schemas = json::object();
  schemas["GenerateRequest"] = request_schema(Endpoint::kGenerate);
  schemas["ImagesRequest"] = request_schema(Endpoint::kImages);
  json gen = json::object();
  gen["message"] = typed("string");
  gen["elapsed_time"] = typed("string", "seconds, e.g. \"1.23 sec\"");
  gen["output"] = typed("string",
                        "the PNG (a video: the H.264 MP4) in base64, or its path when "
                        "save_disk_path was given");
  gen["save_to_disk"] = typed("boolean");
  gen["parallel"] = typed("string",
                          "the layout that made the image: method, degrees, warm-up, patches, "
                          "sync mode, and exact / stale / approximate");
  gen["num_frames"] = typed("integer", "frames made (an image: 1)");
  gen["format"] = typed("string", "png, or mp4 for a video");
  gen["format"]["enum"] = json::array({"png", "mp4"});
  schemas["GenerateResponse"] = object_schema(
      {"message", "elapsed_time", "output", "save_to_disk", "parallel", "num_frames", "format"},
      gen);
  json item = json::object();
  item["b64_json"] = typed("string", "a PNG in base64");
  json data = typed("array");
  data["items"] = object_schema({"b64_json"}, item);
  json images = json::object();
  images["created"] = typed("integer", "Unix time");
  images["data"] = data;
  schemas["ImagesResponse"] = object_schema({"created", "data"}, images);
  json err = json::object();
  err["message"] = typed("string");
  err["type"] = typed("string");
  err["param"] = typed("string", "the field at fault, or null");
  err["param"]["nullable"] = true;
  err["code"] = typed("integer", "the HTTP status");
  json error = json::object();
  error["error"] = object_schema({"message", "type", "code"}, err);
  schemas["Error"] = object_schema({"error"}, error);
  auto post = [&](const char* summary, const char* req, const char* res) {
    json responses = error_responses();
    responses["200"] = {{"description", "the image"}, {"content", json_content(ref(res))}};
    json op = json::object();
    op["summary"] = summary;
    op["requestBody"] = {{"required", true}, {"content", json_content(ref(req))}};
    op["responses"] = responses;
    return json{{"post", op}};
  };
  auto get = [](const char* summary, const char* type, const json& schema) {
    json content = json::object();
    content[type] = {{"schema", schema}};
    json ok = {{"description", summary}, {"content", content}};
    json op = json::object();
    op["summary"] = summary;
    op["responses"] = {{"200", ok}};
    return json{{"get", op}};
  };
  json health = json::object();
  health["status"] = typed("string", "ok, or draining after SIGTERM");
  health["queue_depth"] = typed("integer");
  health["running"] = typed("integer");
  json models = json::object();
  models["object"] = typed("string");
  models["data"] = typed("array");
  json paths = json::object();
  paths["/generate"] = post("xDiT's http-service request", "GenerateRequest", "GenerateResponse");
  paths["/v1/images/generations"] =
      post("OpenAI's image generation request", "ImagesRequest", "ImagesResponse");
  paths["/health"] = get("whether the server takes requests, and its queue", "application/json",
                         object_schema({"status"}, health));
  paths["/v1/models"] = get("the served model, in OpenAI's list shape", "application/json",
                            object_schema({"object", "data"}, models));
  paths["/metrics"] =
      get("Prometheus text: requests by status, queue depth, seconds per stage, images per second",
          "text/plain", typed("string"));
  json info = json::object();
  info["title"] = "xdit serve";
  info["version"] = XDIT_VERSION;
  info["description"] =
      "A resident text-to-image service: the model loads once on every rank and each request "
      "runs on the whole parallel layout. Requests wait in a bounded FIFO queue.";
  json doc = json::object();
  doc["openapi"] = "3.0.3";
  doc["info"] = info;
  doc["paths"] = paths;
  doc["components"] = {{"schemas", schemas}};
  return doc;
}

}  // namespace xdit::serve
