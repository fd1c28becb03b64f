// Inside the HTTP server (http_server.cpp, http_parse.cpp): the one parser
// configuration and the one mapping of read errors to answers, shared by the
// socket reader and the fuzz entry so that what is fuzzed is what serves.
#pragma once

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <string>

#include "serve/http_server.h"

namespace xdit::serve::detail {

namespace beast = boost::beast;
namespace http = beast::http;

using Parser = http::request_parser<http::string_body>;

// A fresh parser with the limits: header bytes, body bytes (a Content-Length
// over it is refused at the header; chunks as they arrive).
void configure(Parser& p, const HttpLimits& limits);

// The answer to a failed read, or nothing when the connection just ended
// (the client hung up, or was idle between requests when the deadline came).
std::optional<HttpResponse> refusal_for(const beast::error_code& ec, const HttpLimits& limits,
                                        bool got_some);

// The head's checks (check_head) on a parsed head.
std::optional<HttpResponse> check_parsed_head(const Parser& p, const HttpLimits& limits,
                                              const std::vector<Route>& routes,
                                              const std::string& api_key);

std::string path_of(const Parser& p);
bool expects_continue(const Parser& p);

}  // namespace xdit::serve::detail
