// Copyright tollgate authors. Certificates for tests of TLS (Redis over TLS, the gRPC port's
// TLS), made by the openssl command in a temporary directory.
#ifndef TOLLGATE_TESTS_SUPPORT_TLS_CERTIFICATES_H_
#define TOLLGATE_TESTS_SUPPORT_TLS_CERTIFICATES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace tollgate::testing {

// A certificate authority; a server certificate it signs for `localhost` only; a node
// certificate it signs for `localhost` and `127.0.0.1` (cluster nodes and sentinels name
// each other by address); a client certificate it signs; and a second, unrelated authority.
struct TestCertificates {
  std::string dir;
  std::string ca() const { return dir + "/ca.pem"; }
  std::string other_ca() const { return dir + "/other_ca.pem"; }
  std::string server_cert() const { return dir + "/server.pem"; }
  std::string server_key() const { return dir + "/server.key"; }
  std::string node_cert() const { return dir + "/node.pem"; }
  std::string node_key() const { return dir + "/node.key"; }
  std::string client_cert() const { return dir + "/client.pem"; }
  std::string client_key() const { return dir + "/client.key"; }

  // `ca=...&cert=...&key=...`: the query of a rediss URL that trusts ca() and presents the
  // client certificate.
  std::string UrlQuery() const;

  // redis-server arguments that serve TLS on `tls_port` with the node certificate, require
  // client certificates from ca(), and use TLS for replication and the cluster bus.
  std::vector<std::string> NodeArgs(int tls_port) const;

  // <dir>/<name>.pem and <dir>/<name>.key of a certificate made by AddCertificate.
  std::string Pem(const std::string& name) const { return dir + "/" + name + ".pem"; }
  std::string Key(const std::string& name) const { return dir + "/" + name + ".key"; }
  // Makes Pem(name) and Key(name): a new RSA key and a certificate for it with subject
  // CN=`common_name` and openssl x509 `extensions` (lines such as
  // "subjectAltName=DNS:localhost"), signed by `authority` ("ca" or "other_ca"), with a
  // serial of its own. Internal error naming <dir>/openssl.log when openssl fails.
  absl::Status AddCertificate(const std::string& name, const std::string& authority,
                              const std::string& common_name, const std::string& extensions) const;

  // Internal error naming <dir>/openssl.log when openssl fails.
  static absl::StatusOr<TestCertificates> Make();
};

// A test suite whose tests share one set of certificates, made by `Make` before the first
// test (a failure fails the suite) and kept until after the last.
template <absl::StatusOr<TestCertificates> (*Make)() = &TestCertificates::Make>
class CertificatesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<TestCertificates> made = Make();
    ASSERT_TRUE(made.ok()) << made.status();
    certificates_ = new TestCertificates(*std::move(made));
  }
  static void TearDownTestSuite() {
    delete certificates_;
    certificates_ = nullptr;
  }
  static const TestCertificates& certs() { return *certificates_; }

 private:
  static inline TestCertificates* certificates_ = nullptr;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_TLS_CERTIFICATES_H_
