// Copyright tollgate authors.
#include "src/store/redis/resp.h"

#include <hiredis/hiredis.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tollgate::redis {
namespace {

RedisReply Convert(const redisReply& in) {
  RedisReply out;
  switch (in.type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(in.str, in.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(in.str, in.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(in.str, in.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = in.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(in.elements);
      for (size_t i = 0; i < in.elements; ++i) out.elements.push_back(Convert(*in.element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
      break;
  }
  return out;
}

}  // namespace

std::string DebugString(const RedisReply& reply) {
  switch (reply.type) {
    case RedisReply::Type::kString:
      return absl::StrCat("\"", reply.str, "\"");
    case RedisReply::Type::kStatus:
      return reply.str;
    case RedisReply::Type::kError:
      return absl::StrCat("(error) ", reply.str);
    case RedisReply::Type::kInteger:
      return absl::StrCat(reply.integer);
    case RedisReply::Type::kNil:
      return "(nil)";
    case RedisReply::Type::kArray:
      return absl::StrCat(
          "[",
          absl::StrJoin(reply.elements, ", ",
                        [](std::string* out, const RedisReply& r) { out->append(DebugString(r)); }),
          "]");
  }
  return "?";
}

std::string FormatCommand(absl::Span<const std::string> args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  argv.reserve(args.size());
  lengths.reserve(args.size());
  for (const std::string& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  char* command = nullptr;
  int length =
      redisFormatCommandArgv(&command, static_cast<int>(args.size()), argv.data(), lengths.data());
  if (length < 0 || command == nullptr) return {};  // out of memory
  std::string out(command, static_cast<size_t>(length));
  redisFreeCommand(command);
  return out;
}

struct ReplyReader::Impl {
  redisReader* reader = redisReaderCreate();
};

ReplyReader::ReplyReader() : impl_(std::make_unique<Impl>()) {}

ReplyReader::~ReplyReader() { redisReaderFree(impl_->reader); }

void ReplyReader::Feed(std::string_view bytes) {
  redisReaderFeed(impl_->reader, bytes.data(), bytes.size());
}

absl::StatusOr<std::optional<RedisReply>> ReplyReader::Next() {
  void* raw = nullptr;
  if (redisReaderGetReply(impl_->reader, &raw) != REDIS_OK) {
    return absl::InternalError(absl::StrCat("invalid reply from Redis: ", impl_->reader->errstr));
  }
  if (raw == nullptr) return std::nullopt;
  auto* reply = static_cast<redisReply*>(raw);
  RedisReply out = Convert(*reply);
  freeReplyObject(reply);
  return out;
}

}  // namespace tollgate::redis
