// Copyright tollgate authors. Streaming calls on GrpcServer (src/server/grpc_stream.h), from
// raw HTTP/2: a client of libnghttp2's own in this test, so that it can do what a gRPC library
// never does (never grant a flow-control window, split a message across frames).
#include "src/server/grpc_stream.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/read.hpp"
#include "boost/asio/write.hpp"
#include "gtest/gtest.h"
#include "src/server/event_loops.h"
#include "src/server/grpc_server.h"
#include "src/server/grpc_wire.h"

namespace tollgate::server {
namespace {

namespace net = boost::asio;

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

// One HTTP/2 client connection, driven synchronously from the test's thread.
class RawClient {
 public:
  // `window`: the stream flow-control window it grants (0: the server may send no DATA).
  RawClient(int port, uint32_t window) : socket_(io_) {
    socket_.connect({net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
    nghttp2_session_callbacks* callbacks;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        callbacks,
        +[](nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t length, void* self) {
          static_cast<RawClient*>(self)->streams_[id].data.append(
              reinterpret_cast<const char*>(data), length);
          return 0;
        });
    nghttp2_session_callbacks_set_on_header_callback(
        callbacks,
        +[](nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t name_length,
            const uint8_t* value, size_t value_length, uint8_t, void* self) {
          static_cast<RawClient*>(self)
              ->streams_[frame->hd.stream_id]
              .headers[std::string(reinterpret_cast<const char*>(name), name_length)] =
              std::string(reinterpret_cast<const char*>(value), value_length);
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        callbacks, +[](nghttp2_session*, int32_t id, uint32_t error_code, void* self) {
          auto& stream = static_cast<RawClient*>(self)->streams_[id];
          stream.closed = true;
          stream.reset_code = error_code;
          return 0;
        });
    nghttp2_session_client_new(&session_, callbacks, this);
    nghttp2_session_callbacks_del(callbacks);
    const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window}};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 1);
  }
  ~RawClient() { nghttp2_session_del(session_); }

  // Opens a call to `path` and sends `messages` (each length-prefixed) in one DATA frame each
  // (split in two frames when `split`), then END_STREAM when `end`.
  int32_t Call(const std::string& path, const std::vector<std::string>& messages, bool end) {
    const std::vector<std::pair<std::string, std::string>> fields = {
        {":method", "POST"},
        {":scheme", "http"},
        {":authority", "localhost"},
        {":path", path},
        {"content-type", "application/grpc"},
        {"te", "trailers"}};
    std::vector<nghttp2_nv> nv;
    for (const auto& [name, value] : fields) {
      nv.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE});
    }
    body_.clear();
    for (const std::string& message : messages) {
      body_ += GrpcMessagePrefix(static_cast<uint32_t>(message.size())) + message;
    }
    offset_ = 0;
    end_ = end;
    nghttp2_data_provider provider;
    provider.source.ptr = this;
    provider.read_callback = +[](nghttp2_session*, int32_t, uint8_t* buffer, size_t length,
                                 uint32_t* flags, nghttp2_data_source* source, void*) -> ssize_t {
      auto* self = static_cast<RawClient*>(source->ptr);
      // At most 7 bytes a frame: messages arrive split across DATA frames.
      const size_t n = std::min({length, self->body_.size() - self->offset_, size_t{7}});
      const char* from = self->body_.data() + self->offset_;
      std::memcpy(buffer, from, n);
      self->offset_ += n;
      if (self->offset_ == self->body_.size()) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (!self->end_) *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
      return static_cast<ssize_t>(n);
    };
    const int32_t id =
        nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(), &provider, nullptr);
    Pump(std::chrono::milliseconds(50));
    return id;
  }

  // Sends what nghttp2 has and reads what comes for `duration`.
  void Pump(std::chrono::milliseconds duration) {
    const auto until = std::chrono::steady_clock::now() + duration;
    while (std::chrono::steady_clock::now() < until) {
      const uint8_t* data;
      ssize_t n;
      while ((n = nghttp2_session_mem_send(session_, &data)) > 0) {
        net::write(socket_, net::buffer(data, static_cast<size_t>(n)));
      }
      socket_.non_blocking(true);
      boost::system::error_code error;
      char buffer[16384];
      const size_t read = socket_.read_some(net::buffer(buffer), error);
      if (!error && read > 0) {
        nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(buffer), read);
      } else if (error && error != net::error::would_block) {
        return;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }

  struct Stream {
    std::map<std::string, std::string> headers;  // response headers and trailers
    std::string data;
    bool closed = false;
    uint32_t reset_code = 0;
  };
  Stream& stream(int32_t id) { return streams_[id]; }

 private:
  net::io_context io_;
  net::ip::tcp::socket socket_;
  nghttp2_session* session_ = nullptr;
  std::map<int32_t, Stream> streams_;
  std::string body_;
  size_t offset_ = 0;
  bool end_ = true;
};

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
  RawClient client(server_->port(), 65535);
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
  RawClient stuck(server_->port(), 0);
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

  RawClient other(server_->port(), 65535);
  const int32_t id = other.Call(kEchoPath, {"still here"}, /*end=*/true);
  other.Pump(std::chrono::milliseconds(300));
  EXPECT_EQ(other.stream(id).data, GrpcMessagePrefix(10) + "still here");
}

TEST_F(GrpcStreamTest, AMessageOverTheSizeLimitEndsTheCallWithResourceExhausted) {
  RawClient client(server_->port(), 65535);
  const int32_t id = client.Call(kEchoPath, {std::string(70 * 1024, 'z')}, /*end=*/false);
  client.Pump(std::chrono::milliseconds(300));
  EXPECT_EQ(client.stream(id).headers["grpc-status"], "8");
  EXPECT_TRUE(client.stream(id).closed);  // reset with NO_ERROR: the client had not ended
  EXPECT_EQ(client.stream(id).data, "");
}

}  // namespace
}  // namespace tollgate::server
