// Copyright tollgate authors.
#include "src/server/http_response.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/beast/http/status.hpp"
#include "src/core/absl_view.h"

namespace tollgate::server {

void HttpResponse::add_field(std::string_view name, std::string_view value) {
  // A response's fields take one allocation, not one per doubling from the inline capacity.
  if (fields_.capacity() < 256) fields_.reserve(256);
  absl::StrAppend(&fields_, AbslView(name), ": ", AbslView(value), "\r\n");
}

std::string_view HttpResponse::field(std::string_view name) const {
  std::string_view rest = fields_;
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 2);
    const size_t colon = line.find(':');
    if (absl::EqualsIgnoreCase(AbslView(line.substr(0, colon)), AbslView(name))) {
      return line.substr(colon + 2);
    }
  }
  return {};
}

void HttpResponse::AppendTo(std::string& out) const {
  const auto reason = boost::beast::http::obsolete_reason(status_);
  std::string_view connection;
  if (version_ == 10 && keep_alive_) connection = "Connection: keep-alive\r\n";
  if (version_ != 10 && !keep_alive_) connection = "Connection: close\r\n";
  absl::StrAppend(&out, version_ == 10 ? "HTTP/1.0 " : "HTTP/1.1 ", result_int(), " ",
                  absl::string_view(reason.data(), reason.size()), "\r\n", fields_,
                  "Content-Length: ", body_.size(), "\r\n", AbslView(connection), "\r\n", body_);
}

}  // namespace tollgate::server
