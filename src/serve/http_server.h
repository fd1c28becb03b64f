// The service's HTTP/1.1 server: event-driven (Boost.Beast on Asio, one I/O
// thread for every connection) so that a slow or hostile client holds a
// connection slot, never a thread. Every limit is checked while reading:
// the request line and headers (bytes and count) before the body, the body's
// size from Content-Length before a byte of it is read and, chunked, as it
// arrives; each phase has a deadline of its own (not a per-read timeout), and
// connections are bounded apart from the job queue. Handlers that wait
// (a generation) run on a bounded worker pool; the others (/health,
// /metrics) answer on the I/O thread, so they answer while every worker is
// busy. Every refusal is a JSON error body (serve::error_body).
// Beast stays inside http_server.cpp and http_parse.cpp.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serve/request_schema.h"

namespace xdit::serve {

struct HttpLimits {
  size_t max_header_bytes = 16 << 10;  // request line and headers together
  size_t max_header_count = 100;
  size_t max_body_bytes = kMaxBodyBytes;
  double header_timeout = 10;  // s: the whole request line and headers (and keep-alive idle)
  double body_timeout = 30;    // s: the whole body; also writing the answer
  size_t max_connections = 64;
};

struct HttpRequest {
  std::string method, path, body;  // path: the target without its query
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// A JSON answer; strings that are not UTF-8 (a client's bytes quoted in a
// message) are replaced, never a reason to fail.
HttpResponse json_response(int status, const nlohmann::json& body);
// serve::error_body as an answer.
HttpResponse error_response(int status, const std::string& message, const std::string& field = "");

// parse_request, with whatever the JSON library refuses past parsing (a
// number out of range, "cfg": 1e400) a BadRequest too: a 500 is a bug of
// ours, never a client's body.
ServeRequest parse_request_body(Endpoint e, const std::string& body);

struct Route {
  std::string method, path;
  bool blocking = false;  // runs on the worker pool (it may wait); else on the I/O thread
  bool open = false;      // answered without the API key (/health)
  std::function<HttpResponse(const HttpRequest&)> handler;
};

// What the head of a request decides before its body is read: a refusal
// (unknown endpoint, missing API key, too many headers), or nothing.
std::optional<HttpResponse> check_head(const std::string& method, const std::string& path,
                                       const std::string& authorization, size_t header_count,
                                       const HttpLimits& limits, const std::vector<Route>& routes,
                                       const std::string& api_key);

// `a == b` in a time that depends on their lengths only (the API key).
bool equal_constant_time(std::string_view a, std::string_view b);

// One request read from `bytes` with the server's parser, limits and head
// checks (the fuzz target's entry; the server reads a socket the same way).
struct HttpParse {
  enum class State { kIncomplete, kRequest, kRefused } state = State::kIncomplete;
  HttpRequest request;     // kRequest
  HttpResponse refusal;    // kRefused
  bool continue_ = false;  // the client asked for 100-continue
};
HttpParse parse_http_request(std::string_view bytes, const HttpLimits& limits,
                             const std::vector<Route>& routes, const std::string& api_key);

class Connection;

class HttpServer {
 public:
  // `api_key` empty: no key asked. `workers`: threads for blocking routes.
  // `on_answer(path, status)`: every answer, refusals included (metrics).
  HttpServer(HttpLimits limits, std::vector<Route> routes, std::string api_key, size_t workers,
             std::function<void(const std::string&, int)> on_answer);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (SO_REUSEADDR, as bind_error probes); returns the
  // port (port 0: any free one). Throws xdit::Error naming host and port.
  int bind(const std::string& host, int port);
  // Starts the I/O thread and the workers.
  void start();
  // Stops accepting and closes every connection that is reading; answers
  // already under way get at most `grace` seconds to be written; then
  // everything is closed and joined. Bounded whatever the clients do.
  void stop(double grace);

 private:
  friend class Connection;  // http_server.cpp: one client's state machine
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xdit::serve
