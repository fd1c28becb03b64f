// The HTTP server (http_server.h) on Boost.Beast: one I/O thread runs every
// connection's state machine (read head → checks → 100-continue → read body →
// handler → write → next request or close); a connection object is touched
// on that thread only. Blocking handlers run on an asio thread pool and post
// their answer back.
#include "serve/http_server.h"

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <list>
#include <thread>

#include "core/error.h"
#include "serve/http_beast.h"

namespace xdit::serve {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using detail::beast::error_code;
namespace beast = detail::beast;
namespace http = detail::http;

namespace {

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

class Connection;

struct HttpServer::Impl {
  HttpLimits limits;
  std::vector<Route> routes;
  std::string api_key;
  std::function<void(const std::string&, int)> on_answer;
  net::io_context ioc{1};
  // Keeps the I/O thread running while nothing is pending on it (stopping:
  // the listener closed, an answer still being made on a worker).
  net::executor_work_guard<net::io_context::executor_type> busy = net::make_work_guard(ioc);
  tcp::acceptor acceptor{ioc};
  net::thread_pool pool;
  std::thread io;
  bool stopping = false;                      // I/O thread only
  std::list<std::weak_ptr<Connection>> live;  // I/O thread only
  std::atomic<size_t> count{0};

  Impl(size_t workers) : pool(workers) {}
  void accept();
  void refuse_busy(tcp::socket& s);
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl& srv, tcp::socket s)
      : srv_(srv), stream_(std::move(s)), timer_(srv.ioc) {
    ++srv_.count;
  }
  ~Connection() { --srv_.count; }

  void start(std::list<std::weak_ptr<Connection>>::iterator self) {
    self_ = self;
    read_head();
  }
  // Shutting down: a connection that is reading ends now; one whose answer
  // is under way ends after writing it.
  void shut() {
    if (state_ == State::kReading) close();
  }

 private:
  enum class State { kReading, kWorking, kWriting, kClosed };

  void read_head() {
    if (srv_.stopping) return close();
    state_ = State::kReading;
    parser_.emplace();
    detail::configure(*parser_, srv_.limits);
    arm(ms(srv_.limits.header_timeout));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(error_code ec) {
    if (ec) return refuse_or_close(ec);
    path_ = detail::path_of(*parser_);
    if (auto r = detail::check_parsed_head(*parser_, srv_.limits, srv_.routes, srv_.api_key))
      return answer(std::move(*r), true);  // the body stays unread: the connection ends
    if (detail::expects_continue(*parser_)) {
      cont_.emplace(http::status::continue_, parser_->get().version());
      arm(ms(srv_.limits.body_timeout));
      http::async_write(stream_, *cont_, [self = shared_from_this()](error_code e, size_t) {
        if (e) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    arm(ms(srv_.limits.body_timeout));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    if (ec) return refuse_or_close(ec);
    timer_.cancel();
    HttpRequest req;
    req.method = std::string(parser_->get().method_string());
    req.path = path_;
    req.body = std::move(parser_->get().body());
    keep_alive_ = parser_->get().keep_alive();
    const Route* route = nullptr;
    for (const Route& r : srv_.routes)
      if (r.path == req.path && r.method == req.method) route = &r;
    parser_.reset();
    if (!route->blocking) return answer(run(*route, req), !keep_alive_);
    state_ = State::kWorking;
    net::post(srv_.pool, [self = shared_from_this(), route, req = std::move(req)] {
      HttpResponse r = run(*route, req);
      net::post(self->srv_.ioc, [self, r = std::move(r)]() mutable {
        self->answer(std::move(r), !self->keep_alive_);
      });
    });
  }

  static HttpResponse run(const Route& route, const HttpRequest& req) {
    try {
      return route.handler(req);
    } catch (const std::exception& e) {
      return error_response(500, std::string("internal error while answering: ") + e.what());
    }
  }

  void refuse_or_close(error_code ec) {
    if (ec == net::error::operation_aborted) {
      if (!timed_out_) return close();
      ec = beast::error::timeout;  // our deadline cancelled the read
    }
    std::optional<HttpResponse> r = detail::refusal_for(ec, srv_.limits, parser_->got_some());
    if (!r) return close();
    if (path_.empty()) path_ = detail::path_of(*parser_);  // once the request line was read
    answer(std::move(*r), true);
  }

  void answer(HttpResponse r, bool close_after) {
    if (state_ == State::kClosed) return;
    close_after = close_after || srv_.stopping;
    srv_.on_answer(path_, r.status);
    res_.emplace(static_cast<http::status>(r.status), 11);
    res_->set(http::field::content_type, r.content_type);
    res_->set(http::field::server, "xdit");
    for (const auto& [k, v] : r.headers) res_->set(k, v);
    res_->body() = std::move(r.body);
    res_->keep_alive(!close_after);
    res_->prepare_payload();
    state_ = State::kWriting;
    arm(ms(srv_.limits.body_timeout));
    http::async_write(stream_, *res_,
                      [self = shared_from_this(), close_after](error_code ec, size_t) {
                        self->res_.reset();
                        if (ec || close_after) return self->linger();
                        self->path_.clear();
                        self->read_head();
                      });
  }

  // After an answer that ends the connection: our side is shut, and what
  // the client still sends is read and dropped for a moment (at most 2 s and
  // 16 MiB, never kept), so that closing does not reset the connection
  // before a client that writes its whole body before reading (most do) has
  // read the answer.
  void linger() {
    if (state_ == State::kClosed) return;
    error_code ignored;
    stream_.shutdown(tcp::socket::shutdown_send, ignored);
    state_ = State::kReading;  // a shutdown may close it now
    arm(std::chrono::seconds(2));
    drop(size_t{16} << 20);
  }
  void drop(size_t left) {
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this(), left](error_code ec, size_t n) {
                              if (ec || n >= left) return self->close();
                              self->drop(left - n);
                            });
  }

  void arm(std::chrono::milliseconds d) {
    timed_out_ = false;
    timer_.expires_after(d);  // cancels the last phase's wait
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec) return;
      self->timed_out_ = true;
      error_code ignored;
      self->stream_.cancel(ignored);
    });
  }

  void close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    error_code ignored;
    timer_.cancel();
    stream_.close(ignored);
    srv_.live.erase(self_);
  }

  HttpServer::Impl& srv_;
  tcp::socket stream_;
  // The phase's deadline: when it passes, the pending operation is cancelled
  // (the socket stays open, so a late head can still be answered 408).
  net::steady_timer timer_;
  bool timed_out_ = false;
  beast::flat_buffer buffer_{64 << 10};
  std::optional<detail::Parser> parser_;
  std::optional<http::response<http::empty_body>> cont_;
  std::optional<http::response<http::string_body>> res_;
  std::array<char, 16 << 10> scratch_{};
  std::string path_;
  bool keep_alive_ = false;
  State state_ = State::kReading;
  std::list<std::weak_ptr<Connection>>::iterator self_;
};

void HttpServer::Impl::refuse_busy(tcp::socket& s) {
  // One non-blocking try: a client that does not read it loses nothing of ours.
  HttpResponse r =
      error_response(503, "the server has " + std::to_string(limits.max_connections) +
                              " connections open (--max_connections): try again shortly");
  const std::string text =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
      std::to_string(r.body.size()) + "\r\n\r\n" + r.body;
  error_code ec;
  s.non_blocking(true, ec);
  s.write_some(net::buffer(text), ec);
  s.shutdown(tcp::socket::shutdown_both, ec);
  s.close(ec);
  on_answer("", 503);
}

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket s) {
    if (ec == net::error::operation_aborted || stopping) return;
    if (!ec) {
      if (count.load() >= limits.max_connections) {
        refuse_busy(s);
      } else {
        auto c = std::make_shared<Connection>(*this, std::move(s));
        live.push_front(c);
        c->start(live.begin());
      }
    }
    accept();  // a failed accept (EMFILE, …) is not the end of the service
  });
}

HttpServer::HttpServer(HttpLimits limits, std::vector<Route> routes, std::string api_key,
                       size_t workers, std::function<void(const std::string&, int)> on_answer)
    : impl_(std::make_unique<Impl>(workers)) {
  impl_->limits = limits;
  impl_->routes = std::move(routes);
  impl_->api_key = std::move(api_key);
  impl_->on_answer = std::move(on_answer);
}

HttpServer::~HttpServer() {
  stop(0);
}

int HttpServer::bind(const std::string& host, int port) {
  error_code ec;
  tcp::resolver resolver(impl_->ioc);
  const auto found = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  XDIT_CHECK(!ec && !found.empty(), "cannot resolve --host ", host, ": ", ec.message());
  const tcp::endpoint at = found.begin()->endpoint();
  tcp::acceptor& a = impl_->acceptor;
  a.open(at.protocol(), ec);
  // SO_REUSEADDR, as bind_error's probe: a restart binds at once over the
  // last run's TIME_WAIT connections, and a second live server is refused
  // (SO_REUSEPORT would let two share the port silently).
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(at, ec);
  if (!ec) a.listen(256, ec);
  XDIT_CHECK(!ec, "cannot listen on ", host, ":", port, ": ", ec.message());
  return a.local_endpoint().port();
}

void HttpServer::start() {
  Impl& s = *impl_;
  s.accept();
  s.io = std::thread([&s] { s.ioc.run(); });
}

void HttpServer::stop(double grace) {
  Impl& s = *impl_;
  if (!s.io.joinable()) return;
  net::post(s.ioc, [&s] {
    s.stopping = true;
    error_code ignored;
    s.acceptor.close(ignored);
    for (auto it = s.live.begin(); it != s.live.end();) {
      auto c = (it++)->lock();  // shut() may erase its own entry
      if (c) c->shut();
    }
  });
  const auto until = std::chrono::steady_clock::now() + ms(grace);
  while (s.count.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.busy.reset();
  s.ioc.stop();
  s.io.join();
  s.pool.join();
}

}  // namespace xdit::serve
