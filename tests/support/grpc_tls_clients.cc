// Copyright tollgate authors.
#include "tests/support/grpc_tls_clients.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace tollgate::testing {

using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;

std::shared_ptr<grpc::Channel> GrpcTlsChannel(int port, const std::string& ca_path,
                                              const std::string& cert_path,
                                              const std::string& key_path) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const std::string target = absl::StrCat("127.0.0.1:", port);
  if (ca_path.empty()) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments);
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFileText(ca_path);
  if (!cert_path.empty()) {
    ssl.pem_cert_chain = ReadFileText(cert_path);
    ssl.pem_private_key = ReadFileText(key_path);
  }
  arguments.SetSslTargetNameOverride("localhost");
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(ssl), arguments);
}

grpc::Status ShouldRateLimit(const std::shared_ptr<grpc::Channel>& channel, const std::string& user,
                             RateLimitResponse* response) {
  RateLimitRequest request;
  request.set_domain("tiffin");
  auto* entry = request.add_descriptors()->add_entries();
  entry->set_key("user");
  entry->set_value(user);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stub = RateLimitService::NewStub(channel);
  return stub->ShouldRateLimit(&context, request, response);
}

int64_t MetricValue(const ServeProcess& server, const std::string& series) {
  HttpTestClient client(server.port());
  auto response = client.Send(boost::beast::http::verb::get, "/metrics");
  if (!response.has_value()) return -1;
  const std::string& body = response->body();
  const std::string line = series + " ";
  for (size_t at = body.find(line); at != std::string::npos; at = body.find(line, at + 1)) {
    if (at == 0 || body[at - 1] == '\n') {
      return std::stoll(body.substr(at + line.size(), body.find('\n', at) - at - line.size()));
    }
  }
  return -1;
}

bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

absl::StatusOr<TestCertificates> MakeGrpcTlsCertificates() {
  absl::StatusOr<TestCertificates> certificates = TestCertificates::Make();
  if (!certificates.ok()) return certificates;
  for (absl::Status made : {
           certificates->AddCertificate("server2", "ca", "localhost-2",
                                        "subjectAltName=DNS:localhost\n"),
           certificates->AddCertificate("other_client", "other_ca", "other-client",
                                        "extendedKeyUsage=clientAuth\n"),
           certificates->AddCertificate("san_client", "ca", "envoy",
                                        "extendedKeyUsage=clientAuth\nsubjectAltName=DNS:envoy."
                                        "tollgate.test,URI:spiffe://tollgate.test/envoy\n"),
       }) {
    if (!made.ok()) return made;
  }
  return certificates;
}

std::vector<std::string> GrpcTlsFlags(const std::string& cert, const std::string& key,
                                      const std::string& client_ca) {
  std::vector<std::string> flags = {"--grpc-tls-cert", cert, "--grpc-tls-key", key};
  if (!client_ca.empty()) {
    flags.push_back("--grpc-tls-client-ca");
    flags.push_back(client_ca);
  }
  return flags;
}

}  // namespace tollgate::testing
