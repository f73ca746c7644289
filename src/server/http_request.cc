// Copyright tollgate authors.
#include "src/server/http_request.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "src/core/absl_view.h"
#include "src/server/http_host.h"

namespace tollgate::server {

HttpRequest::HttpRequest(Verb method, std::string_view target, unsigned version)
    : method_(method),
      method_string_(boost::beast::http::to_string(method)),
      target_(target),
      version_(version),
      keep_alive_(version >= 11) {}

void HttpRequest::add_field(std::string_view name, std::string_view value) {
  if (absl::EqualsIgnoreCase(AbslView(name), "host")) {
    ++host_fields_;
    hosts_valid_ = hosts_valid_ && IsValidHostField(value);
  } else if (absl::EqualsIgnoreCase(AbslView(name), "transfer-encoding")) {
    if (has_transfer_encoding_) transfer_encoding_ += ", ";
    transfer_encoding_.append(value);
    has_transfer_encoding_ = true;
  } else if (absl::EqualsIgnoreCase(AbslView(name), "expect")) {
    expects_continue_ =
        absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(AbslView(value)), "100-continue");
  }
}

void HttpRequestParser::on_request_impl(boost::beast::http::verb method, string_view method_string,
                                        string_view target, int version, error_code& /*error*/) {
  request_.method_ = method;
  request_.method_string_.assign(method_string.data(), method_string.size());
  request_.target_.assign(target.data(), target.size());
  request_.version_ = static_cast<unsigned>(version);
}

void HttpRequestParser::on_response_impl(int /*status*/, string_view /*reason*/, int /*version*/,
                                         error_code& /*error*/) {}  // a request parser

void HttpRequestParser::on_field_impl(boost::beast::http::field /*name*/, string_view name_string,
                                      string_view value, error_code& /*error*/) {
  // A chunked body's trailer fields come after the head: none of them frames the request.
  if (is_header_done()) return;
  request_.add_field(std::string_view(name_string.data(), name_string.size()),
                     std::string_view(value.data(), value.size()));
}

void HttpRequestParser::on_header_impl(error_code& /*error*/) {
  request_.keep_alive_ = keep_alive();
}

void HttpRequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                          error_code& /*error*/) {
  // The parser has held a declared length to body_limit already.
  if (content_length) request_.body_.reserve(static_cast<size_t>(*content_length));
}

std::size_t HttpRequestParser::on_body_impl(string_view body, error_code& /*error*/) {
  request_.body_.append(body.data(), body.size());
  return body.size();
}

void HttpRequestParser::on_chunk_header_impl(std::uint64_t /*size*/, string_view /*extensions*/,
                                             error_code& /*error*/) {}

std::size_t HttpRequestParser::on_chunk_body_impl(std::uint64_t /*remain*/, string_view body,
                                                  error_code& /*error*/) {
  request_.body_.append(body.data(), body.size());
  return body.size();
}

void HttpRequestParser::on_finish_impl(error_code& /*error*/) {}

}  // namespace tollgate::server
