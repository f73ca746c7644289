// Copyright tollgate authors. ReadRateLimitRequest against protobuf's own parser of the message:
// on generated requests, on hand-made edge cases of the wire format, and on thousands of
// mutations of valid requests, both accept the same bytes and read the same values.
#include "src/server/rls_request.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

using RateLimitRequest = envoy::service::ratelimit::v3::RateLimitRequest;

// Protobuf logs every invalid UTF-8 string it refuses; the mutations make many.
class QuietProtobuf {
 public:
  QuietProtobuf() { google::protobuf::SetLogHandler(nullptr); }
};

// What protobuf's parser makes of `bytes`: the message, and whether it accepted them.
struct Parsed {
  RateLimitRequest message;
  bool ok = false;
};

Parsed ProtobufParse(const std::string& bytes) {
  Parsed parsed;
  parsed.ok = parsed.message.ParseFromString(bytes);
  return parsed;
}

std::string Describe(const RateLimitRequestView& view) {
  std::string out =
      "domain '" + std::string(view.domain) + "' hits " + std::to_string(view.hits_addend);
  for (const RlsDescriptorView& descriptor : view.descriptors) {
    out += " [";
    for (const DescriptorEntry& entry : descriptor.entries) {
      out += std::string(entry.key) + "=" + std::string(entry.value) + ";";
    }
    out += " limit " + std::to_string(descriptor.has_limit) + ":" +
           std::to_string(descriptor.requests_per_unit) + "/" + std::to_string(descriptor.unit);
    out += " hits " + std::to_string(descriptor.has_hits_addend) + ":" +
           std::to_string(descriptor.hits_addend) + "]";
  }
  return out;
}

// Both parsers on `bytes`: the same verdict and, when accepted, the same values.
void ExpectSameAsProtobuf(const std::string& bytes, const std::string& what) {
  const Parsed parsed = ProtobufParse(bytes);
  RateLimitRequestView view;
  const bool ok = ReadRateLimitRequest(bytes, &view);
  ASSERT_EQ(ok, parsed.ok) << what;
  if (!ok) return;
  const RateLimitRequestView expected = RateLimitRequestView::Of(parsed.message);
  EXPECT_TRUE(view == expected) << what << "\n read:     " << Describe(view)
                                << "\n protobuf: " << Describe(expected);
}

std::string RandomText(std::mt19937& random) {
  static const std::vector<std::string> kPieces = {
      "a", "user", "tenant", "/orders", "", "x=y", "%2C", "é", "日本", "🙂", " ", "\t", "0"};
  std::string out;
  const int pieces = static_cast<int>(random() % 4);
  for (int i = 0; i < pieces; ++i) out += kPieces[random() % kPieces.size()];
  return out;
}

RateLimitRequest RandomRequest(std::mt19937& random) {
  RateLimitRequest request;
  request.set_domain(RandomText(random));
  if (random() % 3 == 0) request.set_hits_addend(static_cast<uint32_t>(random()));
  const int descriptors = static_cast<int>(random() % 4);
  for (int i = 0; i < descriptors; ++i) {
    auto* descriptor = request.add_descriptors();
    const int entries = static_cast<int>(random() % 4);
    for (int j = 0; j < entries; ++j) {
      auto* entry = descriptor->add_entries();
      entry->set_key(RandomText(random));
      entry->set_value(RandomText(random));
    }
    if (random() % 3 == 0) {
      auto* limit = descriptor->mutable_limit();  // present, possibly empty
      if (random() % 2 == 0) limit->set_requests_per_unit(static_cast<uint32_t>(random()));
      if (random() % 2 == 0) {
        limit->set_unit(static_cast<envoy::type::v3::RateLimitUnit>(random() % 9));
      }
    }
    if (random() % 3 == 0) {
      auto* hits = descriptor->mutable_hits_addend();
      if (random() % 2 == 0) hits->set_value((uint64_t{random()} << 32) | random());
    }
  }
  return request;
}

TEST(ReadRateLimitRequestTest, ReadsWhatProtobufWrites) {
  std::mt19937 random(20261205);
  for (int i = 0; i < 2000; ++i) {
    const RateLimitRequest request = RandomRequest(random);
    ExpectSameAsProtobuf(request.SerializeAsString(), request.ShortDebugString());
  }
}

TEST(ReadRateLimitRequestTest, ReadsAnEnvoyRequest) {
  RateLimitRequest request;
  request.set_domain("edge");
  auto* descriptor = request.add_descriptors();
  auto* entry = descriptor->add_entries();
  entry->set_key("remote_address");
  entry->set_value("10.0.0.1");
  descriptor->mutable_limit()->set_requests_per_unit(5);
  descriptor->mutable_limit()->set_unit(envoy::type::v3::MINUTE);
  descriptor->mutable_hits_addend()->set_value(0);
  const std::string bytes = request.SerializeAsString();
  RateLimitRequestView view;
  ASSERT_TRUE(ReadRateLimitRequest(bytes, &view));
  EXPECT_EQ(view.domain, "edge");
  EXPECT_EQ(view.hits_addend, 0u);
  ASSERT_EQ(view.descriptors.size(), 1u);
  ASSERT_EQ(view.descriptors[0].entries.size(), 1u);
  EXPECT_EQ(view.descriptors[0].entries[0].key, "remote_address");
  EXPECT_EQ(view.descriptors[0].entries[0].value, "10.0.0.1");
  EXPECT_TRUE(view.descriptors[0].has_limit);
  EXPECT_EQ(view.descriptors[0].requests_per_unit, 5u);
  EXPECT_EQ(view.descriptors[0].unit, envoy::type::v3::MINUTE);
  EXPECT_TRUE(view.descriptors[0].has_hits_addend);  // given, though 0
  EXPECT_EQ(view.descriptors[0].hits_addend, 0u);
  // The views point into the bytes: nothing was copied.
  EXPECT_GE(view.domain.data(), bytes.data());
  EXPECT_LT(view.domain.data(), bytes.data() + bytes.size());
}

// Wire-format pieces for the hand-made cases.
std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
  return out;
}
std::string Key(uint32_t field, uint32_t wire_type) { return Varint(field << 3 | wire_type); }
std::string Bytes(uint32_t field, const std::string& bytes) {
  return Key(field, 2) + Varint(bytes.size()) + bytes;
}
std::string Entry(const std::string& key, const std::string& value) {
  return Bytes(1, Bytes(1, key) + Bytes(2, value));
}

TEST(ReadRateLimitRequestTest, EdgeCasesOfTheWireFormatAsProtobuf) {
  QuietProtobuf quiet;
  const std::string domain = Bytes(1, "edge");
  const std::string descriptor = Bytes(2, Entry("k", "v"));
  const std::string unknown_group = Key(9, 3) + Key(1, 0) + Varint(7) + Key(9, 4);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"plain", domain + descriptor},
      {"unknown varint", domain + Key(7, 0) + Varint(UINT64_MAX) + descriptor},
      {"unknown fixed64", domain + Key(7, 1) + std::string(8, 'x') + descriptor},
      {"unknown fixed32", domain + Key(7, 5) + std::string(4, 'x') + descriptor},
      {"unknown bytes", domain + Bytes(7, "anything") + descriptor},
      {"unknown group", domain + unknown_group + descriptor},
      {"nested unknown groups",
       domain + Key(9, 3) + Key(10, 3) + Key(10, 4) + Key(9, 4) + descriptor},
      {"group closed by another field's end", domain + Key(9, 3) + Key(8, 4) + descriptor},
      {"group never closed", domain + Key(9, 3) + Key(1, 0) + Varint(1)},
      {"unknown group in an entry",
       domain + Bytes(2, Bytes(1, Bytes(1, "k") + unknown_group + Bytes(2, "v")))},
      {"unknown fields in the override",
       domain + Bytes(2, Bytes(2, Key(1, 0) + Varint(5) + Key(3, 0) + Varint(1)))},
      {"domain as a varint is an unknown field", Key(1, 0) + Varint(3) + descriptor},
      {"entries as a varint", domain + Bytes(2, Key(1, 0) + Varint(3))},
      {"domain twice: the last", domain + Bytes(1, "second") + descriptor},
      {"hits_addend twice: the last", domain + Key(3, 0) + Varint(4) + Key(3, 0) + Varint(9)},
      {"hits_addend above 32 bits", domain + Key(3, 0) + Varint(0x1'0000'0005)},
      {"limit twice: merged",
       domain + Bytes(2, Bytes(2, Key(1, 0) + Varint(5)) + Bytes(2, Key(2, 0) + Varint(2)))},
      {"empty limit and hits", domain + Bytes(2, Bytes(2, "") + Bytes(3, ""))},
      {"negative unit", domain + Bytes(2, Bytes(2, Key(2, 0) + Varint(UINT64_MAX)))},
      {"entry key twice", domain + Bytes(2, Bytes(1, Bytes(1, "a") + Bytes(1, "b")))},
      {"field number 0", domain + Key(0, 0) + Varint(1)},
      {"tag 0", domain + std::string(1, '\0')},
      {"end group alone", domain + Key(9, 4)},
      {"end group in a descriptor", domain + Bytes(2, Key(9, 4))},
      {"wire type 6", domain + Key(7, 6)},
      {"wire type 7", domain + Key(7, 7)},
      {"varint of 10 bytes", domain + Key(7, 0) + std::string(9, '\xff') + '\x01'},
      {"varint of 11 bytes", domain + Key(7, 0) + std::string(10, '\xff') + '\x01'},
      {"truncated varint", domain + Key(7, 0) + '\xff'},
      {"tag of 5 bytes", domain + std::string("\xf8\xff\xff\xff\x0f", 5) + Varint(1)},
      {"tag of 6 bytes", domain + std::string("\xf8\xff\xff\xff\x8f\x00", 6) + Varint(1)},
      {"padded tag", std::string("\x8a\x00", 2) + Varint(4) + "edge"},
      {"padded length", Key(1, 2) + std::string("\x84\x80\x80\x80\x00", 5) + "edge"},
      {"length of 6 bytes", Key(1, 2) + std::string("\x84\x80\x80\x80\x80\x00", 6) + "edge"},
      {"length past the end", Key(1, 2) + Varint(5) + "edge"},
      {"length in a descriptor past its end", domain + Bytes(2, Key(1, 2) + Varint(9) + "ab")},
      {"truncated fixed64", domain + Key(7, 1) + "1234567"},
      {"invalid UTF-8 domain", Bytes(1, "\xc3\x28")},
      {"invalid UTF-8 key", domain + Bytes(2, Entry("\xff", "v"))},
      {"invalid UTF-8 value", domain + Bytes(2, Entry("k", "\xed\xa0\x80"))},
      {"invalid UTF-8 in an unknown field", domain + Bytes(7, "\xff") + descriptor},
  };
  for (const auto& [what, bytes] : cases) ExpectSameAsProtobuf(bytes, what);

  // Nesting: unknown groups within groups, up to protobuf's bound and one past it.
  for (int depth : {98, 99, 100, 101}) {
    std::string nested;
    for (int i = 0; i < depth; ++i) nested += Key(9, 3);
    for (int i = 0; i < depth; ++i) nested += Key(9, 4);
    ExpectSameAsProtobuf(domain + nested, "groups nested " + std::to_string(depth) + " deep");
    ExpectSameAsProtobuf(domain + Bytes(2, Bytes(1, nested)),
                         "groups nested " + std::to_string(depth) + " deep in an entry");
  }
}

TEST(ReadRateLimitRequestTest, MutatedRequestsAsProtobuf) {
  QuietProtobuf quiet;
  std::mt19937 random(5122026);
  int accepted = 0;
  int refused = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string valid = RandomRequest(random).SerializeAsString();
    for (int j = 0; j < 25; ++j) {
      std::string bytes = valid;
      const int edits = 1 + static_cast<int>(random() % 3);
      for (int e = 0; e < edits; ++e) {
        const size_t at = bytes.empty() ? 0 : random() % bytes.size();
        const char byte = static_cast<char>(random());
        switch (random() % 5) {
          case 0:
            if (!bytes.empty()) bytes[at] = byte;
            break;
          case 1:
            bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), byte);
            break;
          case 2:
            if (!bytes.empty()) bytes.erase(at, 1);
            break;
          case 3:
            bytes.resize(at);
            break;
          default:
            if (!bytes.empty()) bytes[at] = static_cast<char>(bytes[at] ^ (1 << (random() % 8)));
        }
      }
      const Parsed parsed = ProtobufParse(bytes);
      (parsed.ok ? accepted : refused)++;
      ExpectSameAsProtobuf(bytes, "mutation " + std::to_string(i) + "." + std::to_string(j));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  // The mutations reach both verdicts, often.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace tollgate::server
