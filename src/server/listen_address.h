// Copyright tollgate authors. HOST:PORT addresses for the servers' listen flags.
#ifndef TOLLGATE_SRC_SERVER_LISTEN_ADDRESS_H_
#define TOLLGATE_SRC_SERVER_LISTEN_ADDRESS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tollgate::server {

struct ListenAddress {
  // An IP literal or a host name; IPv6 literals without brackets ("::1").
  std::string host;
  // 0 asks the kernel for an ephemeral port.
  uint16_t port = 0;
};

// Parses "HOST:PORT", "[IPV6]:PORT". The port is 0..65535. InvalidArgument with a message
// naming `text` otherwise (a missing host, port or colon; a port out of range).
absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view text);

// "HOST:PORT", with brackets around IPv6 literals.
std::string FormatListenAddress(std::string_view host, uint16_t port);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_LISTEN_ADDRESS_H_
