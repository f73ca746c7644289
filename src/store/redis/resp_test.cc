// Copyright tollgate authors.
#include "src/store/redis/resp.h"

#include <hiredis/hiredis.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::redis {
namespace {

// What hiredis' own formatter writes for `args`: the reference encoding.
std::string HiredisFormat(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  char* command = nullptr;
  const int length =
      redisFormatCommandArgv(&command, static_cast<int>(args.size()), argv.data(), lengths.data());
  EXPECT_GE(length, 0);
  std::string out(command, static_cast<size_t>(length));
  redisFreeCommand(command);
  return out;
}

TEST(FormatCommandTest, WritesWhatHiredisWrites) {
  const std::vector<std::vector<std::string>> cases = {
      {"PING"},
      {"GET", ""},
      {"SET", "key", std::string("a\0b\r\nc", 6)},
      {"EVALSHA", std::string(40, 'f'), "1", "tollgate:api:{user:42}", "", "t", "100", "0.5", "1"},
      {"SET", "k", std::string(9, 'x'), std::string(10, 'y'), std::string(99, 'z'),
       std::string(100, 'w'), std::string(100000, 'v')},
  };
  for (const std::vector<std::string>& args : cases) {
    EXPECT_EQ(FormatCommand(args), HiredisFormat(args)) << args[0];
  }
  EXPECT_EQ(FormatCommand({"AUTH", "user", "secret"}), HiredisFormat({"AUTH", "user", "secret"}));
}

TEST(FormatCommandTest, RandomArgumentsMatchHiredis) {
  std::mt19937 random(7);  // fixed seed: the same cases every run
  for (int round = 0; round < 500; ++round) {
    std::vector<std::string> args(1 + random() % 20);
    for (std::string& arg : args) {
      // Mostly short, sometimes across the 1-, 2- and 3-digit length boundaries.
      const size_t length = random() % 4 == 0 ? random() % 1200 : random() % 12;
      for (size_t i = 0; i < length; ++i) arg.push_back(static_cast<char>(random() % 256));
    }
    ASSERT_EQ(FormatCommand(args), HiredisFormat(args)) << "round " << round;
  }
}

TEST(CommandWriterTest, NumbersAndConcatenationsAreOrdinaryArguments) {
  const int64_t min = std::numeric_limits<int64_t>::min();
  const int64_t max = std::numeric_limits<int64_t>::max();
  CommandWriter writer(5, /*expected_bytes=*/8);  // too small on purpose: it must grow
  writer.AddInteger(0);
  writer.AddInteger(-42);
  writer.AddInteger(min);
  writer.AddInteger(max);
  writer.AddConcatenation({"tollgate:", "api", ":{", "user:42", "}"});
  EXPECT_EQ(std::move(writer).Finish(),
            HiredisFormat(
                {"0", "-42", std::to_string(min), std::to_string(max), "tollgate:api:{user:42}"}));
}

// A RedisReply built from hiredis' own reply tree: the reference parse.
RedisReply FromHiredis(const redisReply& in) {
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
      for (size_t i = 0; i < in.elements; ++i) out.elements.push_back(FromHiredis(*in.element[i]));
      break;
    default:
      break;
  }
  return out;
}

std::vector<RedisReply> HiredisParse(std::string_view stream) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, stream.data(), stream.size());
  std::vector<RedisReply> out;
  void* reply = nullptr;
  while (redisReaderGetReply(reader, &reply) == REDIS_OK && reply != nullptr) {
    out.push_back(FromHiredis(*static_cast<redisReply*>(reply)));
    freeReplyObject(reply);
  }
  redisReaderFree(reader);
  return out;
}

// Feeds `stream` `chunk` bytes at a time; returns every reply.
std::vector<RedisReply> Parse(std::string_view stream, size_t chunk) {
  ReplyReader reader;
  std::vector<RedisReply> out;
  for (size_t at = 0; at < stream.size(); at += chunk) {
    reader.Feed(stream.substr(at, chunk));
    while (true) {
      absl::StatusOr<std::optional<RedisReply>> reply = reader.Next();
      EXPECT_TRUE(reply.ok()) << reply.status();
      if (!reply.ok() || !reply->has_value()) break;
      out.push_back(**std::move(reply));
    }
  }
  return out;
}

// Every kind of value, nested, and each kind right after an array (the reader reuses one
// root value, which must not keep the previous reply's elements or text).
// A char array, not a plain literal: the stream holds a NUL byte.
constexpr char kStreamBytes[] =
    "*6\r\n:1700000000000000\r\n:1\r\n:99\r\n:0\r\n:-5\r\n:0\r\n"
    ":42\r\n"
    "*3\r\n*2\r\n:0\r\n:5460\r\n$-1\r\n*0\r\n"
    "+OK\r\n"
    "*2\r\n$3\r\nfoo\r\n$0\r\n\r\n"
    "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    "*1\r\n$4\r\na\r\nb\r\n"
    "$-1\r\n"
    "*-1\r\n"
    "$6\r\n\0\r\n\r\nx\r\n"
    "*2\r\n*1\r\n*1\r\n:7\r\n-ERR nested\r\n";
constexpr std::string_view kStream(kStreamBytes, sizeof(kStreamBytes) - 1);

TEST(ReplyReaderTest, ParsesWhatHiredisParses) {
  const std::string_view stream = kStream;
  const std::vector<RedisReply> expected = HiredisParse(stream);
  ASSERT_EQ(expected.size(), 11u);
  for (size_t chunk : {stream.size(), size_t{1}, size_t{3}, size_t{7}}) {
    const std::vector<RedisReply> parsed = Parse(stream, chunk);
    ASSERT_EQ(parsed.size(), expected.size()) << "chunk " << chunk;
    for (size_t i = 0; i < parsed.size(); ++i) {
      EXPECT_EQ(DebugString(parsed[i]), DebugString(expected[i]))
          << "reply " << i << ", chunk " << chunk;
      EXPECT_EQ(parsed[i].type, expected[i].type) << "reply " << i;
    }
  }
}

TEST(ReplyReaderTest, TypesAndValues) {
  const std::vector<RedisReply> parsed = Parse(kStream, 5);
  ASSERT_EQ(parsed.size(), 11u);
  ASSERT_EQ(parsed[0].type, RedisReply::Type::kArray);
  ASSERT_EQ(parsed[0].elements.size(), 6u);
  EXPECT_EQ(parsed[0].elements[0].integer, 1700000000000000);
  EXPECT_EQ(parsed[0].elements[4].integer, -5);
  EXPECT_EQ(parsed[1].type, RedisReply::Type::kInteger);
  EXPECT_TRUE(parsed[1].elements.empty());
  EXPECT_EQ(parsed[2].elements[0].elements[1].integer, 5460);
  EXPECT_EQ(parsed[2].elements[1].type, RedisReply::Type::kNil);
  EXPECT_EQ(parsed[2].elements[2].type, RedisReply::Type::kArray);
  EXPECT_TRUE(parsed[2].elements[2].elements.empty());
  EXPECT_EQ(parsed[3].type, RedisReply::Type::kStatus);
  EXPECT_EQ(parsed[3].str, "OK");
  EXPECT_TRUE(parsed[5].is_error());
  EXPECT_EQ(parsed[5].str, "NOSCRIPT No matching script. Please use EVAL.");
  EXPECT_EQ(parsed[6].elements[0].str, "a\r\nb");
  EXPECT_EQ(parsed[7].type, RedisReply::Type::kNil);
  EXPECT_TRUE(parsed[7].str.empty());
  EXPECT_EQ(parsed[8].type, RedisReply::Type::kNil);
  EXPECT_EQ(parsed[9].str, std::string("\0\r\n\r\nx", 6));
  EXPECT_EQ(parsed[10].elements[0].elements[0].elements[0].integer, 7);
  EXPECT_EQ(parsed[10].elements[1].str, "ERR nested");
}

TEST(ReplyReaderTest, InvalidStreamIsAnError) {
  ReplyReader reader;
  reader.Feed(":1\r\n*2\r\n:1\r\n");  // one reply, then half an array (kept by the reader)
  absl::StatusOr<std::optional<RedisReply>> first = reader.Next();
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->integer, 1);
  absl::StatusOr<std::optional<RedisReply>> partial = reader.Next();
  ASSERT_TRUE(partial.ok());
  EXPECT_FALSE(partial->has_value());
  reader.Feed("?garbage\r\n");  // the half-built array is freed (no leak under ASan)
  absl::StatusOr<std::optional<RedisReply>> bad = reader.Next();
  EXPECT_FALSE(bad.ok());
}

TEST(ReplyReaderTest, DestroyedWithHalfAReply) {
  // The half-built array belongs to the reader; destroying it frees everything (ASan).
  ReplyReader reader;
  reader.Feed("*3\r\n$5\r\nhello\r\n*2\r\n:1\r\n");
  absl::StatusOr<std::optional<RedisReply>> reply = reader.Next();
  ASSERT_TRUE(reply.ok());
  EXPECT_FALSE(reply->has_value());
}

}  // namespace
}  // namespace tollgate::redis
