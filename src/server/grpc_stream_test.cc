// Copyright tollgate authors. Streaming calls on GrpcServer (src/server/grpc_stream.h), from
// raw HTTP/2 (tests/support/raw_h2_client.h), so that the client can do what a gRPC library
// never does (never grant a flow-control window, split a message across frames).
#include "src/server/grpc_stream.h"

#include <nghttp2/nghttp2.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "src/server/event_loops.h"
#include "src/server/grpc_server.h"
#include "src/server/grpc_wire.h"
#include "tests/support/raw_h2_client.h"

namespace tollgate::server {
namespace {

constexpr char kEchoPath[] = "/test.Echo/Stream";
constexpr char kFloodPath[] = "/test.Flood/Stream";

// Echoes every message; on half-close, finishes OK.
class Echo final : public GrpcStreamHandler {
 public:
  explicit Echo(std::shared_ptr<GrpcStreamWriter> writer) : writer_(std::move(writer)) {}
  void OnMessage(std::string_view message) override { writer_->Write(std::string(message)); }
  void OnHalfClose() override { writer_->Finish(absl::OkStatus()); }
  void OnClose() override {}

 private:
  std::shared_ptr<GrpcStreamWriter> writer_;
};

// Answers each message with 64 messages of 4 KiB.
class Flood final : public GrpcStreamHandler {
 public:
  explicit Flood(std::shared_ptr<GrpcStreamWriter> writer) : writer_(std::move(writer)) {}
  void OnMessage(std::string_view) override {
    for (int i = 0; i < 64; ++i) writer_->Write(std::string(4096, 'x'));
  }
  void OnHalfClose() override {}
  void OnClose() override {}

 private:
  std::shared_ptr<GrpcStreamWriter> writer_;
};

using RawClient = tollgate::testing::RawH2Client;

class GrpcStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EventLoops>> loops = EventLoops::Start(1);
    ASSERT_TRUE(loops.ok());
    loops_ = *std::move(loops);
    GrpcMethods methods;
    methods.AddStreaming(kEchoPath, [](std::shared_ptr<GrpcStreamWriter> writer) {
      return std::make_unique<Echo>(std::move(writer));
    });
    methods.AddStreaming(kFloodPath, [](std::shared_ptr<GrpcStreamWriter> writer) {
      return std::make_unique<Flood>(std::move(writer));
    });
    GrpcServerOptions options;
    options.address = {"127.0.0.1", 0};
    options.max_stream_queued_bytes = 64 * 1024;
    absl::StatusOr<std::unique_ptr<GrpcServer>> server =
        GrpcServer::Start(*loops_, options, std::move(methods));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<EventLoops> loops_;
  std::unique_ptr<GrpcServer> server_;
};

TEST_F(GrpcStreamTest, MessagesSplitAcrossFramesAreEchoedThenTheCallEndsOk) {
  RawClient client(server_->port(), 65535, /*frame_bytes=*/7);
  const int32_t id = client.Call(kEchoPath, {"hello", std::string(300, 'y')}, /*end=*/true);
  client.Pump(std::chrono::milliseconds(300));
  RawClient::Stream& stream = client.stream(id);
  EXPECT_TRUE(stream.closed);
  EXPECT_EQ(stream.headers[":status"], "200");
  EXPECT_EQ(stream.headers["grpc-status"], "0");
  EXPECT_EQ(stream.data,
            GrpcMessagePrefix(5) + "hello" + GrpcMessagePrefix(300) + std::string(300, 'y'));
}

TEST_F(GrpcStreamTest, AClientThatGrantsNoWindowHasItsStreamResetAndOthersGoOn) {
  RawClient stuck(server_->port(), 0, /*frame_bytes=*/7);
  const int32_t stuck_id = stuck.Call(kFloodPath, {"go", "go"}, /*end=*/false);
  stuck.Pump(std::chrono::milliseconds(500));
  // 2 x 64 x 4 KiB queued against a 64 KiB bound: the stream is reset, the connection stays.
  EXPECT_TRUE(stuck.stream(stuck_id).closed);
  EXPECT_EQ(stuck.stream(stuck_id).reset_code, NGHTTP2_ENHANCE_YOUR_CALM);
  EXPECT_EQ(stuck.stream(stuck_id).data, "");
  // The connection still serves: a new call's headers come (its DATA would need a window).
  const int32_t echo_id = stuck.Call(kEchoPath, {}, /*end=*/false);
  stuck.Pump(std::chrono::milliseconds(300));
  EXPECT_EQ(stuck.stream(echo_id).headers[":status"], "200");
  EXPECT_FALSE(stuck.stream(echo_id).closed);

  RawClient other(server_->port(), 65535, /*frame_bytes=*/7);
  const int32_t id = other.Call(kEchoPath, {"still here"}, /*end=*/true);
  other.Pump(std::chrono::milliseconds(300));
  EXPECT_EQ(other.stream(id).data, GrpcMessagePrefix(10) + "still here");
}

TEST_F(GrpcStreamTest, AMessageOverTheSizeLimitEndsTheCallWithResourceExhausted) {
  RawClient client(server_->port(), 65535, /*frame_bytes=*/7);
  const int32_t id = client.Call(kEchoPath, {std::string(70 * 1024, 'z')}, /*end=*/false);
  client.Pump(std::chrono::milliseconds(300));
  EXPECT_EQ(client.stream(id).headers["grpc-status"], "8");
  EXPECT_TRUE(client.stream(id).closed);  // reset with NO_ERROR: the client had not ended
  EXPECT_EQ(client.stream(id).data, "");
}

}  // namespace
}  // namespace tollgate::server
