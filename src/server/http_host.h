// Copyright tollgate authors. Whether a Host field's value is a host (RFC 9110 7.2:
// uri-host [":" port], uri-host as RFC 3986 3.2.2 writes it).
#ifndef TOLLGATE_SRC_SERVER_HTTP_HOST_H_
#define TOLLGATE_SRC_SERVER_HTTP_HOST_H_

#include <string_view>

namespace tollgate::server {

// True for an empty value (RFC 9112 3.2 lets a client send one), and for
//   IP-literal    "[" an IPv6 address, or "v" HEXDIG "." ... (IPvFuture) "]"
//   IPv4address   dotted decimal
//   reg-name      unreserved, percent-encoded and sub-delims characters
// each optionally followed by ":" and decimal digits. A reg-name whose last label is a
// number must be an IPv4 address (the WHATWG URL standard's "ends in a number" rule):
// "I127.0.0.1" and "1.2.3.256" are not hosts, "example.com" and "127.0.0.1" are.
bool IsValidHostField(std::string_view value);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_HTTP_HOST_H_
