// Copyright tollgate authors. RESP values, and the hiredis codec behind them.
//
// hiredis is used only as a codec: `FormatCommand` (redisFormatCommandArgv) and
// `ReplyReader` (redisReader). All I/O is ours (src/store/redis/connection.h).
#ifndef TOLLGATE_SRC_STORE_REDIS_RESP_H_
#define TOLLGATE_SRC_STORE_REDIS_RESP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tollgate::redis {

// One reply, copied out of hiredis' structures.
struct RedisReply {
  enum class Type { kString, kArray, kInteger, kNil, kStatus, kError };
  Type type = Type::kNil;
  // kString, kStatus, kError.
  std::string str;
  // kInteger.
  int64_t integer = 0;
  // kArray.
  std::vector<RedisReply> elements;

  bool is_error() const { return type == Type::kError; }
};

// A short human-readable rendering, for error messages and tests.
std::string DebugString(const RedisReply& reply);

// The RESP encoding of one command (`*N\r\n$len\r\narg\r\n...`). Arguments are binary-safe.
std::string FormatCommand(absl::Span<const std::string> args);

// Incremental parser of a reply stream. Not thread-safe.
class ReplyReader {
 public:
  ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;
  ~ReplyReader();

  void Feed(std::string_view bytes);
  // The next complete reply, nullopt if more bytes are needed, or an error status when the
  // stream is not valid RESP (the connection must then be dropped).
  absl::StatusOr<std::optional<RedisReply>> Next();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_RESP_H_
