// Copyright tollgate authors.
#include "src/server/http_response.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "absl/strings/match.h"
#include "boost/beast/http/status.hpp"

namespace tollgate::server {

void HttpResponse::add_field(std::string_view name, std::string_view value) {
  const size_t at = fields_.size();
  const size_t size = name.size() + 2 + value.size() + 2;
  // A response's fields take one allocation, not one per doubling from the inline capacity.
  if (at + size > fields_.capacity()) fields_.reserve(std::max(at + size, 2 * at + 256));
  fields_.resize(at + size);
  char* out = fields_.data() + at;
  std::memcpy(out, name.data(), name.size());
  out += name.size();
  *out++ = ':';
  *out++ = ' ';
  std::memcpy(out, value.data(), value.size());
  out += value.size();
  *out++ = '\r';
  *out = '\n';
}

std::string_view HttpResponse::field(std::string_view name) const {
  std::string_view rest = fields_;
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 2);
    const size_t colon = line.find(':');
    if (absl::EqualsIgnoreCase(absl::string_view(line.data(), std::min(colon, line.size())),
                               absl::string_view(name.data(), name.size()))) {
      return line.substr(colon + 2);
    }
  }
  return {};
}

void HttpResponse::AppendTo(std::string& out) const {
  const auto reason = boost::beast::http::obsolete_reason(status_);
  char length[24];
  const std::string_view length_text(
      length, std::to_chars(length, length + sizeof(length), body_.size()).ptr - length);
  std::string_view connection;
  if (version_ == 10 && keep_alive_) connection = "Connection: keep-alive\r\n";
  if (version_ != 10 && !keep_alive_) connection = "Connection: close\r\n";
  // "HTTP/1.1 " + 3 digits + " " + reason + CRLF, the fields, Content-Length, Connection,
  // the blank line, the body.
  out.reserve(out.size() + 14 + reason.size() + fields_.size() + 18 + length_text.size() +
              connection.size() + 2 + body_.size());
  out.append(version_ == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
  const unsigned code = result_int();
  out.push_back(static_cast<char>('0' + code / 100 % 10));
  out.push_back(static_cast<char>('0' + code / 10 % 10));
  out.push_back(static_cast<char>('0' + code % 10));
  out.push_back(' ');
  out.append(reason.data(), reason.size());
  out.append("\r\n");
  out.append(fields_);
  out.append("Content-Length: ");
  out.append(length_text);
  out.append("\r\n");
  out.append(connection);
  out.append("\r\n");
  out.append(body_);
}

}  // namespace tollgate::server
