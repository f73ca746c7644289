// Copyright tollgate authors.
#include "src/server/http_framing.h"

#include <iterator>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "src/server/http_host.h"
#include "src/server/json_errors.h"

namespace tollgate::server {
namespace {

namespace http = boost::beast::http;

absl::string_view View(boost::beast::string_view text) { return {text.data(), text.size()}; }

}  // namespace

std::optional<FramingRefusal> CheckRequestFraming(const http::request_header<>& head) {
  const auto [host_begin, host_end] = head.equal_range(http::field::host);
  if (head.version() >= 11) {
    const auto hosts = std::distance(host_begin, host_end);
    if (hosts == 0) {
      return FramingRefusal{http::status::bad_request,
                            "an HTTP/1.1 request needs a Host header (RFC 9112 3.2)"};
    }
    if (hosts > 1) {
      return FramingRefusal{http::status::bad_request, "more than one Host header (RFC 9112 3.2)"};
    }
  }
  // HTTP/1.0 may send a Host too; whichever version, it must be a host.
  for (auto host = host_begin; host != host_end; ++host) {
    if (!IsValidHostField(std::string_view(host->value().data(), host->value().size()))) {
      return FramingRefusal{http::status::bad_request,
                            "the Host header is not a host[:port] (RFC 9112 3.2, RFC 3986 3.2.2)"};
    }
  }
  const auto [coding_begin, coding_end] = head.equal_range(http::field::transfer_encoding);
  if (coding_begin == coding_end) return std::nullopt;
  if (head.version() < 11) {
    return FramingRefusal{http::status::bad_request,
                          "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 6.1)"};
  }
  int chunked = 0;
  for (auto field = coding_begin; field != coding_end; ++field) {
    for (absl::string_view element : absl::StrSplit(View(field->value()), ',')) {
      // A coding is a token, optionally with parameters (`gzip;q=1` names gzip).
      absl::string_view coding = absl::StripAsciiWhitespace(element.substr(0, element.find(';')));
      if (coding.empty()) continue;
      if (absl::StrContains(coding, ' ') || absl::StrContains(coding, '\t')) {
        return FramingRefusal{http::status::bad_request,
                              "malformed Transfer-Encoding (codings are separated by commas)"};
      }
      if (absl::EqualsIgnoreCase(coding, "chunked")) {
        ++chunked;
        continue;
      }
      return FramingRefusal{
          http::status::not_implemented,
          absl::StrCat("transfer coding ", QuoteForMessage(coding),
                       " is not implemented (only chunked is); send the body uncoded")};
    }
  }
  if (chunked > 1) {
    return FramingRefusal{http::status::bad_request, "chunked applied more than once (RFC 9112 7)"};
  }
  return std::nullopt;
}

}  // namespace tollgate::server
