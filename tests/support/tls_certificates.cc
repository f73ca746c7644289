// Copyright tollgate authors.
#include "tests/support/tls_certificates.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/process.h"

namespace tollgate::testing {
namespace {

bool Run(const std::vector<std::string>& argv, const std::string& log) {
  absl::StatusOr<Subprocess> process = Subprocess::Start(argv, log);
  return process.ok() && process->Wait() == 0;
}

}  // namespace

std::string TestCertificates::UrlQuery() const {
  return absl::StrCat("ca=", ca(), "&cert=", client_cert(), "&key=", client_key());
}

std::vector<std::string> TestCertificates::NodeArgs(int tls_port) const {
  return {"--tls-port",         absl::StrCat(tls_port),
          "--tls-cert-file",    node_cert(),
          "--tls-key-file",     node_key(),
          "--tls-ca-cert-file", ca(),
          "--tls-auth-clients", "yes",
          "--tls-replication",  "yes",
          "--tls-cluster",      "yes"};
}

absl::Status TestCertificates::AddCertificate(const std::string& name, const std::string& authority,
                                              const std::string& common_name,
                                              const std::string& extensions) const {
  const std::string& d = dir;
  const std::string log = d + "/openssl.log";
  WriteFile(d + "/" + name + ".ext", extensions);
  const bool made =
      Run({"openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + common_name,
           "-keyout", Key(name), "-out", d + "/" + name + ".csr"},
          log) &&
      Run({"openssl", "x509", "-req", "-in", d + "/" + name + ".csr", "-CA", Pem(authority),
           "-CAkey", Key(authority), "-CAcreateserial", "-days", "2", "-extfile",
           d + "/" + name + ".ext", "-out", Pem(name)},
          log);
  return made ? absl::OkStatus() : absl::InternalError(absl::StrCat("openssl failed; see ", log));
}

absl::StatusOr<TestCertificates> TestCertificates::Make() {
  TestCertificates out;
  out.dir = MakeTempDir("tollgate-tls");
  const std::string& d = out.dir;
  const std::string log = d + "/openssl.log";
  auto authority = [&](const std::string& name) {
    return Run({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                "/CN=" + name, "-keyout", d + "/" + name + ".key", "-out", d + "/" + name + ".pem"},
               log);
  };
  auto signed_by_ca = [&](const std::string& name, const std::string& extensions) {
    return out.AddCertificate(name, "ca", "localhost", extensions).ok();
  };
  if (!(authority("ca") && authority("other_ca") &&
        signed_by_ca("server", "subjectAltName=DNS:localhost\n") &&
        signed_by_ca("node", "subjectAltName=DNS:localhost,IP:127.0.0.1\n") &&
        signed_by_ca("client", "extendedKeyUsage=clientAuth\n"))) {
    return absl::InternalError(absl::StrCat("openssl failed; see ", log));
  }
  return out;
}

}  // namespace tollgate::testing
