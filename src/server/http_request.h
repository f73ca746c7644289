// Copyright tollgate authors. A request of the HTTP API as the handler reads it, and the
// parser that fills it.
//
// Beast's http::request keeps every field in a node of its own (an allocation, a tree insert)
// so that any can be looked up. The API reads the request line, the body and three fields
// (Host, Transfer-Encoding, Expect): HttpRequestParser is Beast's own HTTP/1.1 parser
// (basic_parser: the grammar, Content-Length and chunked framing, keep-alive, the size limits)
// keeping only those.
//
// How it is measured against Beast's request_parser: bench/hot_path_bench (BM_CheckRequest,
// BM_CheckRequestBeastParser) and the http-* rows of bench/service_cost.sh; the figures are
// in BENCHMARKS.md ("Home-made parts", "The service").
#ifndef TOLLGATE_SRC_SERVER_HTTP_REQUEST_H_
#define TOLLGATE_SRC_SERVER_HTTP_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <ostream>  // the Beast headers below need it and do not all include it
#include <string>
#include <string_view>

#include "boost/beast/http/basic_parser.hpp"
#include "boost/beast/http/verb.hpp"

namespace tollgate::server {

class HttpRequest {
 public:
  using Verb = boost::beast::http::verb;

  // GET / HTTP/1.1, no field, no body.
  HttpRequest() = default;
  // `method target HTTP/1.x` with no field and no body; keep-alive as the version's default
  // (HTTP/1.1 keeps the connection open, HTTP/1.0 closes it). REQUIRES: version 10 or 11.
  HttpRequest(Verb method, std::string_view target, unsigned version);

  Verb method() const { return method_; }
  // As sent (an unknown method has Verb::unknown and its own text here).
  std::string_view method_string() const { return method_string_; }
  std::string_view target() const { return target_; }
  unsigned version() const { return version_; }
  bool keep_alive() const { return keep_alive_; }
  void keep_alive(bool keep_alive) { keep_alive_ = keep_alive; }
  std::string& body() { return body_; }
  const std::string& body() const { return body_; }

  // Records a field of the head. Only those the API reads are kept: Host (counted),
  // Transfer-Encoding (every such field's value, joined by ", " as one list) and Expect.
  // Names compare case-insensitively.
  void add_field(std::string_view name, std::string_view value);
  // How many Host fields the head had, and whether each value was a host
  // (IsValidHostField).
  int host_fields() const { return host_fields_; }
  bool hosts_valid() const { return hosts_valid_; }
  // Whether the head had a Transfer-Encoding field, and their values as one list.
  bool has_transfer_encoding() const { return has_transfer_encoding_; }
  const std::string& transfer_encoding() const { return transfer_encoding_; }
  // Whether the head had `Expect: 100-continue`.
  bool expects_continue() const { return expects_continue_; }

 private:
  friend class HttpRequestParser;

  Verb method_ = Verb::get;
  std::string method_string_ = "GET";
  std::string target_ = "/";
  unsigned version_ = 11;
  bool keep_alive_ = true;
  int host_fields_ = 0;
  bool hosts_valid_ = true;
  bool has_transfer_encoding_ = false;
  bool expects_continue_ = false;
  std::string transfer_encoding_;
  std::string body_;
};

// Reads one request; a parser per request, as Beast's. Used as Beast's request_parser is
// (header_limit, body_limit, put, put_eof, is_header_done, is_done), then get().
class HttpRequestParser final : public boost::beast::http::basic_parser<true> {
 public:
  HttpRequestParser() = default;
  HttpRequest& get() { return request_; }
  const HttpRequest& get() const { return request_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb method, string_view method_string,
                       string_view target, int version, error_code& error) override;
  void on_response_impl(int status, string_view reason, int version, error_code& error) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& error) override;
  void on_header_impl(error_code& error) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& error) override;
  std::size_t on_body_impl(string_view body, error_code& error) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& error) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body,
                                 error_code& error) override;
  void on_finish_impl(error_code& error) override;

  HttpRequest request_;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_HTTP_REQUEST_H_
