// Copyright tollgate authors. HTTP/1.1 framing rules that Beast's parser leaves to us, checked
// on a parsed request (RFC 9112), so that tollgate behind a proxy never reads a body
// differently from how the proxy framed it.
#ifndef TOLLGATE_SRC_SERVER_HTTP_FRAMING_H_
#define TOLLGATE_SRC_SERVER_HTTP_FRAMING_H_

#include <optional>
#include <string>

#include "boost/beast/http/message.hpp"
#include "boost/beast/http/status.hpp"

namespace tollgate::server {

// Why a request head is refused: the reply's status and its {"error"} message. The message
// quotes no raw byte of the request. The connection is closed after the reply.
struct FramingRefusal {
  boost::beast::http::status status;
  std::string message;
};

// nullopt when the head may be served; else the refusal:
//   501 for a transfer coding other than `chunked` (`Transfer-Encoding: gzip, chunked`:
//       we do not decode gzip, so the body would be read as what it is not; RFC 9112 6.1);
//   400 for `Transfer-Encoding` on an HTTP/1.0 request (RFC 9112 6.1), for a malformed
//       coding list or chunked twice (RFC 9112 7), for an HTTP/1.1 request without
//       exactly one `Host` field, and for a `Host` whose value is not a host
//       (IsValidHostField; RFC 9112 3.2).
// What Beast's parser refuses already (Content-Length with Transfer-Encoding, two differing
// Content-Lengths, bare LF, chunked not last) never reaches this. Beast's parser adds a
// chunked body's trailer fields to the request's: a Host or Transfer-Encoding there counts
// as one in the head. Thread-safe; never throws.
std::optional<FramingRefusal> CheckRequestFraming(const boost::beast::http::request_header<>& head);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_HTTP_FRAMING_H_
