// Copyright tollgate authors. Fuzz target: a ShouldRateLimit request read in place
// (src/server/rls_request.h) against protobuf's own parser of RateLimitRequest. Checked: both
// accept exactly the same inputs, and read the same values from those they accept.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "google/protobuf/stubs/logging.h"
#include "src/server/rls_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tollgate::server;
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);  // it logs every invalid UTF-8 string
    return true;
  }();
  (void)quiet;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  RateLimitRequestView read;
  const bool read_ok = ReadRateLimitRequest(bytes, &read);
  envoy::service::ratelimit::v3::RateLimitRequest parsed;
  const bool parsed_ok = parsed.ParseFromArray(data, static_cast<int>(size));
  if (read_ok != parsed_ok) std::abort();
  if (read_ok && !(read == RateLimitRequestView::Of(parsed))) std::abort();
  return 0;
}
