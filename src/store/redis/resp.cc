// Copyright tollgate authors.
#include "src/store/redis/resp.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tollgate::redis {
namespace {

// hiredis' reader calls these for every value it parses (`task->obj` of an array is the
// RedisReply it became). The root value goes into the ReplyReader's own RedisReply
// (`privdata`); an element goes into the slot its array made for it, so nothing is copied
// into a second tree. The pointer returned is only a handle for hiredis (non-null: success).
RedisReply* SlotFor(const redisReadTask* task) {
  if (task->parent == nullptr) {
    auto* root = static_cast<RedisReply*>(task->privdata);
    *root = RedisReply();  // the previous reply was moved out
    return root;
  }
  auto* array = static_cast<RedisReply*>(task->parent->obj);
  return &array->elements[static_cast<size_t>(task->idx)];
}

void* CreateString(const redisReadTask* task, char* str, size_t length) {
  RedisReply* reply = SlotFor(task);
  switch (task->type) {
    case REDIS_REPLY_ERROR:
      reply->type = RedisReply::Type::kError;
      break;
    case REDIS_REPLY_STATUS:
      reply->type = RedisReply::Type::kStatus;
      break;
    default:
      reply->type = RedisReply::Type::kString;
      break;
  }
  reply->str.assign(str, length);
  return reply;
}

void* CreateArray(const redisReadTask* task, int elements) {
  RedisReply* reply = SlotFor(task);
  reply->type = RedisReply::Type::kArray;
  // Sized up front: the elements' slots must not move while hiredis fills them.
  reply->elements.resize(static_cast<size_t>(std::max(elements, 0)));
  return reply;
}

void* CreateInteger(const redisReadTask* task, long long value) {  // NOLINT(runtime/int)
  RedisReply* reply = SlotFor(task);
  reply->type = RedisReply::Type::kInteger;
  reply->integer = value;
  return reply;
}

void* CreateNil(const redisReadTask* task) {
  RedisReply* reply = SlotFor(task);
  reply->type = RedisReply::Type::kNil;
  return reply;
}

// hiredis frees a partial reply this way after a protocol error (and a pending one when
// the reader is freed); the root belongs to the ReplyReader, so it is only reset.
void FreeObject(void* reply) { *static_cast<RedisReply*>(reply) = RedisReply(); }

redisReplyObjectFunctions kReplyFunctions = {CreateString, CreateArray, CreateInteger, CreateNil,
                                             FreeObject};

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

CommandWriter::CommandWriter(size_t argc, size_t expected_bytes) : remaining_(argc) {
  out_.resize(std::max<size_t>(expected_bytes, 2 * kMaxHeader));
  cursor_ = out_.data();
  end_ = cursor_ + out_.size();
  WriteHeader('*', argc);
}

void CommandWriter::Grow(size_t bytes) {
  const size_t used = static_cast<size_t>(cursor_ - out_.data());
  out_.resize(std::max(2 * out_.size(), used + bytes));
  cursor_ = out_.data() + used;
  end_ = out_.data() + out_.size();
}

char* PutRespHeader(char* at, char type, size_t length) {
  *at++ = type;
  if (length < 10) {
    *at++ = static_cast<char>('0' + length);
  } else {
    at = std::to_chars(at, at + kMaxRespHeader - 3, length).ptr;
  }
  *at++ = '\r';
  *at++ = '\n';
  return at;
}

void CommandWriter::WriteHeader(char type, size_t length) {
  cursor_ = PutRespHeader(cursor_, type, length);
}

void CommandWriter::Add(std::string_view arg) {
  --remaining_;
  Reserve(kMaxHeader + arg.size() + 2);
  WriteHeader('$', arg.size());
  if (!arg.empty()) std::memcpy(cursor_, arg.data(), arg.size());
  cursor_ += arg.size();
  *cursor_++ = '\r';
  *cursor_++ = '\n';
}

void CommandWriter::AddInteger(int64_t value) {
  char text[24];
  const char* end = std::to_chars(text, text + sizeof(text), value).ptr;
  Add(std::string_view(text, static_cast<size_t>(end - text)));
}

void CommandWriter::AddConcatenation(std::initializer_list<std::string_view> pieces) {
  --remaining_;
  size_t length = 0;
  for (std::string_view piece : pieces) length += piece.size();
  Reserve(kMaxHeader + length + 2);
  WriteHeader('$', length);
  for (std::string_view piece : pieces) {
    if (!piece.empty()) std::memcpy(cursor_, piece.data(), piece.size());
    cursor_ += piece.size();
  }
  *cursor_++ = '\r';
  *cursor_++ = '\n';
}

std::string CommandWriter::Finish() && {
  assert(remaining_ == 0);
  out_.resize(static_cast<size_t>(cursor_ - out_.data()));
  return std::move(out_);
}

namespace {

template <typename Strings>
std::string FormatStrings(const Strings& args) {
  size_t bytes = 16;
  for (const auto& arg : args) bytes += arg.size() + 16;
  CommandWriter writer(args.size(), bytes);
  for (const auto& arg : args) writer.Add(std::string_view(arg.data(), arg.size()));
  return std::move(writer).Finish();
}

}  // namespace

std::string FormatCommand(absl::Span<const std::string> args) { return FormatStrings(args); }

std::string FormatCommand(std::initializer_list<std::string_view> args) {
  return FormatStrings(args);
}

struct ReplyReader::Impl {
  // The reply being parsed; hiredis writes into it through kReplyFunctions.
  RedisReply root;
  redisReader* reader = redisReaderCreateWithFunctions(&kReplyFunctions);
};

ReplyReader::ReplyReader() : impl_(std::make_unique<Impl>()) {
  // (redisReaderSetPrivdata casts through int, which does not hold a pointer here.)
  impl_->reader->privdata = &impl_->root;
}

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
  return std::move(impl_->root);
}

}  // namespace tollgate::redis
