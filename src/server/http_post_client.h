// Copyright tollgate authors. A small HTTP/1.1 client, the OTLP exporter's: POSTs one body at a
// time to one http:// URL over a kept-alive connection (Boost.Beast on an io_context of its
// own, run by the caller's thread), with one deadline over name resolution, connect, write and
// read. No retry beyond reopening a kept-alive connection the server had closed.
#ifndef TOLLGATE_SRC_SERVER_HTTP_POST_CLIENT_H_
#define TOLLGATE_SRC_SERVER_HTTP_POST_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tollgate::server {

// An http:// URL, split for a client.
struct HttpUrl {
  std::string host;  // an IPv6 address without its brackets
  uint16_t port = 80;
  // The path (with its query, if any); "/" when the URL has none.
  std::string target = "/";
  // "HOST[:PORT]" as the URL gave it, for the Host header.
  std::string authority;
};

// Splits "http://HOST[:PORT][/PATH]" (HOST a name, an IPv4 address or [IPv6]). InvalidArgument
// naming the URL for another scheme (https:// included: this client has no TLS; run a local
// collector and give it http://), user info, an empty host, a port that is not 1..65535, or a
// fragment.
absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url);

// How one POST ended.
struct HttpPostOutcome {
  enum class Result {
    kSuccess,      // a 2xx answer
    kRejected,     // another status: `detail` is "HTTP <status>"
    kTimeout,      // no whole answer by the deadline
    kUnreachable,  // name resolution, connect, write or read failed (refused, reset, ...)
  };
  Result result = Result::kSuccess;
  std::string detail;
};

// Not thread-safe, but for Abort: one thread Posts.
class HttpPostClient {
 public:
  explicit HttpPostClient(HttpUrl url);
  HttpPostClient(const HttpPostClient&) = delete;
  HttpPostClient& operator=(const HttpPostClient&) = delete;
  ~HttpPostClient();

  // POSTs `body` with `content_type` and reads the answer (its body is read, at most 64 KiB,
  // and ignored). Opens a connection when none is open, keeps it when the server does; a kept
  // connection that fails before an answer (the server closed it while idle) is reopened
  // once. Whatever happens, returns by `deadline` (and a little more to close the socket).
  HttpPostOutcome Post(std::string body, std::string_view content_type,
                       std::chrono::steady_clock::time_point deadline);

  // From any thread: a Post in progress ends at once, as do later ones (kUnreachable,
  // "aborted").
  void Abort();

 private:
  struct Io;
  const HttpUrl url_;
  std::unique_ptr<Io> io_;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_HTTP_POST_CLIENT_H_
