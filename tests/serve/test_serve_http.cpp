// xdit serve's HTTP layer against slow, large and malformed clients (the
// hardening audit's cases, issue 41 class 2), over loopback with raw sockets:
// trickling clients neither starve /health nor hold SIGTERM, connections are
// bounded apart from the queue, header and body limits hold before the bytes
// are read (memory stays flat), a bad Content-Length or Expect never waits
// for a deadline, every malformed request is a 4xx JSON body, the API key
// guards all but /health, and a restart on the same port binds at once.
// Deadlines are short flags so that each case takes seconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "serve_util.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kModels = XDIT_MODELS;
const std::string kTiny = "--model '" + kModels + "/pixart-sigma-tiny' ";
const std::string kQuick =
    R"({"prompt": "q", "height": 64, "width": 64, "num_inference_steps": 1})";

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int connect_to(int port) {
  const int fd = test::loopback_connect(port);
  EXPECT_GE(fd, 0) << "cannot connect to 127.0.0.1:" << port;
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// What came back on a raw connection: the status line's code, the head, the
// body parsed as JSON (null when it is not), and whether the server closed.
struct Raw {
  int status = 0;
  std::string head;
  json body;
  bool closed = false;
};

// The answer in `got` so far: its head, and its body once complete.
Raw parse_answer(const std::string& got, bool* complete = nullptr) {
  Raw r;
  if (complete != nullptr) *complete = false;
  const size_t end = got.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  r.head = got.substr(0, end);
  if (r.head.size() > 12) r.status = std::stoi(r.head.substr(9, 3));
  if (r.status == 100) {  // an interim answer
    if (complete != nullptr) *complete = true;
    return r;
  }
  const size_t cl = r.head.find("Content-Length: ");
  const size_t want = end + 4 + (cl == std::string::npos ? 0 : std::stoul(r.head.substr(cl + 16)));
  if (got.size() < want) return r;
  if (complete != nullptr) *complete = true;
  r.body = json::parse(got.substr(end + 4, want - end - 4), nullptr, false);
  return r;
}

// Reads one answer (its head, then Content-Length bytes), at most `timeout` s.
Raw read_answer(int fd, double timeout) {
  std::string got;
  const auto t0 = Clock::now();
  bool complete = false, closed = false;
  while (!complete && !closed && since(t0) < timeout) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) closed = true;
    if (n > 0) got.append(buf, static_cast<size_t>(n));
    parse_answer(got, &complete);
  }
  Raw r = parse_answer(got);
  r.closed = closed;
  return r;
}

// One request on a fresh connection; the answer within `timeout` s.
Raw exchange(int port, const std::string& bytes, double timeout = 5) {
  const int fd = connect_to(port);
  send_all(fd, bytes);
  Raw r = read_answer(fd, timeout);
  ::close(fd);
  return r;
}

std::string post_head(const std::string& path, const std::string& extra) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
         "\r\n";
}
std::string post(const std::string& path, const std::string& body) {
  return post_head(path, "Content-Length: " + std::to_string(body.size()) + "\r\n") + body;
}

int64_t rss_kb(pid_t pid) {
  const std::string s = test::read_text("/proc/" + std::to_string(pid) + "/status");
  const size_t at = s.find("VmRSS:");
  return at == std::string::npos ? -1 : std::stoll(s.substr(at + 6));
}

// A 4xx answer (`status`, or any 4xx for 0) with the service's JSON error body.
void expect_json_4xx(const Raw& r, int status, const std::string& what) {
  if (status == 0)  // any 4xx
    EXPECT_TRUE(r.status >= 400 && r.status < 500) << what << ": " << r.head;
  else
    EXPECT_EQ(r.status, status) << what << ": " << r.head;
  ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << what << ": " << r.head;
  EXPECT_EQ(r.body["error"]["code"], r.status) << what;
  EXPECT_FALSE(r.body["error"]["message"].get<std::string>().empty()) << what;
}

using ServeHttp = test::ServeTest;

TEST_F(ServeHttp, TricklingClientsDoNotStarveHealthAndAreCutAtTheHeaderDeadline) {
  // The audit: 20 connections sending one header line every 10 s held every
  // HTTP thread (max_queue + 9), and /health waited 45 s.
  test::ServeProcess s(kTiny + "--max_queue 2 --header_timeout 2", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    fds.push_back(connect_to(s.port()));
    send_all(fds.back(), "POST /generate HTTP/1.1\r\n");
  }
  std::atomic<bool> done{false};
  std::vector<std::string> answers(fds.size());
  std::thread trickle([&] {  // a header line every 0.5 s on each, until it is answered
    while (!done) {
      for (size_t i = 0; i < fds.size(); ++i) {
        char buf[4096];
        ssize_t n = 0;
        while ((n = ::recv(fds[i], buf, sizeof buf, MSG_DONTWAIT)) > 0)
          answers[i].append(buf, static_cast<size_t>(n));
        if (answers[i].empty()) send_all(fds[i], "X-Slow: 1\r\n");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  auto c = s.client();
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    auto h = c.Get("/health");
    ASSERT_TRUE(h) << "no answer to /health with 20 trickling clients";
    EXPECT_EQ(h->status, 200);
    EXPECT_LT(since(t0), 1.0) << "/health waited behind the trickling clients";
  }
  // A generation still runs beside them.
  const test::Reply ok = test::post_json(c, "/generate", kQuick);
  EXPECT_EQ(ok.status, 200) << ok.body.dump();
  // The header deadline is for the whole head, not per line: every trickler
  // is answered 408 and closed within it, though it never went quiet.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  done = true;
  trickle.join();
  for (const std::string& a : answers) expect_json_4xx(parse_answer(a), 408, "trickler");
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(ServeHttp, ConnectionsAreBoundedApartFromTheQueueAndFreedByTheDeadline) {
  test::ServeProcess s(kTiny + "--max_connections 4 --header_timeout 1", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(connect_to(s.port()));
    send_all(fds.back(), "GET /hea");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = Clock::now();
  const Raw busy = exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  expect_json_4xx(busy, 503, "a connection over --max_connections");  // (a 5xx: the server's)
  EXPECT_LT(since(t0), 1.0);
  EXPECT_NE(busy.head.find("Retry-After"), std::string::npos) << busy.head;
  // The deadline (1 s), then at most 2 s of lingering after the 408, frees them.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  const Raw ok = exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ok.status, 200) << ok.head;
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(ServeHttp, SigtermEndsTheServerWhateverTheClientsDo) {
  // The audit: one trickling connection kept SIGTERM from ending the server
  // for more than 75 s. Default deadlines here: the stop must not wait on them.
  test::ServeProcess s(kTiny, dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  std::vector<int> fds;
  const std::vector<std::string> stalls = {
      "POST /generate HTTP/1.1\r\n",                                             // mid-head
      post_head("/generate", "Content-Length: 100\r\n") + "{\"pro",              // mid-body
      post_head("/generate", "Content-Length: 30\r\nExpect: 100-continue\r\n"),  // waits for 100
      "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",                                 // idle, kept alive
  };
  for (const auto& bytes : stalls) {
    fds.push_back(connect_to(s.port()));
    send_all(fds.back(), bytes);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  const test::CommandResult end = s.stop(SIGTERM);
  EXPECT_LT(since(t0), 4.0) << "SIGTERM waited on the clients";
  EXPECT_EQ(end.code, 0) << end.err;
  for (int fd : fds) ::close(fd);
}

TEST_F(ServeHttp, HeaderLimitsHoldWhileReading) {
  test::ServeProcess s(kTiny, dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  const int64_t rss0 = rss_kb(s.pid());
  // The audit: 20 MB of header lines were buffered (+450 MB) and answered 200.
  const int fd = connect_to(s.port());
  std::atomic<size_t> sent{0};
  std::thread flood([&] {
    send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n");
    const std::string line = "X-Filler: " + std::string(990, 'a') + "\r\n";
    while (sent < (size_t{20} << 20) && send_all(fd, line)) sent += line.size();
  });
  const Raw r = read_answer(fd, 10);
  const size_t sent_when_answered = sent;
  expect_json_4xx(r, 431, "20 MB of header lines");
  ::shutdown(fd, SHUT_RDWR);
  flood.join();
  ::close(fd);
  EXPECT_LT(sent_when_answered, size_t{10} << 20) << "answered only after reading the flood";
  EXPECT_LT(rss_kb(s.pid()) - rss0, 32 << 10) << "kB kept for a refused head";
  // Many small headers: the count is a limit of its own.
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 150; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
  expect_json_4xx(exchange(s.port(), many + "\r\n"), 431, "150 header fields");
  // A long request line.
  expect_json_4xx(exchange(s.port(), "GET /" + std::string(40000, 'a') + " HTTP/1.1\r\n\r\n"), 431,
                  "a 40 kB target");
  EXPECT_EQ(exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(ServeHttp, BodyLimitsHoldBeforeTheBodyIsRead) {
  test::ServeProcess s(kTiny, dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  const int64_t rss0 = rss_kb(s.pid());
  // Declared too large: refused from the header, not a byte of body read.
  auto t0 = Clock::now();
  expect_json_4xx(exchange(s.port(), post_head("/generate", "Content-Length: 200000000\r\n")), 413,
                  "Content-Length 200 MB");
  EXPECT_LT(since(t0), 1.0);
  // The audit: a 200 MB chunked body got 413 only after it was read whole.
  const int fd = connect_to(s.port());
  std::atomic<size_t> sent{0};
  std::thread upload([&] {
    send_all(fd, post_head("/generate", "Transfer-Encoding: chunked\r\n"));
    const std::string chunk = "10000\r\n" + std::string(0x10000, 'a') + "\r\n";
    while (sent < (size_t{200} << 20) && send_all(fd, chunk)) sent += 0x10000;
  });
  const Raw r = read_answer(fd, 20);
  const size_t sent_when_answered = sent;
  expect_json_4xx(r, 413, "200 MB chunked");
  ::shutdown(fd, SHUT_RDWR);
  upload.join();
  ::close(fd);
  EXPECT_LT(sent_when_answered, size_t{20} << 20) << "answered only after reading on";
  EXPECT_LT(sent.load(), size_t{100} << 20) << "the server read on past the limit";
  EXPECT_LT(rss_kb(s.pid()) - rss0, 32 << 10) << "kB kept for a refused body";
  EXPECT_EQ(exchange(s.port(), post("/generate", kQuick), 60).status, 200);
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(ServeHttp, BadContentLengthAndExpectAreAnsweredAtOnce) {
  // The audit: each of these held a worker for the 30 s read timeout.
  test::ServeProcess s(kTiny + "--body_timeout 20", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  for (const auto& [value, status] :
       std::vector<std::pair<std::string, int>>{{"-5", 400},
                                                {"99999999999999999999999999", 400},
                                                {"1000000000000", 413},
                                                {"abc", 400}}) {
    const auto t0 = Clock::now();
    expect_json_4xx(exchange(s.port(), post_head("/generate", "Content-Length: " + value + "\r\n")),
                    status, "Content-Length: " + value);
    EXPECT_LT(since(t0), 1.0) << "Content-Length: " << value;
  }
  // Expect: 100-continue: a 100 at once, then the answer to the body.
  const std::string body = kQuick;
  const int fd = connect_to(s.port());
  auto t0 = Clock::now();
  send_all(fd, post_head("/generate", "Content-Length: " + std::to_string(body.size()) +
                                          "\r\nExpect: 100-continue\r\n"));
  const Raw cont = read_answer(fd, 5);
  EXPECT_EQ(cont.status, 100) << cont.head;
  EXPECT_LT(since(t0), 1.0);
  send_all(fd, body);
  EXPECT_EQ(read_answer(fd, 60).status, 200);
  ::close(fd);
  // ... and a body it would refuse: the refusal, no 100, nothing read.
  t0 = Clock::now();
  expect_json_4xx(
      exchange(s.port(),
               post_head("/generate", "Content-Length: 5000000\r\nExpect: 100-continue\r\n")),
      413, "Expect with a body over the limit");
  EXPECT_LT(since(t0), 1.0);
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(ServeHttp, EveryMalformedRequestIsA4xxJsonBody) {
  test::ServeProcess s(kTiny, dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {post("/generate", "{\"prompt\": \"\xff\xfe\"}"), 400, "invalid UTF-8 in the body"},
      {post("/generate", R"({"prompt": "x", "cfg": 1e400})"), 400, "cfg 1e400"},
      {post("/generate", R"({"prompt": "x", "seed": 1e400})"), 400, "seed 1e400"},
      {post("/generate", std::string("{\"prompt\": \"x\0\"}", 16)), 400, "a NUL in the body"},
      {"GARBAGE\r\n\r\n", 400, "no request line"},
      {"GET /health HTTP/7.5\r\n\r\n", 400, "a bad version"},
      {"GET /health HTTP/1.1\r\nNo colon here\r\n\r\n", 400, "a header without a colon"},
      {"GET /health HTTP/1.1\r\nX-A: \x01\r\n\r\n", 400, "a control byte in a header value"},
      {post_head("/generate", "Transfer-Encoding: chunked\r\n") + "zz\r\n", 400,
       "a bad chunk size"},
      {"DELETE /generate HTTP/1.1\r\nHost: x\r\n\r\n", 404, "a method the endpoint lacks"},
      {"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", 0, "invalid bytes in the target"},
  };
  for (const auto& [bytes, status, what] : cases)
    expect_json_4xx(exchange(s.port(), bytes), status, what);
  EXPECT_EQ(exchange(s.port(), post("/generate", kQuick), 60).status, 200);
  // No 500 among them: the metrics count none.
  auto m = s.client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->body.find("status=\"500\""), std::string::npos) << m->body;
  EXPECT_EQ(s.stop().code, 0) << s.log();
}

TEST_F(ServeHttp, TheApiKeyGuardsAllButHealth) {
  const fs::path key = dir_ / "key";
  std::ofstream(key) << "  s3cret-key_1 \n";
  test::ServeProcess s(kTiny + "--api_key_file '" + key.string() + "'", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  const std::string good = "Authorization: Bearer s3cret-key_1\r\n";
  for (const std::string& auth : {std::string(), std::string("Authorization: Bearer s3cret\r\n"),
                                  std::string("Authorization: Bearer s3cret-key_12\r\n"),
                                  std::string("Authorization: Basic s3cret-key_1\r\n")}) {
    const Raw r = exchange(s.port(), post_head("/generate", auth + "Content-Length: 2\r\n") + "{}");
    expect_json_4xx(r, 401, "key '" + auth + "'");
    EXPECT_NE(r.head.find("WWW-Authenticate: Bearer"), std::string::npos) << r.head;
    expect_json_4xx(exchange(s.port(), "GET /metrics HTTP/1.1\r\n" + auth + "\r\n"), 401,
                    "/metrics, key '" + auth + "'");
  }
  EXPECT_EQ(exchange(s.port(), "GET /health HTTP/1.1\r\n\r\n").status, 200);
  EXPECT_EQ(exchange(s.port(),
                     post_head("/generate",
                               good + "Content-Length: " + std::to_string(kQuick.size()) + "\r\n") +
                         kQuick,
                     60)
                .status,
            200);
  EXPECT_EQ(exchange(s.port(), "GET /metrics HTTP/1.1\r\n" + good + "\r\n").status, 200);
  EXPECT_EQ(s.stop().code, 0) << s.log();
  for (const auto& [content, says] : std::vector<std::pair<std::string, std::string>>{
           {"", "is empty"},
           {"two words\n", "printable ASCII without blanks"},
           {std::string(5000, 'k'), "at most 4096"}}) {
    std::ofstream(key, std::ios::trunc) << content;
    const auto r = test::run_command(test::xdit_env() + "timeout 60 '" + XDIT_BINARY + "' serve " +
                                         kTiny + "--api_key_file '" + key.string() + "'",
                                     path("err.txt"));
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }
}

TEST_F(ServeHttp, ARestartOnTheSamePortBindsAtOnce) {
  // The audit: refused for about 60 s after a request (the pre-bind probe
  // used SO_REUSEADDR, the HTTP library SO_REUSEPORT: the last run's
  // TIME_WAIT connections kept the port).
  int port = 0;
  {
    test::ServeProcess s(kTiny, dir_);
    ASSERT_TRUE(s.listening()) << s.log();
    port = s.port();
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(exchange(port, "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n").status, 200);
    EXPECT_EQ(exchange(port, post("/generate", kQuick), 60).status, 200);
    EXPECT_EQ(s.stop().code, 0) << s.log();
  }
  test::ServeProcess again(kTiny + "--port " + std::to_string(port), dir_);
  ASSERT_TRUE(again.listening()) << again.log();
  EXPECT_EQ(again.port(), port);
  EXPECT_EQ(exchange(port, "GET /health HTTP/1.1\r\n\r\n").status, 200);
  EXPECT_EQ(again.stop().code, 0) << again.log();
}

}  // namespace
}  // namespace xdit
