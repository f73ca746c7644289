// Copyright tollgate authors.
#include "src/server/listen_address.h"

#include <charconv>

namespace tollgate::server {

absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view text) {
  auto invalid = [text](std::string_view why) {
    return absl::InvalidArgumentError("invalid address \"" + std::string(text) +
                                      "\": " + std::string(why) + " (expected HOST:PORT)");
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return invalid("missing ']'");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return invalid("missing ':PORT'");
    port = rest.substr(1);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return invalid("missing ':PORT'");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return invalid("write IPv6 addresses in brackets, as [::1]:8080");
    }
  }
  if (host.empty()) return invalid("missing host");
  if (port.empty()) return invalid("missing port");
  for (char c : port) {
    if (c < '0' || c > '9') return invalid("port is not a number");
  }
  uint32_t port_number = 0;
  auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (port.size() > 5 || error != std::errc() || port_number > 65535) {
    return invalid("port out of range 0..65535");
  }
  return ListenAddress{std::string(host), static_cast<uint16_t>(port_number)};
}

std::string FormatListenAddress(std::string_view host, uint16_t port) {
  std::string port_text = std::to_string(port);
  if (host.find(':') != std::string_view::npos) {
    return "[" + std::string(host) + "]:" + port_text;
  }
  return std::string(host) + ":" + port_text;
}

}  // namespace tollgate::server
