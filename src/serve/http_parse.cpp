// Reading one request: the parser's limits, the head's checks, and the
// answer to each way a request can be malformed (always a 4xx JSON body).
#include <boost/asio/error.hpp>

#include "serve/http_beast.h"

namespace xdit::serve {

HttpResponse json_response(int status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

HttpResponse error_response(int status, const std::string& message, const std::string& field) {
  return json_response(status, error_body(status, message, field));
}

ServeRequest parse_request_body(Endpoint e, const std::string& body) {
  try {
    return parse_request(e, body);
  } catch (const nlohmann::json::exception& err) {
    throw BadRequest(400, "", std::string("the body is not valid JSON: ") + err.what());
  }
}

bool equal_constant_time(std::string_view a, std::string_view b) {
  // Every byte of the longer one is visited whatever the contents.
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    const unsigned y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::optional<HttpResponse> check_head(const std::string& method, const std::string& path,
                                       const std::string& authorization, size_t header_count,
                                       const HttpLimits& limits, const std::vector<Route>& routes,
                                       const std::string& api_key) {
  if (header_count > limits.max_header_count)
    return error_response(431, "the request has " + std::to_string(header_count) +
                                   " header fields; at most " +
                                   std::to_string(limits.max_header_count) + " are taken");
  const Route* route = nullptr;
  for (const Route& r : routes)
    if (r.path == path && r.method == method) route = &r;
  if (route == nullptr) {
    std::string list;
    for (const Route& r : routes) list += (list.empty() ? "" : ", ") + r.method + " " + r.path;
    return error_response(404, "no endpoint " + method + " " + path + " (" + list + ")");
  }
  if (!api_key.empty() && !route->open) {
    const std::string bearer = "Bearer ";
    const bool ok =
        authorization.size() > bearer.size() &&
        authorization.compare(0, bearer.size(), bearer) == 0 &&
        equal_constant_time(std::string_view(authorization).substr(bearer.size()), api_key);
    if (!ok) {
      HttpResponse r = error_response(
          401, "this server asks for its API key: send 'Authorization: Bearer <key>'");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return r;
    }
  }
  return std::nullopt;
}

namespace detail {

void configure(Parser& p, const HttpLimits& limits) {
  p.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  p.body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
}

std::optional<HttpResponse> refusal_for(const beast::error_code& ec, const HttpLimits& limits,
                                        bool got_some) {
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
    return error_response(431, "the request line and headers are over " +
                                   std::to_string(limits.max_header_bytes) + " bytes");
  if (ec == http::error::body_limit)
    return error_response(413, "the body is over " + std::to_string(limits.max_body_bytes) +
                                   " bytes: send a smaller request");
  if (ec == http::error::bad_content_length)
    return error_response(400, "Content-Length must be one non-negative number of bytes");
  if (ec == beast::error::timeout) {
    if (!got_some) return std::nullopt;  // idle: closed without a word
    return error_response(408,
                          "the request did not arrive in time (the request line and "
                          "headers, then the body, each have a deadline)");
  }
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == http::error::need_more ||
      ec.category() != http::make_error_code(http::error::bad_method).category())
    return std::nullopt;  // the client hung up, or the socket failed: no one to answer
  return error_response(400, "the request is not valid HTTP/1.1 (" + ec.message() + ")");
}

std::string path_of(const Parser& p) {
  const auto target = p.get().target();
  const auto q = target.find('?');
  return std::string(q == beast::string_view::npos ? target : target.substr(0, q));
}

bool expects_continue(const Parser& p) {
  const auto it = p.get().find(http::field::expect);
  return it != p.get().end() && beast::iequals(it->value(), "100-continue");
}

std::optional<HttpResponse> check_parsed_head(const Parser& p, const HttpLimits& limits,
                                              const std::vector<Route>& routes,
                                              const std::string& api_key) {
  const auto& h = p.get();
  if (h.version() != 10 && h.version() != 11)
    return error_response(400, "only HTTP/1.0 and HTTP/1.1 are spoken here");
  const auto auth = h.find(http::field::authorization);
  const size_t count = static_cast<size_t>(std::distance(h.begin(), h.end()));
  return check_head(std::string(h.method_string()), path_of(p),
                    auth == h.end() ? std::string() : std::string(auth->value()), count, limits,
                    routes, api_key);
}

}  // namespace detail

HttpParse parse_http_request(std::string_view bytes, const HttpLimits& limits,
                             const std::vector<Route>& routes, const std::string& api_key) {
  HttpParse out;
  detail::Parser p;
  detail::configure(p, limits);
  p.eager(false);
  bool head_checked = false;
  while (!p.is_done()) {
    detail::beast::error_code ec;
    const size_t n = p.put(boost::asio::const_buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(n);
    if (ec == detail::http::error::need_more) return out;  // kIncomplete
    if (ec) {
      if (auto r = detail::refusal_for(ec, limits, p.got_some())) {
        out.state = HttpParse::State::kRefused;
        out.refusal = std::move(*r);
      }
      return out;
    }
    if (p.is_header_done() && !head_checked) {
      head_checked = true;
      out.continue_ = detail::expects_continue(p);
      if (auto r = detail::check_parsed_head(p, limits, routes, api_key)) {
        out.state = HttpParse::State::kRefused;
        out.refusal = std::move(*r);
        return out;
      }
    }
    if (n == 0 && bytes.empty() && !p.is_done()) return out;
  }
  out.state = HttpParse::State::kRequest;
  out.request.method = std::string(p.get().method_string());
  out.request.path = detail::path_of(p);
  out.request.body = std::move(p.get().body());
  return out;
}

}  // namespace xdit::serve
