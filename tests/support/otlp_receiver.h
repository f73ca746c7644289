// Copyright tollgate authors. A test OpenTelemetry collector: an HTTP/1.1 server on a
// loopback port (Boost.Beast, a thread of its own) taking OTLP/HTTP trace exports, POST
// /v1/traces with an ExportTraceServiceRequest (application/x-protobuf), and keeping the spans.
// It can also hold requests without answering (a black-holed collector); a closed port (a dead
// one) is a receiver destroyed, and a new one on the same port brings it back.
#ifndef TOLLGATE_TESTS_SUPPORT_OTLP_RECEIVER_H_
#define TOLLGATE_TESTS_SUPPORT_OTLP_RECEIVER_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "opentelemetry/proto/common/v1/common.pb.h"
#include "opentelemetry/proto/resource/v1/resource.pb.h"
#include "opentelemetry/proto/trace/v1/trace.pb.h"

namespace tollgate::testing {

// One span as received, with what its ResourceSpans and ScopeSpans said.
struct ReceivedSpan {
  opentelemetry::proto::trace::v1::Span span;
  opentelemetry::proto::resource::v1::Resource resource;
  opentelemetry::proto::common::v1::InstrumentationScope scope;
};

// The string (or int, as decimal text) value of attribute `key` in `attributes`; "" when absent.
std::string AttributeText(const google::protobuf::RepeatedPtrField<
                              opentelemetry::proto::common::v1::KeyValue>& attributes,
                          std::string_view key);
// The string values of array attribute `key`; empty when absent.
std::vector<std::string> AttributeStrings(
    const google::protobuf::RepeatedPtrField<opentelemetry::proto::common::v1::KeyValue>&
        attributes,
    std::string_view key);

// Thread-safe.
class OtlpReceiver {
 public:
  enum class Mode {
    // Answers 200 with an empty ExportTraceServiceResponse, and keeps the spans.
    kAnswer,
    // Reads each request and never answers (nor keeps its spans); the connection stays open.
    // Back to kAnswer, held connections are closed and new requests answered.
    kBlackHole,
  };

  // Listens on 127.0.0.1:`port` (0: a free port). nullptr, and a test failure, when it cannot.
  static std::unique_ptr<OtlpReceiver> Start(int port = 0);

  OtlpReceiver(const OtlpReceiver&) = delete;
  OtlpReceiver& operator=(const OtlpReceiver&) = delete;
  // Closes the port and every connection.
  ~OtlpReceiver();

  int port() const { return port_; }
  // "http://127.0.0.1:PORT": the endpoint to give an exporter.
  std::string endpoint() const;
  void set_mode(Mode mode);

  // Every span kept so far, in arrival order.
  std::vector<ReceivedSpan> spans() const;
  // Waits up to `timeout` until at least `count` spans are kept; returns them all.
  std::vector<ReceivedSpan> WaitForSpans(size_t count, std::chrono::milliseconds timeout) const;
  // Export requests read (answered or held), and those refused (not POST /v1/traces with
  // application/x-protobuf and a parsable body: answered 400 or 404).
  int requests() const;
  int bad_requests() const;
  // Waits up to `timeout` until at least `count` requests were read.
  bool WaitForRequests(int count, std::chrono::milliseconds timeout) const;

 private:
  struct Server;
  explicit OtlpReceiver(std::unique_ptr<Server> server);
  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_OTLP_RECEIVER_H_
