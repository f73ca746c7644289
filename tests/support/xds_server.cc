// Copyright tollgate authors.
#include "tests/support/xds_server.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/support/serve_process.h"

namespace tollgate::testing {

using ::envoy::service::discovery::v3::AggregatedDiscoveryService;
using ::envoy::service::discovery::v3::DiscoveryRequest;
using ::envoy::service::discovery::v3::DiscoveryResponse;

// Everything that outlives one listening server: snapshots, records, open streams' wake-ups.
// Streams wait on `changed` for a request, a new snapshot, a push or the stop.
class XdsTestServer::State {
 public:
  struct Snapshot {
    std::string version;
    std::map<std::string, std::vector<google::protobuf::Any>> resources;
  };
  struct Pushed {
    int64_t sequence = 0;
    DiscoveryResponse response;
  };

  // One stream, until it ends or the server stops.
  grpc::Status Serve(grpc::ServerContext* context,
                     grpc::ServerReaderWriter<DiscoveryResponse, DiscoveryRequest>* stream);

  mutable std::mutex mu;
  mutable std::condition_variable changed;
  bool stopping = false;
  int64_t generation = 0;  // bumped by every change a stream may have to answer
  std::map<std::string, Snapshot> snapshots;
  std::vector<Pushed> pushed;
  std::vector<XdsRecordedRequest> requests;
  std::vector<std::pair<std::string, std::string>> responses;
  int streams = 0;
  int64_t nonces = 0;
};

// The gRPC service of one listening server (a grpc::Service is registered with one server
// only), over the State that outlives it.
class XdsTestServer::Handler final : public AggregatedDiscoveryService::Service {
 public:
  explicit Handler(State& state) : state_(state) {}
  grpc::Status StreamAggregatedResources(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<DiscoveryResponse, DiscoveryRequest>* stream) override {
    return state_.Serve(context, stream);
  }

 private:
  State& state_;
};

grpc::Status XdsTestServer::State::Serve(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<DiscoveryResponse, DiscoveryRequest>* stream) {
  // Per type URL: the nonce of the last response sent, and the open watch's version.
  struct Watch {
    std::string last_nonce;
    bool open = false;
    std::string version;
  };
  std::map<std::string, Watch> watches;
  std::deque<DiscoveryRequest> inbox;
  bool reader_done = false;
  int id = 0;
  int64_t pushes_seen = 0;
  std::vector<std::pair<std::string, std::string>> metadata;
  for (const auto& [key, value] : context->client_metadata()) {
    metadata.emplace_back(std::string(key.data(), key.size()),
                          std::string(value.data(), value.size()));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    id = ++streams;
    pushes_seen = pushed.empty() ? 0 : pushed.back().sequence;
  }
  std::thread reader([&] {
    DiscoveryRequest request;
    while (stream->Read(&request)) {
      std::lock_guard<std::mutex> lock(mu);
      inbox.push_back(request);
      changed.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu);
    reader_done = true;
    changed.notify_all();
  });

  std::string node_id;
  int64_t seen = -1;
  bool stopped = false;
  while (true) {
    std::vector<DiscoveryResponse> out;
    {
      std::unique_lock<std::mutex> lock(mu);
      changed.wait(lock,
                   [&] { return stopping || !inbox.empty() || reader_done || generation != seen; });
      if (stopping) {
        stopped = true;
        break;
      }
      seen = generation;
      for (; !inbox.empty(); inbox.pop_front()) {
        const DiscoveryRequest& request = inbox.front();
        if (request.has_node()) node_id = request.node().id();
        XdsRecordedRequest record{id,
                                  node_id,
                                  request.type_url(),
                                  request.version_info(),
                                  request.response_nonce(),
                                  request.has_error_detail(),
                                  request.error_detail().code(),
                                  request.error_detail().message(),
                                  false,
                                  metadata};
        Watch& watch = watches[request.type_url()];
        if (!watch.last_nonce.empty() && request.response_nonce() != watch.last_nonce) {
          record.stale = true;  // as go-control-plane: wait for the request of the last nonce
        } else {
          watch.open = true;
          watch.version = request.version_info();
        }
        requests.push_back(std::move(record));
      }
      for (const Pushed& push : pushed) {
        if (push.sequence <= pushes_seen) continue;
        pushes_seen = push.sequence;
        out.push_back(push.response);
        out.back().set_nonce(absl::StrCat(++nonces));
        watches[push.response.type_url()].last_nonce = out.back().nonce();
      }
      auto snapshot = snapshots.find(node_id);
      for (auto& [type_url, watch] : watches) {
        if (!watch.open || snapshot == snapshots.end()) continue;
        auto resources = snapshot->second.resources.find(type_url);
        const std::string version =
            resources == snapshot->second.resources.end() ? "" : snapshot->second.version;
        if (version == watch.version) continue;  // nothing new: the watch stays open
        DiscoveryResponse& response = out.emplace_back();
        response.set_type_url(type_url);
        response.set_version_info(version);
        for (const auto& resource : resources->second) *response.add_resources() = resource;
        response.set_nonce(absl::StrCat(++nonces));
        watch.open = false;
        watch.last_nonce = response.nonce();
      }
      for (const DiscoveryResponse& response : out) {
        responses.emplace_back(response.nonce(), response.version_info());
      }
      if (out.empty() && reader_done && inbox.empty()) break;
      changed.notify_all();  // WaitForRequest
    }
    bool written = true;
    for (const DiscoveryResponse& response : out) written = written && stream->Write(response);
    if (!written) break;
  }
  context->TryCancel();
  reader.join();
  return stopped ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "xds test server stopping")
                 : grpc::Status::OK;
}

XdsTestServer::XdsTestServer(XdsServerOptions options)
    : options_(std::move(options)), port_(options_.port), state_(std::make_unique<State>()) {}

XdsTestServer::~XdsTestServer() { Stop(); }

absl::StatusOr<std::unique_ptr<XdsTestServer>> XdsTestServer::Start(XdsServerOptions options) {
  std::unique_ptr<XdsTestServer> server(new XdsTestServer(std::move(options)));
  if (absl::Status status = server->Listen(); !status.ok()) return status;
  return server;
}

std::string XdsTestServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

absl::Status XdsTestServer::Listen() {
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options_.cert_path.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        options_.client_ca_path.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!options_.client_ca_path.empty())
      ssl.pem_root_certs = ReadFileText(options_.client_ca_path);
    ssl.pem_key_cert_pairs.push_back(
        {ReadFileText(options_.key_path), ReadFileText(options_.cert_path)});
    credentials = grpc::SslServerCredentials(ssl);
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = false;
  }
  handler_ = std::make_unique<Handler>(*state_);
  grpc::ServerBuilder builder;
  int selected = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port_), credentials, &selected);
  builder.RegisterService(handler_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || selected == 0) {
    return absl::InternalError(absl::StrCat("xds test server: cannot listen on port ", port_));
  }
  port_ = selected;
  return absl::OkStatus();
}

void XdsTestServer::Stop() {
  if (server_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
    state_->changed.notify_all();
  }
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  server_.reset();
}

absl::Status XdsTestServer::Restart() {
  Stop();
  return Listen();
}

void XdsTestServer::SetSnapshot(
    const std::string& node_id, const std::string& version,
    const std::vector<ratelimit::config::ratelimit::v3::RateLimitConfig>& configs) {
  std::vector<google::protobuf::Any> resources;
  for (const auto& config : configs) resources.emplace_back().PackFrom(config);
  SetRawSnapshot(node_id, version, {{kRateLimitConfigType, std::move(resources)}});
}

void XdsTestServer::SetRawSnapshot(
    const std::string& node_id, const std::string& version,
    std::map<std::string, std::vector<google::protobuf::Any>> resources) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->snapshots[node_id] = {version, std::move(resources)};
  ++state_->generation;
  state_->changed.notify_all();
}

void XdsTestServer::Push(const std::string& type_url, const std::string& version,
                         std::vector<google::protobuf::Any> resources) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State::Pushed push;
  push.sequence = state_->pushed.empty() ? 1 : state_->pushed.back().sequence + 1;
  push.response.set_type_url(type_url);
  push.response.set_version_info(version);
  for (auto& resource : resources) *push.response.add_resources() = std::move(resource);
  state_->pushed.push_back(std::move(push));
  ++state_->generation;
  state_->changed.notify_all();
}

std::vector<XdsRecordedRequest> XdsTestServer::requests() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->requests;
}

std::vector<std::pair<std::string, std::string>> XdsTestServer::responses() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->responses;
}

std::optional<XdsRecordedRequest> XdsTestServer::WaitForRequest(
    const std::function<bool(const XdsRecordedRequest&)>& match,
    std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  std::optional<XdsRecordedRequest> found;
  state_->changed.wait_for(lock, timeout, [&] {
    for (const XdsRecordedRequest& request : state_->requests) {
      if (match(request)) {
        found = request;
        return true;
      }
    }
    return false;
  });
  return found;
}

ratelimit::config::ratelimit::v3::RateLimitConfig RateLimitConfigFromText(const std::string& text) {
  ratelimit::config::ratelimit::v3::RateLimitConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

}  // namespace tollgate::testing
