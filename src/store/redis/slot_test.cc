// Copyright tollgate authors.
#include "src/store/redis/slot.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tollgate::redis {
namespace {

TEST(Crc16Test, XmodemCheckValue) {
  // The standard check value of CRC16-XMODEM, also quoted by the Redis Cluster spec.
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(Crc16(""), 0);
}

// Expected slots are what `redis-cli CLUSTER KEYSLOT <key>` answered on redis-server 7.0.15
// (cluster-enabled), not values computed by this code.
TEST(KeySlotTest, MatchesClusterKeyslot) {
  struct Case {
    std::string key;
    int slot;
  };
  const Case cases[] = {
      {"", 0},
      {"a", 15495},
      {"foo", 12182},
      {"123456789", 12739},
      {"user:42", 15880},
      {"{user:42}", 15880},
      {"tollgate:api_per_user:{user:42}", 15880},
      {"foo{}{bar}", 8363},     // empty first tag: the whole key is hashed
      {"foo{{bar}}zap", 4015},  // tag is "{bar"
      {"foo{bar}{zap}", 5061},  // only the first tag counts
      {"{}", 15257},
      {"{a", 10276},  // no closing brace: the whole key
      {"tollgate:instances", 2184},
      {"h\xc3\xa9llo", 11061},  // bytes, not characters
  };
  for (const Case& c : cases) EXPECT_EQ(KeySlot(c.key), c.slot) << "key \"" << c.key << "\"";
}

TEST(KeySlotTest, EveryLimitOfOneEntityKeySharesASlot) {
  EXPECT_EQ(KeySlot("tollgate:api_per_user:{user:42}"), KeySlot("tollgate:orders:{user:42}"));
  EXPECT_EQ(KeySlot("tollgate:search:{user:42}:29935121"), KeySlot("{user:42}"));
}

TEST(SlotTagTest, NamesEverySlotWithAStableShortTag) {
  for (int slot = 0; slot < kClusterSlots; ++slot) {
    ASSERT_EQ(KeySlot(absl::StrCat("tollgate:sync:id:{", SlotTag(slot), "}")), slot);
    ASSERT_LE(SlotTag(slot).size(), 7U);
  }
  EXPECT_EQ(SlotTag(KeySlot("0")), "0");
}

}  // namespace
}  // namespace tollgate::redis
