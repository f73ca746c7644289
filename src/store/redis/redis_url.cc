// Copyright tollgate authors.
#include "src/store/redis/redis_url.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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

absl::Status InvalidTarget(absl::string_view scheme, absl::string_view what) {
  const bool cluster = absl::StrContains(scheme, "cluster");
  const bool tls = absl::StartsWith(scheme, "rediss");
  const std::string form =
      cluster ? absl::StrCat(scheme, "[user:password@]host:port[,host:port...]",
                             tls ? "[?ca=FILE&cert=FILE&key=FILE&verify=yes|no|chain]" : "")
              : absl::StrCat(
                    scheme, "[user:password@]host:port[,host:port...]/<master name>",
                    tls ? "[?db=N&ca=FILE&cert=FILE&key=FILE&verify=yes|no|chain]" : "[?db=N]");
  return absl::InvalidArgumentError(
      absl::StrCat("invalid Redis URL (expected ", form, "): ", what));
}

// One `name=value` of a TLS URL's query into `options`: ca=FILE, cert=FILE, key=FILE,
// verify=yes|no|chain (values percent-decoded). NotFound for another name; InvalidArgument for a
// bad value.
absl::Status ParseTlsParameter(absl::string_view pair, TlsOptions& options) {
  const size_t equals = pair.find('=');
  const absl::string_view name = pair.substr(0, equals);
  absl::StatusOr<std::string> value = PercentDecode(
      equals == absl::string_view::npos ? absl::string_view() : pair.substr(equals + 1), name);
  if (!value.ok()) return value.status();
  if (name == "ca") {
    options.ca_file = *std::move(value);
  } else if (name == "cert") {
    options.cert_file = *std::move(value);
  } else if (name == "key") {
    options.key_file = *std::move(value);
  } else if (name == "verify" && (*value == "yes" || *value == "no" || *value == "chain")) {
    options.verify_peer = *value != "no";
    options.verify_host = *value == "yes";
  } else {
    return absl::NotFoundError(absl::StrCat("unknown parameter \"", name, "\""));
  }
  return absl::OkStatus();
}

// `host[:port]` or `[ipv6][:port]`.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, int default_port,
                                       absl::string_view scheme) {
  HostPort out;
  out.port = default_port;
  absl::string_view port_text;
  bool has_port = false;
  if (absl::StartsWith(text, "[")) {
    size_t close = text.find(']');
    if (close == absl::string_view::npos) return InvalidTarget(scheme, "unterminated [IPv6] host");
    out.host = std::string(text.substr(1, close - 1));
    absl::string_view after = text.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return InvalidTarget(scheme, "expected :port after [host]");
      port_text = after.substr(1);
      has_port = true;
    }
  } else if (size_t colon = text.rfind(':'); colon != absl::string_view::npos) {
    out.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    has_port = true;
  } else {
    out.host = std::string(text);
  }
  if (out.host.empty()) return InvalidTarget(scheme, "missing host");
  if (has_port && (!absl::SimpleAtoi(port_text, &out.port) || out.port < 1 || out.port > 65535)) {
    return InvalidTarget(scheme, absl::StrCat("port \"", port_text, "\" is not in 1..65535"));
  }
  return out;
}

}  // namespace

Topology UrlTopology(std::string_view url_view) {
  const absl::string_view url(url_view.data(), url_view.size());
  if (absl::StartsWith(url, "redis-cluster://") || absl::StartsWith(url, "rediss-cluster://")) {
    return Topology::kCluster;
  }
  if (absl::StartsWith(url, "redis-sentinel://") || absl::StartsWith(url, "rediss-sentinel://")) {
    return Topology::kSentinel;
  }
  return Topology::kStandalone;
}

absl::StatusOr<RedisTarget> ParseRedisTarget(std::string_view url_view) {
  const absl::string_view url(url_view.data(), url_view.size());
  RedisTarget out;
  out.topology = UrlTopology(url_view);
  if (out.topology == Topology::kStandalone) {
    absl::StatusOr<RedisUrl> node = ParseRedisUrl(url_view);
    if (!node.ok()) return node.status();
    out.node = *std::move(node);
    out.seeds.push_back({out.node.host, out.node.port});
    return out;
  }
  out.node.tls = absl::StartsWith(url, "rediss");
  const absl::string_view scheme = url.substr(0, url.find("://") + 3);
  absl::string_view rest = url.substr(scheme.size());
  // The query (TLS files, a Sentinel's db) ends the URL.
  absl::string_view query;
  if (size_t question = rest.find('?'); question != absl::string_view::npos) {
    query = rest.substr(question + 1);
    rest = rest.substr(0, question);
  }
  // The credentials end at the last '@' before the path.
  absl::string_view authority = rest.substr(0, rest.find('/'));
  absl::string_view path;
  if (authority.size() < rest.size()) path = rest.substr(authority.size() + 1);
  if (size_t at = authority.rfind('@'); at != absl::string_view::npos) {
    // Reuse redis:// parsing (and its messages) for the credentials.
    absl::StatusOr<RedisUrl> credentials =
        ParseRedisUrl(absl::StrCat("redis://", authority.substr(0, at + 1), "localhost"));
    if (!credentials.ok()) return credentials.status();
    out.node.user = credentials->user;
    out.node.password = credentials->password;
    authority = authority.substr(at + 1);
  }
  const int default_port = out.topology == Topology::kCluster ? 6379 : 26379;
  for (absl::string_view part : absl::StrSplit(authority, ',')) {
    absl::StatusOr<HostPort> host = ParseHostPort(part, default_port, scheme);
    if (!host.ok()) return host.status();
    out.seeds.push_back(*std::move(host));
  }
  const bool cluster = out.topology == Topology::kCluster;
  if (cluster) {
    if (!path.empty() && path != "0") {
      return InvalidTarget(scheme, "a Redis Cluster has only database 0");
    }
  } else {
    if (path.empty()) return InvalidTarget(scheme, "missing /<master name>");
    out.master_name = std::string(path);
  }
  const absl::string_view expected =
      cluster ? (out.node.tls ? "ca=FILE, cert=FILE, key=FILE, verify=yes|no|chain"
                              : "none (TLS files need rediss-cluster://)")
              : (out.node.tls ? "db=N, ca=FILE, cert=FILE, key=FILE, verify=yes|no|chain"
                              : "db=N (TLS files need rediss-sentinel://)");
  for (absl::string_view parameter : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    if (!cluster && absl::ConsumePrefix(&parameter, "db=")) {
      if (!absl::SimpleAtoi(parameter, &out.node.db) || out.node.db < 0) {
        return InvalidTarget(scheme, "db must be a number >= 0");
      }
      continue;
    }
    absl::Status tls =
        out.node.tls ? ParseTlsParameter(parameter, out.node.tls_options) : absl::NotFoundError("");
    if (absl::IsNotFound(tls)) {
      const absl::string_view name = parameter.substr(0, parameter.find('='));
      return InvalidTarget(
          scheme, absl::StrCat("unknown parameter \"", name, "\" (expected ", expected, ")"));
    }
    if (!tls.ok()) return tls;
  }
  return out;
}

absl::StatusOr<RedisUrl> ParseRedisUrl(std::string_view url_view) {
  const absl::string_view url(url_view.data(), url_view.size());
  RedisUrl out;
  absl::string_view rest;
  if (absl::StartsWith(url, "redis://")) {
    rest = url.substr(8);
  } else if (absl::StartsWith(url, "rediss://")) {
    rest = url.substr(9);
    out.tls = true;
  } else {
    return Invalid("must start with redis:// (or rediss:// for TLS)");
  }
  // TLS options: ?ca=FILE&cert=FILE&key=FILE&verify=no (values percent-decoded).
  if (size_t question = rest.find('?'); question != absl::string_view::npos) {
    absl::string_view query = rest.substr(question + 1);
    rest = rest.substr(0, question);
    if (!out.tls) return Invalid("parameters (ca, cert, key, verify) need rediss://");
    for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
      absl::Status status = ParseTlsParameter(pair, out.tls_options);
      if (absl::IsNotFound(status)) {
        return Invalid(absl::StrCat(
            status.message(), " (expected ca=FILE, cert=FILE, key=FILE, verify=yes|no|chain)"));
      }
      if (!status.ok()) return status;
    }
  }

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
