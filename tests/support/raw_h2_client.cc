// Copyright tollgate authors.
#include "tests/support/raw_h2_client.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "boost/asio/write.hpp"
#include "src/server/grpc_wire.h"

namespace tollgate::testing {

namespace net = boost::asio;

RawH2Client::RawH2Client(int port, uint32_t window, size_t frame_bytes)
    : socket_(io_), frame_bytes_(std::max<size_t>(1, frame_bytes)) {
  socket_.connect({net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
  nghttp2_session_callbacks* callbacks;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
      callbacks,
      +[](nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t length, void* self) {
        static_cast<RawH2Client*>(self)->streams_[id].data.append(
            reinterpret_cast<const char*>(data), length);
        return 0;
      });
  nghttp2_session_callbacks_set_on_header_callback(
      callbacks,
      +[](nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t name_length,
          const uint8_t* value, size_t value_length, uint8_t, void* self) {
        static_cast<RawH2Client*>(self)
            ->streams_[frame->hd.stream_id]
            .headers[std::string(reinterpret_cast<const char*>(name), name_length)] =
            std::string(reinterpret_cast<const char*>(value), value_length);
        return 0;
      });
  nghttp2_session_callbacks_set_on_stream_close_callback(
      callbacks, +[](nghttp2_session*, int32_t id, uint32_t error_code, void* self) {
        Stream& stream = static_cast<RawH2Client*>(self)->streams_[id];
        stream.closed = true;
        stream.reset_code = error_code;
        return 0;
      });
  nghttp2_session_callbacks_set_on_frame_recv_callback(
      callbacks, +[](nghttp2_session*, const nghttp2_frame* frame, void* self) {
        if (frame->hd.type == NGHTTP2_GOAWAY) static_cast<RawH2Client*>(self)->connected_ = false;
        return 0;
      });
  nghttp2_session_client_new(&session_, callbacks, this);
  nghttp2_session_callbacks_del(callbacks);
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window}};
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 1);
}

RawH2Client::~RawH2Client() { nghttp2_session_del(session_); }

ssize_t RawH2Client::ReadBody(nghttp2_session*, int32_t id, uint8_t* buffer, size_t length,
                              uint32_t* flags, nghttp2_data_source*, void* user_data) {
  auto* self = static_cast<RawH2Client*>(user_data);
  Stream& stream = self->streams_[id];
  const size_t n = std::min({length, stream.out.size() - stream.sent, self->frame_bytes_});
  if (n == 0 && !stream.end) return NGHTTP2_ERR_DEFERRED;
  const char* from = stream.out.data() + stream.sent;
  std::memcpy(buffer, from, n);
  stream.sent += n;
  if (stream.sent == stream.out.size()) {
    stream.out.clear();
    stream.sent = 0;
    if (stream.end) *flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  return static_cast<ssize_t>(n);
}

int32_t RawH2Client::Open(const std::string& path) {
  const std::pair<std::string, std::string> fields[] = {{":method", "POST"},
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
  nghttp2_data_provider provider;
  provider.source.ptr = nullptr;
  provider.read_callback = &RawH2Client::ReadBody;
  const int32_t id =
      nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(), &provider, nullptr);
  streams_[id];
  return id;
}

void RawH2Client::Send(int32_t id, const std::string& message, bool end) {
  Stream& stream = streams_[id];
  stream.out += server::GrpcMessagePrefix(static_cast<uint32_t>(message.size())) + message;
  stream.end = stream.end || end;
  nghttp2_session_resume_data(session_, id);
}

void RawH2Client::End(int32_t id) {
  streams_[id].end = true;
  nghttp2_session_resume_data(session_, id);
}

int32_t RawH2Client::Call(const std::string& path, const std::vector<std::string>& messages,
                          bool end) {
  const int32_t id = Open(path);
  for (const std::string& message : messages) Send(id, message);
  if (end) End(id);
  Pump(std::chrono::milliseconds(50));
  return id;
}

void RawH2Client::Pump(std::chrono::milliseconds duration) {
  PumpUntil([] { return false; }, duration);
}

bool RawH2Client::PumpUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until || !connected_) return done();
    const uint8_t* data;
    ssize_t n;
    boost::system::error_code error;
    while ((n = nghttp2_session_mem_send(session_, &data)) > 0) {
      socket_.non_blocking(false);
      net::write(socket_, net::buffer(data, static_cast<size_t>(n)), error);
      if (error) {
        connected_ = false;
        return done();
      }
    }
    socket_.non_blocking(true);
    char buffer[16384];
    const size_t read = socket_.read_some(net::buffer(buffer), error);
    if (!error && read > 0) {
      nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(buffer), read);
    } else if (error && error != net::error::would_block) {
      connected_ = false;
      return done();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return true;
}

}  // namespace tollgate::testing
