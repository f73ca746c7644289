// Copyright tollgate authors. A gRPC client made of libnghttp2's client session and a blocking
// socket, driven from the test's thread, for what a gRPC library never does: grant no
// flow-control window (so the server may send no DATA), split messages across DATA frames,
// keep a stream open without reading it.
//
//   RawH2Client client(port, /*window=*/0);
//   const int32_t id = client.Open("/pkg.Service/Method");
//   client.Send(id, message);                       // the message, length-prefixed
//   client.PumpUntil([&] { return client.stream(id).closed; }, std::chrono::seconds(10));
//
// Not thread-safe: one thread drives it.
#ifndef TOLLGATE_TESTS_SUPPORT_RAW_H2_CLIENT_H_
#define TOLLGATE_TESTS_SUPPORT_RAW_H2_CLIENT_H_

#include <nghttp2/nghttp2.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"

namespace tollgate::testing {

class RawH2Client {
 public:
  // Connects to 127.0.0.1:`port` and announces `window` as the streams' initial flow-control
  // window (0: the server may send no DATA). Each DATA frame it sends carries at most
  // `frame_bytes` bytes.
  RawH2Client(int port, uint32_t window, size_t frame_bytes = 16384);
  ~RawH2Client();
  RawH2Client(const RawH2Client&) = delete;
  RawH2Client& operator=(const RawH2Client&) = delete;

  // Opens a call to `path` (gRPC's headers, no message yet); returns its stream id.
  int32_t Open(const std::string& path);
  // Queues `message`, length-prefixed, on stream `id`; `end`: then END_STREAM.
  void Send(int32_t id, const std::string& message, bool end = false);
  // Ends the client's side of stream `id`.
  void End(int32_t id);
  // Open, Send of each message, then End when `end`; pumps 50 ms. Returns the stream id.
  int32_t Call(const std::string& path, const std::vector<std::string>& messages, bool end);

  // Sends what the session has and reads what comes, for `duration`.
  void Pump(std::chrono::milliseconds duration);
  // Pumps until `done` holds (true) or `limit` passes (false).
  bool PumpUntil(const std::function<bool()>& done, std::chrono::milliseconds limit);

  struct Stream {
    std::map<std::string, std::string> headers;  // response headers and trailers
    std::string data;                            // DATA received (prefixes included)
    bool closed = false;
    uint32_t reset_code = 0;  // of RST_STREAM (NGHTTP2_NO_ERROR when closed without)
    // Outgoing: queued bytes, how many were sent, and whether END_STREAM follows them.
    std::string out;
    size_t sent = 0;
    bool end = false;
  };
  Stream& stream(int32_t id) { return streams_[id]; }
  // Whether the connection is still up (no read or write error, no GOAWAY received).
  bool connected() const { return connected_; }

 private:
  static ssize_t ReadBody(nghttp2_session* session, int32_t id, uint8_t* buffer, size_t length,
                          uint32_t* flags, nghttp2_data_source* source, void* self);

  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  nghttp2_session* session_ = nullptr;
  const size_t frame_bytes_;
  std::map<int32_t, Stream> streams_;
  bool connected_ = true;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_RAW_H2_CLIENT_H_
