// Copyright tollgate authors. The floor of an HTTP/1.1 keep-alive request on this machine, as
// a hand-written server pays it: epoll, non-blocking sockets, each request read whole
// (headers up to the blank line, then Content-Length bytes of body, nothing else parsed) and
// answered 200 with a check's JSON answer, as nginx `return 200` answers in
// bench/service_bench.sh. With --redis, each request first waits for one Redis round trip
// (bench/floor_server.h): the floor under tollgate's HTTP + Redis rows, which nginx cannot
// give. For measurement only; not part of `tollgate serve`.
//
//   http_floor_server [--listen 127.0.0.1:0] [--threads N] [--redis HOST:PORT] [--keys N]
//
// A request it cannot frame (no Content-Length number where one is given, headers over 16 KB)
// closes the connection. Loops, Redis, output and exit codes: bench/floor_server.h.
#include <strings.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "bench/floor_server.h"

namespace {

constexpr char kProgram[] = "http_floor_server";
constexpr char kUsage[] =
    "http_floor_server [--listen HOST:PORT] [--threads N] [--redis HOST:PORT] [--keys N]";

// The answer of one allowed check, as tollgate's POST /v1/check renders its body (and
// service_bench.sh's nginx row returns it).
constexpr std::string_view kBody =
    R"({"allowed":true,"limit":1000000000,"remaining":999999999,"reset_after_ms":0,"retry_after_ms":0})";

const std::string& Response() {
  static const std::string response =
      "HTTP/1.1 200 OK\r\nServer: http_floor_server\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(kBody.size()) + "\r\nConnection: keep-alive\r\n\r\n" + std::string(kBody);
  return response;
}

// The value of Content-Length in `headers` (the request line and fields, up to the blank
// line), 0 when absent, -1 when not a number.
long long ContentLength(std::string_view headers) {
  constexpr std::string_view kName = "\r\ncontent-length:";
  for (size_t at = headers.find("\r\n"); at != std::string_view::npos;
       at = headers.find("\r\n", at + 2)) {
    if (headers.size() - at < kName.size() ||
        strncasecmp(headers.data() + at, kName.data(), kName.size()) != 0) {
      continue;
    }
    size_t digit = at + kName.size();
    while (digit < headers.size() && headers[digit] == ' ') ++digit;
    long long length = 0;
    const size_t first = digit;
    for (; digit < headers.size() && headers[digit] >= '0' && headers[digit] <= '9'; ++digit) {
      length = length * 10 + (headers[digit] - '0');
      if (length > (1LL << 30)) return -1;
    }
    return digit == first ? -1 : length;
  }
  return 0;
}

class Connection : public floor_server::Connection {
 public:
  Connection(int fd, floor_server::Loop& loop) : floor_server::Connection(fd), loop_(loop) {}

  // Reads what the socket holds, answers (or sends to Redis) every whole request in it.
  bool OnReadable() override {
    if (!ReadAvailable([this](const char* bytes, size_t size) {
          in_.append(bytes, size);
          return true;
        })) {
      return false;
    }
    size_t used = 0;
    for (;;) {
      const std::string_view rest = std::string_view(in_).substr(used);
      const size_t blank = rest.find("\r\n\r\n");
      if (blank == std::string_view::npos) {
        if (rest.size() > 16384) return false;
        break;
      }
      const long long body = ContentLength(rest.substr(0, blank + 2));
      if (body < 0) return false;
      const size_t whole = blank + 4 + static_cast<size_t>(body);
      if (rest.size() < whole) break;
      used += whole;
      if (!loop_.Defer(*this, 0)) output_ += Response();
    }
    in_.erase(0, used);
    return Flush();
  }

  bool Flush() override { return WriteOutput(); }

  void Release(int32_t /*tag*/) override { output_ += Response(); }

 private:
  floor_server::Loop& loop_;
  std::string in_;
};

}  // namespace

int main(int argc, char** argv) {
  const floor_server::Options options =
      floor_server::ParseOptions(argc, argv, kProgram, kUsage, nullptr);
  floor_server::Serve(kProgram, options, [](int fd, floor_server::Loop& loop) {
    return std::make_unique<Connection>(fd, loop);
  });
}
