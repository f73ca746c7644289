// Copyright tollgate authors.
#include "src/server/json_errors.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tollgate::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Message(std::string_view body) {
  absl::StatusOr<nlohmann::json> parsed = ParseJsonBody(body, 8);
  EXPECT_FALSE(parsed.ok()) << body;
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST(ParseJsonBodyTest, ParsesAValidDocument) {
  absl::StatusOr<nlohmann::json> parsed = ParseJsonBody(R"({"a":["\u00e9",1]})", 8);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)["a"][0], "\xC3\xA9");
}

TEST(ParseJsonBodyTest, NamesTheFieldThatHoldsInvalidUtf8) {
  EXPECT_EQ(Message("{\"descriptors\":[{\"entries\":[{\"key\":\"\xC0\xAF\",\"value\":\"v\"}]}]}"),
            "descriptors[0].entries[0].key: not valid UTF-8");
  EXPECT_EQ(Message("{\"checks\":[{\"limit\":\"a\"},{\"limit\":\"a\",\"key\":\"x\xFFy\"}]}"),
            "checks[1].key: not valid UTF-8");
  EXPECT_EQ(Message("\"\xED\xA0\x80\""), "body: not valid UTF-8");  // an encoded surrogate
  EXPECT_EQ(Message("{\"a\":{\"k\xF5\":1}}"), "a: a field name is not valid UTF-8");
  EXPECT_EQ(Message("{\"k\xE0\x80\":1}"), "body: a field name is not valid UTF-8");
  EXPECT_EQ(Message("{\"a b\":[\"\x80\"]}"), "body[\"a b\"][0]: not valid UTF-8");
}

TEST(ParseJsonBodyTest, InvalidUtf8OutsideStringsGivesItsOffset) {
  EXPECT_EQ(Message("{\"a\":1,\xC3}"), "invalid JSON: not valid UTF-8 at byte 7");
}

TEST(ParseJsonBodyTest, AMarkerAlreadyInTheBodyIsNotMistakenForInvalidBytes) {
  // U+FDD0 both raw and escaped in one field, the invalid byte in another.
  const std::string body = "{\"a\":\"\xEF\xB7\x90\\ufdd1\",\"b\":\"\xFF\"}";
  EXPECT_EQ(Message(body), "b: not valid UTF-8");
}

TEST(ParseJsonBodyTest, SyntaxErrorsDoNotQuoteTheInput) {
  const std::string message = Message("{\"limit\": secret-token}");
  EXPECT_THAT(message, HasSubstr("invalid JSON: parse error at line 1, column"));
  EXPECT_THAT(message, Not(HasSubstr("secret")));
  const std::string control = Message("{\"limit\":\"ab\x01secret\"}");
  EXPECT_THAT(control, HasSubstr("control character U+0001"));
  EXPECT_THAT(control, Not(HasSubstr("secret")));
  EXPECT_THAT(Message("[1e99999]"), Not(HasSubstr("99999")));
  EXPECT_EQ(Message(""), "empty body: expected a JSON object");
  EXPECT_EQ(Message("[[[[[[[[[[1]]]]]]]]]]"), "invalid JSON: nested deeper than 8 levels");
}

TEST(QuoteForMessageTest, EscapesControlsReplacesInvalidBytesAndCutsOnACharacter) {
  EXPECT_EQ(QuoteForMessage("a\x01z"), "\"a\\u0001z\"");
  EXPECT_EQ(QuoteForMessage("a\xC0z\x7F\xC3\xA9"), "\"a\\ufffdz\\u007f\\u00e9\"");
  const std::string long_text = std::string(63, 'a') + "\xC3\xA9" + "tail";
  EXPECT_EQ(QuoteForMessage(long_text), "\"" + std::string(63, 'a') + "...\"");
}

TEST(EscapeForMessageTest, KeepsPrintableAsciiOnly) {
  EXPECT_EQ(EscapeForMessage("ok \xC3\xA9\n"), "ok \\xC3\\xA9\\x0A");
  EXPECT_EQ(EscapeForMessage("abcdef", 3), "abc...");
}

TEST(RlsJsonParseErrorMessageTest, NeverQuotesTheBody) {
  EXPECT_EQ(RlsJsonParseErrorMessage(
                "{\"domain\":\"d\",\"descriptors\":[{\"entries\":[{\"key\":\"\xC0\xAF\"}]}]}",
                "Encountered non UTF-8 code points"),
            "descriptors[0].entries[0].key: not valid UTF-8");
  EXPECT_EQ(RlsJsonParseErrorMessage("{\"dom\xC3\xA9\":1}", "dom\xC3\xA9: Cannot find field."),
            "invalid JSON request: dom\\xC3\\xA9: Cannot find field.");
}

}  // namespace
}  // namespace tollgate::server
