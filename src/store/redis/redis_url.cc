// Copyright tollgate authors.
#include "src/store/redis/redis_url.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tollgate::redis {
namespace {

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid Redis URL (expected redis://[user:password@]host:port[/db]): ", what));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::StatusOr<std::string> PercentDecode(absl::string_view text, absl::string_view part) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) {
      return Invalid(absl::StrCat("truncated percent escape in the ", part));
    }
    int high = HexValue(text[i + 1]);
    int low = HexValue(text[i + 2]);
    if (high < 0 || low < 0) return Invalid(absl::StrCat("bad percent escape in the ", part));
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

}  // namespace

absl::StatusOr<RedisUrl> ParseRedisUrl(std::string_view url_view) {
  const absl::string_view url(url_view.data(), url_view.size());
  constexpr absl::string_view kScheme = "redis://";
  if (!absl::StartsWith(url, kScheme)) {
    if (absl::StartsWith(url, "rediss://")) return Invalid("TLS (rediss://) is not supported");
    return Invalid("must start with redis://");
  }
  absl::string_view rest = url.substr(kScheme.size());
  RedisUrl out;

  // userinfo: everything up to the last '@' (a password may contain '@' only encoded, but
  // be lenient and split at the last one).
  if (size_t at = rest.rfind('@'); at != absl::string_view::npos) {
    absl::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    size_t colon = userinfo.find(':');
    if (colon == absl::string_view::npos) {
      return Invalid("credentials must be user:password or :password");
    }
    absl::StatusOr<std::string> user = PercentDecode(userinfo.substr(0, colon), "user");
    if (!user.ok()) return user.status();
    absl::StatusOr<std::string> password = PercentDecode(userinfo.substr(colon + 1), "password");
    if (!password.ok()) return password.status();
    if (password->empty()) return Invalid("empty password");
    out.user = *std::move(user);
    out.password = *std::move(password);
  }

  absl::string_view hostport = rest;
  if (size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    hostport = rest.substr(0, slash);
    absl::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!absl::SimpleAtoi(db, &out.db) || out.db < 0)) {
      return Invalid(absl::StrCat("database \"", db, "\" is not a number >= 0"));
    }
  }
  absl::string_view port_text;
  bool has_port = false;
  if (absl::StartsWith(hostport, "[")) {
    size_t close = hostport.find(']');
    if (close == absl::string_view::npos) return Invalid("unterminated [IPv6] host");
    out.host = std::string(hostport.substr(1, close - 1));
    absl::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return Invalid("expected :port after [host]");
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    size_t colon = hostport.rfind(':');
    if (colon != absl::string_view::npos) {
      out.host = std::string(hostport.substr(0, colon));
      port_text = hostport.substr(colon + 1);
      has_port = true;
    } else {
      out.host = std::string(hostport);
    }
  }
  if (out.host.empty()) return Invalid("missing host");
  if (has_port) {
    if (!absl::SimpleAtoi(port_text, &out.port) || out.port < 1 || out.port > 65535) {
      return Invalid(absl::StrCat("port \"", port_text, "\" is not in 1..65535"));
    }
  }
  return out;
}

}  // namespace tollgate::redis
