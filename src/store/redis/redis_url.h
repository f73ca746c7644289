// Copyright tollgate authors. Redis URLs: `redis://` (one server), `redis-cluster://` (a Redis
// Cluster, by seed nodes) and `redis-sentinel://` (a primary found through Sentinel); each
// with an `s` (`rediss://`, ...) for TLS.
#ifndef TOLLGATE_SRC_STORE_REDIS_REDIS_URL_H_
#define TOLLGATE_SRC_STORE_REDIS_REDIS_URL_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tollgate::redis {

// TLS settings of a rediss:// URL (see MakeTlsContext in tls.h).
struct TlsOptions {
  // PEM file of the certificate authorities that sign Redis' certificate. Empty: the
  // system's default trust store.
  std::string ca_file = "";
  // Client certificate and private key (PEM), for a Redis that requires them
  // (`tls-auth-clients yes`, Redis' default). Both or neither.
  std::string cert_file = "";
  std::string key_file = "";
  // Verify Redis' certificate chain and that it names the host of the URL. Turn off only
  // for tests against a self-signed certificate with no CA at hand.
  bool verify_peer = true;
  // With verify_peer: also that the certificate names the host of the URL (`verify=chain`
  // turns this off alone: a certificate signed by the CA for another name, as
  // envoyproxy/ratelimit's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION accepts).
  bool verify_host = true;
};

struct RedisUrl {
  std::string host;
  int port = 6379;
  // Empty user with a password: `AUTH password` (the default user). Both: ACL `AUTH user
  // password`. Neither: no AUTH.
  std::string user;
  std::string password;
  int db = 0;
  // rediss://: TLS with these options.
  bool tls = false;
  TlsOptions tls_options;
};

// Parses `redis://[[user]:password@]host[:port][/db]`, or the same with `rediss://` (TLS)
// and optional `?ca=FILE&cert=FILE&key=FILE&verify=yes|no|chain`. An IPv6 host is written in
// brackets
// (`redis://[::1]:6379`). User and password may be percent-encoded. InvalidArgument naming
// the offending part otherwise (the password is never echoed).
absl::StatusOr<RedisUrl> ParseRedisUrl(std::string_view url);

enum class Topology { kStandalone, kCluster, kSentinel };

struct HostPort {
  std::string host;
  int port = 6379;
  bool operator==(const HostPort&) const = default;
};

// Where the limits live, out of any of the three URL forms.
struct RedisTarget {
  Topology topology = Topology::kStandalone;
  // How to reach a data node: credentials and database (always 0 in a cluster). For
  // kStandalone also its host and port; for the others, host and port are set per node.
  RedisUrl node;
  // kCluster: the seed nodes (any nodes of the cluster; the slot map is read from them).
  // kSentinel: the sentinels. kStandalone: the one server.
  std::vector<HostPort> seeds;
  // kSentinel: the name the sentinels monitor the primary under.
  std::string master_name;
};

// Parses
//   redis://[[user]:password@]host[:port][/db]                              (ParseRedisUrl)
//   redis-cluster://[[user]:password@]host[:port][,host[:port]...]            (port 6379)
//   redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/<master name>[?db=N]
//                                                                            (port 26379)
// and their TLS forms rediss://, rediss-cluster:// and rediss-sentinel://, which take the
// TLS parameters ca=FILE, cert=FILE, key=FILE, verify=yes|no|chain in the query (beside db=N for
// Sentinel) and use them for every connection: each cluster node (at the TLS port it
// announces to a TLS client), the sentinels and the primary they name.
// Credentials are for the data nodes; sentinels are asked without AUTH. A cluster has only
// database 0. InvalidArgument naming the offending part (never echoing the password).
absl::StatusOr<RedisTarget> ParseRedisTarget(std::string_view url);

// The URL's form without parsing the rest: kCluster for redis-cluster:// and
// rediss-cluster://, kSentinel for redis-sentinel:// and rediss-sentinel://, kStandalone for
// anything else.
Topology UrlTopology(std::string_view url);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_REDIS_URL_H_
