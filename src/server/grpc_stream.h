// Copyright tollgate authors. Bidirectional streaming calls on a GrpcServer
// (src/server/grpc_server.h): the client sends messages when it likes, the server sends
// messages when it decides, until one side ends the call.
//
//   methods.AddStreaming("/pkg.Service/Stream",
//       [](std::shared_ptr<GrpcStreamWriter> writer) -> std::unique_ptr<GrpcStreamHandler> {
//         return std::make_unique<MyHandler>(std::move(writer));
//       });
//
// What the server does for every streaming call (src/server/h2_streaming.cc):
// - Response headers (:status 200, application/grpc) go out when the call starts; each
//   Write is one length-prefixed message, sent as the client's flow-control window allows.
// - Finish sends the trailers (grpc-status, grpc-message). A call the client has not ended
//   is then reset with NO_ERROR, so the stream does not stay open waiting for it.
// - A message larger than GrpcServerOptions::max_message_bytes ends the call with
//   RESOURCE_EXHAUSTED; a compressed one UNIMPLEMENTED; a bad flag byte INTERNAL.
// - Writes waiting for the client beyond GrpcServerOptions::max_stream_queued_bytes (a client
//   that stops reading) reset the stream (ENHANCE_YOUR_CALM): its memory stays bounded, and
//   the connection's other streams go on.
// - More than GrpcServerOptions::max_streaming_calls_per_connection calls open at once on one
//   connection: the new one is answered RESOURCE_EXHAUSTED.
// - grpc-timeout passed: DEADLINE_EXCEEDED. GOAWAY (the server shutting down): every open
//   call is finished with UNAVAILABLE, so clients reconnect elsewhere.
#ifndef TOLLGATE_SRC_SERVER_GRPC_STREAM_H_
#define TOLLGATE_SRC_SERVER_GRPC_STREAM_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"

namespace tollgate::server {

// The server's side of one streaming call. Thread-safe: every method may be called from any
// thread (the work is posted to the connection's loop). Outlives its call harmlessly: once the
// call is over, Write returns false and Finish does nothing.
class GrpcStreamWriter {
 public:
  GrpcStreamWriter() = default;
  GrpcStreamWriter(const GrpcStreamWriter&) = delete;
  GrpcStreamWriter& operator=(const GrpcStreamWriter&) = delete;
  virtual ~GrpcStreamWriter() = default;

  // Queues `message` (serialized bytes) to be sent. False when the call is known to be over
  // (finished, reset, its connection closed); the message is then dropped.
  virtual bool Write(std::string message) = 0;
  // Ends the call with `status` (OK included) after the messages already written. Once; a
  // second call, or one after the call is over, does nothing.
  virtual void Finish(const absl::Status& status) = 0;
  // False once Finish was called or the call is known to be over.
  virtual bool open() const = 0;
};

// What the server calls for one streaming call, always on the connection's loop thread and
// never concurrently. It must not block.
class GrpcStreamHandler {
 public:
  GrpcStreamHandler() = default;
  GrpcStreamHandler(const GrpcStreamHandler&) = delete;
  GrpcStreamHandler& operator=(const GrpcStreamHandler&) = delete;
  virtual ~GrpcStreamHandler() = default;

  // One message from the client; `message` is valid only during the call. Not called once
  // the call was finished.
  virtual void OnMessage(std::string_view message) = 0;
  // The client has sent its last message.
  virtual void OnHalfClose() = 0;
  // The call is over, whatever ended it (Finish, a reset, the connection closing, the server
  // shutting down); called exactly once, last. The handler is destroyed after it.
  virtual void OnClose() = 0;
};

// Makes the handler of a new call. Runs on the connection's loop thread, possibly on several
// threads at once: it must be thread-safe. nullptr answers the call INTERNAL.
using GrpcStreamFactory = absl::AnyInvocable<std::unique_ptr<GrpcStreamHandler>(
    std::shared_ptr<GrpcStreamWriter> writer) const>;

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_GRPC_STREAM_H_
