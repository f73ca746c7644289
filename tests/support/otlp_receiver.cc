// Copyright tollgate authors.
#include "tests/support/otlp_receiver.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace tollgate::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;
using opentelemetry::proto::collector::trace::v1::ExportTraceServiceResponse;
using KeyValues = google::protobuf::RepeatedPtrField<opentelemetry::proto::common::v1::KeyValue>;

std::string AttributeText(const KeyValues& attributes, std::string_view key) {
  for (const auto& attribute : attributes) {
    if (attribute.key() != key) continue;
    if (attribute.value().has_int_value()) return std::to_string(attribute.value().int_value());
    if (attribute.value().has_bool_value())
      return attribute.value().bool_value() ? "true" : "false";
    return attribute.value().string_value();
  }
  return "";
}

std::vector<std::string> AttributeStrings(const KeyValues& attributes, std::string_view key) {
  std::vector<std::string> values;
  for (const auto& attribute : attributes) {
    if (attribute.key() != key) continue;
    for (const auto& value : attribute.value().array_value().values()) {
      values.push_back(value.string_value());
    }
  }
  return values;
}

struct OtlpReceiver::Server {
  net::io_context io;
  tcp::acceptor acceptor{io};

  mutable absl::Mutex mu;
  Mode mode ABSL_GUARDED_BY(mu) = Mode::kAnswer;
  std::vector<ReceivedSpan> spans ABSL_GUARDED_BY(mu);
  int requests ABSL_GUARDED_BY(mu) = 0;
  int bad_requests ABSL_GUARDED_BY(mu) = 0;

  struct Session : std::enable_shared_from_this<Session> {
    Server& server;
    tcp::socket socket;
    beast::flat_buffer buffer;
    std::optional<http::request_parser<http::string_body>> parser;
    http::response<http::string_body> response;

    Session(Server& owner, tcp::socket accepted) : server(owner), socket(std::move(accepted)) {}

    void Read() {
      parser.emplace();
      parser->body_limit(64 * 1024 * 1024);
      http::async_read(socket, buffer, *parser,
                       [self = shared_from_this()](beast::error_code error, size_t) {
                         if (!error) self->Handle();
                       });
    }

    void Handle() {
      const http::request<http::string_body>& request = parser->get();
      ExportTraceServiceRequest exported;
      http::status status = http::status::ok;
      if (request.method() != http::verb::post || request.target() != "/v1/traces") {
        status = http::status::not_found;
      } else if (request[http::field::content_type] != "application/x-protobuf" ||
                 !exported.ParseFromString(request.body())) {
        status = http::status::bad_request;
      }
      {
        absl::MutexLock lock(&server.mu);
        ++server.requests;
        if (status != http::status::ok) {
          ++server.bad_requests;
        } else if (server.mode == Mode::kBlackHole) {
          server.held.push_back(shared_from_this());  // never answered
          return;
        } else {
          for (const auto& resource_spans : exported.resource_spans()) {
            for (const auto& scope_spans : resource_spans.scope_spans()) {
              for (const auto& span : scope_spans.spans()) {
                server.spans.push_back({span, resource_spans.resource(), scope_spans.scope()});
              }
            }
          }
        }
      }
      response = {};
      response.result(status);
      response.version(request.version());
      response.keep_alive(request.keep_alive());
      response.set(http::field::content_type, "application/x-protobuf");
      response.body() = ExportTraceServiceResponse().SerializeAsString();
      response.prepare_payload();
      http::async_write(socket, response,
                        [self = shared_from_this()](beast::error_code error, size_t) {
                          if (!error && self->response.keep_alive()) self->Read();
                        });
    }
  };
  // Held by kBlackHole, closed when the mode goes back to kAnswer.
  std::vector<std::shared_ptr<Session>> held ABSL_GUARDED_BY(mu);

  void Accept() {
    acceptor.async_accept([this](beast::error_code error, tcp::socket socket) {
      if (error) return;  // closed
      std::make_shared<Session>(*this, std::move(socket))->Read();
      Accept();
    });
  }
};

std::unique_ptr<OtlpReceiver> OtlpReceiver::Start(int port) {
  auto server = std::make_unique<Server>();
  beast::error_code error;
  const tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port));
  server->acceptor.open(endpoint.protocol(), error);
  if (!error) server->acceptor.set_option(net::socket_base::reuse_address(true), error);
  if (!error) server->acceptor.bind(endpoint, error);
  if (!error) server->acceptor.listen(net::socket_base::max_listen_connections, error);
  if (error) {
    ADD_FAILURE() << "OTLP receiver cannot listen on port " << port << ": " << error.message();
    return nullptr;
  }
  auto receiver = std::unique_ptr<OtlpReceiver>(new OtlpReceiver(std::move(server)));
  return receiver;
}

OtlpReceiver::OtlpReceiver(std::unique_ptr<Server> server) : server_(std::move(server)) {
  port_ = server_->acceptor.local_endpoint().port();
  server_->Accept();
  thread_ = std::thread([this] { server_->io.run(); });
}

OtlpReceiver::~OtlpReceiver() {
  server_->io.stop();
  thread_.join();
  beast::error_code ignored;
  server_->acceptor.close(ignored);
  {
    absl::MutexLock lock(&server_->mu);
    server_->held.clear();
  }
  // Destroying the io_context destroys the handlers still pending, and the sessions with them.
  server_.reset();
}

std::string OtlpReceiver::endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }

void OtlpReceiver::set_mode(Mode mode) {
  std::vector<std::shared_ptr<Server::Session>> held;
  {
    absl::MutexLock lock(&server_->mu);
    server_->mode = mode;
    if (mode == Mode::kAnswer) held.swap(server_->held);
  }
  // Sessions are closed on the receiver's thread, where their operations run.
  net::post(server_->io, [held = std::move(held)] {
    for (const auto& session : held) {
      beast::error_code ignored;
      session->socket.close(ignored);
    }
  });
}

std::vector<ReceivedSpan> OtlpReceiver::spans() const {
  absl::MutexLock lock(&server_->mu);
  return server_->spans;
}

std::vector<ReceivedSpan> OtlpReceiver::WaitForSpans(size_t count,
                                                     std::chrono::milliseconds timeout) const {
  absl::MutexLock lock(&server_->mu);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(server_->mu) {
    return server_->spans.size() >= count;
  };
  server_->mu.AwaitWithTimeout(absl::Condition(&enough), absl::FromChrono(timeout));
  return server_->spans;
}

int OtlpReceiver::requests() const {
  absl::MutexLock lock(&server_->mu);
  return server_->requests;
}

int OtlpReceiver::bad_requests() const {
  absl::MutexLock lock(&server_->mu);
  return server_->bad_requests;
}

bool OtlpReceiver::WaitForRequests(int count, std::chrono::milliseconds timeout) const {
  absl::MutexLock lock(&server_->mu);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(server_->mu) {
    return server_->requests >= count;
  };
  return server_->mu.AwaitWithTimeout(absl::Condition(&enough), absl::FromChrono(timeout));
}

}  // namespace tollgate::testing
