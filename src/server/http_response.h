// Copyright tollgate authors. A response of the HTTP API, kept as it goes on the wire.
//
// Beast's http::response keeps each field in a node of its own (an allocation, a tree insert)
// so that fields can be looked up, replaced and erased. The API's responses only ever add a
// few fields, once each, and are then written: this keeps them as their wire text in one
// string, and writes status line, fields and body with one copy each. Requests are read by
// Beast's parser (src/server/http_request.h).
//
// How it is measured against Beast's http::response: bench/hot_path_bench (BM_CheckAnswer,
// BM_CheckAnswerBeastResponse) and the http-* rows of bench/service_cost.sh; the figures are
// in BENCHMARKS.md ("Home-made parts", "The service").
#ifndef TOLLGATE_SRC_SERVER_HTTP_RESPONSE_H_
#define TOLLGATE_SRC_SERVER_HTTP_RESPONSE_H_

#include <ostream>  // boost/beast/http/status.hpp needs it and does not include it
#include <string>
#include <string_view>

#include "boost/beast/http/status.hpp"

namespace tollgate::server {

class HttpResponse {
 public:
  using Status = boost::beast::http::status;

  // 200, HTTP/1.1, keep-alive, no field, empty body.
  HttpResponse() = default;
  // REQUIRES: version is 10 or 11.
  HttpResponse(Status status, unsigned version) : status_(status), version_(version) {}

  Status result() const { return status_; }
  unsigned result_int() const { return static_cast<unsigned>(status_); }
  unsigned version() const { return version_; }
  // Whether the connection stays open after this response. Written as the version needs
  // it: `Connection: close` on HTTP/1.1, `Connection: keep-alive` on HTTP/1.0.
  bool keep_alive() const { return keep_alive_; }
  void keep_alive(bool keep_alive) { keep_alive_ = keep_alive; }
  std::string& body() { return body_; }
  const std::string& body() const { return body_; }

  // Adds the field `name: value`. REQUIRES: no field of that name (compared case-insensitively)
  // was added yet; `name` is a field name token and `value` holds no CR or LF; not
  // Content-Length or Connection (written from body() and keep_alive()).
  void add_field(std::string_view name, std::string_view value);
  // The value of the field `name` (case-insensitive), or "" when there is none.
  std::string_view field(std::string_view name) const;

  // Appends the response as it goes on the wire to `out`: status line, the fields in the
  // order added, Content-Length, Connection when the version needs it, a blank line, body().
  void AppendTo(std::string& out) const;

 private:
  Status status_ = Status::ok;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  // The added fields as wire text: "Name: value\r\n" each.
  std::string fields_;
  std::string body_;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_HTTP_RESPONSE_H_
