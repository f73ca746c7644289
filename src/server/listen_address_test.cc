// Copyright tollgate authors.
#include "src/server/listen_address.h"

#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

TEST(ListenAddressTest, ParsesHostAndPort) {
  absl::StatusOr<ListenAddress> address = ParseListenAddress("127.0.0.1:8080");
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(address->host, "127.0.0.1");
  EXPECT_EQ(address->port, 8080);
}

TEST(ListenAddressTest, PortZeroMeansEphemeral) {
  absl::StatusOr<ListenAddress> address = ParseListenAddress("localhost:0");
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(address->host, "localhost");
  EXPECT_EQ(address->port, 0);
}

TEST(ListenAddressTest, ParsesBracketedIpv6) {
  absl::StatusOr<ListenAddress> address = ParseListenAddress("[::1]:9000");
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(address->host, "::1");
  EXPECT_EQ(address->port, 9000);
  EXPECT_EQ(FormatListenAddress("::1", 9000), "[::1]:9000");
  EXPECT_EQ(FormatListenAddress("127.0.0.1", 80), "127.0.0.1:80");
}

TEST(ListenAddressTest, RejectsMalformedAddresses) {
  for (const char* text : {"", "8080", "127.0.0.1", "127.0.0.1:", ":8080", "127.0.0.1:65536",
                           "127.0.0.1:-1", "127.0.0.1:80x", "::1:80", "[::1]80", "[::1:80"}) {
    absl::StatusOr<ListenAddress> address = ParseListenAddress(text);
    EXPECT_FALSE(address.ok()) << text;
    EXPECT_EQ(address.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

}  // namespace
}  // namespace tollgate::server
