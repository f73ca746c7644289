// Copyright tollgate authors. RESP values, and the hiredis codec behind them.
//
// Replies are parsed by hiredis' reader (`ReplyReader`: a redisReader whose reply-object
// functions build RedisReply values directly). Commands are encoded by `CommandWriter`,
// which writes the same bytes as hiredis' redisFormatCommandArgv (resp_test.cc compares
// them) into a caller's buffer without a format string per length (bench/callgrind_check.sh
// measures a check, this encoding included).
// All I/O is ours (src/store/redis/connection.h).
#ifndef TOLLGATE_SRC_STORE_REDIS_RESP_H_
#define TOLLGATE_SRC_STORE_REDIS_RESP_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tollgate::redis {

// One reply, built by hiredis' reader (see ReplyReader).
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

// Writes one command in RESP (`*N\r\n$len\r\narg\r\n...`) argument by argument, straight
// into the string it returns: numbers are written without printf and no argument is copied
// anywhere else first. Arguments are binary-safe.
//
//   CommandWriter writer(3, /*expected_bytes=*/64);
//   writer.Add("GET");  ...
//   std::string command = std::move(writer).Finish();
// The header of a RESP array (`type` '*') or bulk string ('$') of `length`: the type, the
// decimal length and CRLF, written at `at`; returns the end. REQUIRES: kMaxRespHeader bytes
// of room at `at`.
inline constexpr size_t kMaxRespHeader = 24;
char* PutRespHeader(char* at, char type, size_t length);

class CommandWriter {
 public:
  // `argc` arguments will follow (REQUIRES: exactly that many Add* calls). `expected_bytes`
  // is reserved up front (a good guess saves reallocations; any value is correct).
  CommandWriter(size_t argc, size_t expected_bytes);
  CommandWriter(const CommandWriter&) = delete;
  CommandWriter& operator=(const CommandWriter&) = delete;

  void Add(std::string_view arg);
  void AddInteger(int64_t value);
  // One argument made of `pieces` concatenated, without building it first.
  void AddConcatenation(std::initializer_list<std::string_view> pieces);

  std::string Finish() &&;

 private:
  // Makes room for `bytes` more at the cursor.
  void Reserve(size_t bytes) {
    if (static_cast<size_t>(end_ - cursor_) < bytes) Grow(bytes);
  }
  void Grow(size_t bytes);
  // PutRespHeader at the cursor. REQUIRES: kMaxRespHeader bytes reserved.
  void WriteHeader(char type, size_t length);

  static constexpr size_t kMaxHeader = kMaxRespHeader;
  // Sized ahead of the cursor; Finish() trims it to what was written.
  std::string out_;
  char* cursor_ = nullptr;
  char* end_ = nullptr;
  size_t remaining_;
};

// The RESP encoding of one command (CommandWriter in one call).
std::string FormatCommand(absl::Span<const std::string> args);
std::string FormatCommand(std::initializer_list<std::string_view> args);

// Incremental parser of a reply stream: hiredis' redisReader with reply-object functions
// that write each value straight into a RedisReply (array elements in place), so a reply
// costs one allocation per array and none per integer. Not thread-safe.
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
