// Copyright tollgate authors.
#include "src/server/http_host.h"

#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

TEST(HttpHostTest, HostsAreAccepted) {
  for (const char* host :
       {"", "localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:80", "example.com.",
        "tollgate.internal:", "[::1]", "[::1]:8080", "[2001:db8::7]", "[v1.fe80::a+en1]",
        "xn--bcher-kva.example", "a_b.example", "%41pi.example", "255.255.255.255", "a.b-c.d9"}) {
    EXPECT_TRUE(IsValidHostField(host)) << host;
  }
}

TEST(HttpHostTest, WhatIsNotAHostIsRefused) {
  for (const char* host :
       {"12}7\\.0.0.1", "I127.0.0.1",  "1.2.3.256", "1.2.3",  "01.2.3.4",  "host name", "host/path",
        "user@host",    "[::1",        "[::g]",     "[::1]x", "[::1]:80a", "host:8x",   ":8080",
        "%4",           "%zz.example", "a.b.1",     "[v.x]",  "[v1.]",     "h\tst"}) {
    EXPECT_FALSE(IsValidHostField(host)) << host;
  }
}

}  // namespace
}  // namespace tollgate::server
