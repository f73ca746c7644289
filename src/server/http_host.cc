// Copyright tollgate authors.
#include "src/server/http_host.h"

#include <arpa/inet.h>

#include <cstdint>
#include <string>

namespace tollgate::server {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsUnreserved(char c) {
  return IsAlpha(c) || IsDigit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}
bool IsSubDelim(char c) {
  switch (c) {
    case '!':
    case '$':
    case '&':
    case '\'':
    case '(':
    case ')':
    case '*':
    case '+':
    case ',':
    case ';':
    case '=':
      return true;
    default:
      return false;
  }
}

bool AllDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!IsDigit(c)) return false;
  }
  return true;
}

// A port: decimal digits, possibly none (RFC 3986 3.2.3).
bool IsPort(std::string_view text) { return text.empty() || AllDigits(text); }

// "[...]": an IPv6 address or an IPvFuture.
bool IsIpLiteral(std::string_view inside) {
  if (!inside.empty() && (inside[0] == 'v' || inside[0] == 'V')) {
    const size_t dot = inside.find('.');
    if (dot == std::string_view::npos || dot == 1 || dot + 1 == inside.size()) return false;
    for (char c : inside.substr(1, dot - 1)) {
      if (!IsHexDigit(c)) return false;
    }
    for (char c : inside.substr(dot + 1)) {
      if (!IsUnreserved(c) && !IsSubDelim(c) && c != ':') return false;
    }
    return true;
  }
  const std::string address(inside);
  in6_addr parsed;
  return inet_pton(AF_INET6, address.c_str(), &parsed) == 1;
}

// Dotted decimal, each of the four parts 0..255 without leading zeros.
bool IsIpv4(std::string_view text) {
  int parts = 0;
  while (true) {
    const size_t dot = text.find('.');
    const std::string_view part = text.substr(0, dot);
    if (!AllDigits(part) || part.size() > 3 || (part.size() > 1 && part[0] == '0')) return false;
    if (std::stoi(std::string(part)) > 255) return false;
    ++parts;
    if (dot == std::string_view::npos) break;
    text.remove_prefix(dot + 1);
  }
  return parts == 4;
}

bool IsRegName(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size() || !IsHexDigit(text[i + 1]) || !IsHexDigit(text[i + 2])) {
        return false;
      }
      i += 2;
      continue;
    }
    if (!IsUnreserved(c) && !IsSubDelim(c)) return false;
  }
  // A name whose last label (a final dot aside) is a number is an IPv4 address or nothing.
  std::string_view name = text;
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  const size_t dot = name.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? name : name.substr(dot + 1);
  if (AllDigits(last)) return IsIpv4(name);
  return true;
}

}  // namespace

bool IsValidHostField(std::string_view value) {
  if (value.empty()) return true;
  if (value[0] == '[') {
    const size_t close = value.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view rest = value.substr(close + 1);
    if (!rest.empty() && (rest[0] != ':' || !IsPort(rest.substr(1)))) return false;
    return IsIpLiteral(value.substr(1, close - 1));
  }
  const size_t colon = value.rfind(':');
  const std::string_view host = value.substr(0, colon);
  if (colon != std::string_view::npos && !IsPort(value.substr(colon + 1))) return false;
  if (host.empty()) return false;
  return IsRegName(host);
}

}  // namespace tollgate::server
