// Copyright tollgate authors. Fuzz target: gRPC's wire format (src/server/grpc_wire.h). The
// input's first byte picks the message limit (2^(b % 24) bytes); the rest is read as
//   - a request body (length-prefixed messages),
//   - a grpc-timeout value,
//   - a grpc-message (percent-encoded and decoded back),
//   - request headers, one "name: value" per line.
// Checked: a message read is exactly its announced length and within the limit; a timeout
// is never negative; encoding gives printable ASCII and decodes back to the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "src/server/grpc_wire.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tollgate::server;
  if (size == 0) return 0;
  const uint32_t limit = uint32_t{1} << (data[0] % 24);
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);

  const GrpcUnaryBody body = ParseGrpcUnaryBody(input, limit);
  if (body.result == GrpcUnaryBody::Result::kMessage) {
    Check(body.message.size() == body.announced_length);
    Check(body.announced_length <= limit);
    Check(body.message.size() + kGrpcMessagePrefixBytes == input.size());
  }
  if (body.result == GrpcUnaryBody::Result::kTooLarge) Check(body.announced_length > limit);

  if (auto timeout = ParseGrpcTimeout(input)) Check(timeout->count() >= 0);

  const std::string encoded = PercentEncodeGrpcMessage(input);
  for (char c : encoded) Check(c >= 0x20 && c <= 0x7e);
  Check(PercentDecodeGrpcMessage(encoded) == input);
  (void)PercentDecodeGrpcMessage(input);

  GrpcRequestHeaders headers;
  size_t start = 0;
  while (start <= input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view line = input.substr(start, end - start);
    const size_t colon = line.find(": ");
    if (colon != std::string_view::npos) headers.Add(line.substr(0, colon), line.substr(colon + 2));
    start = end + 1;
  }
  const GrpcRequestCheck check = CheckGrpcRequestHeaders(headers);
  if (check.result == GrpcRequestCheck::Result::kOk) {
    Check(headers.method == "POST");
    Check(check.timeout.has_value() == headers.has_grpc_timeout);
  }
  return 0;
}
