// Copyright tollgate authors.
#include "src/algorithm/outcome.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::algorithm {
namespace {

// Doubles where a rounding shortcut would go wrong: integers and their neighbours, halves,
// the edges of exactly representable integers (2^52, 2^53) and of the caps, tiny values.
std::vector<double> TrickyValues() {
  std::vector<double> values = {0.0,  -0.0, 1e-300, 1e-6, 0.5, 1.0,  1.5,    2.0,    2.5,
                                -0.5, -1.0, -1.5,   3.0,  1e6, 1e15, 1.7e15, 4.5e15, 9e15};
  for (const int exponent : {0, 1, 20, 51, 52, 53, 61, 62, 63}) {
    values.push_back(std::ldexp(1.0, exponent));
  }
  std::mt19937_64 random(3);
  for (int i = 0; i < 2'000; ++i) {
    values.push_back(std::ldexp(std::uniform_real_distribution<double>(1, 2)(random),
                                static_cast<int>(random() % 64) - 4));
  }
  std::vector<double> all;
  for (const double v : values) {
    all.push_back(v);
    all.push_back(std::nextafter(v, -INFINITY));
    all.push_back(std::nextafter(v, INFINITY));
  }
  return all;
}

// CeilMicros agrees with std::ceil (what the Lua scripts' math.ceil computes) below the
// 2^62 cap, gives 0 for what is not positive, and caps the rest.
TEST(CeilMicrosTest, IsTheExactCeiling) {
  for (const double v : TrickyValues()) {
    int64_t expected = 0;
    if (v >= kMaxMicros) {
      expected = static_cast<int64_t>(kMaxMicros);
    } else if (v > 0) {
      expected = static_cast<int64_t>(std::ceil(v));
    }
    EXPECT_EQ(CeilMicros(v), expected) << std::hexfloat << v;
  }
  EXPECT_EQ(CeilMicros(NAN), 0);
  EXPECT_EQ(CeilMicros(INFINITY), static_cast<int64_t>(kMaxMicros));
}

// FloorAtLeastZero agrees with std::floor (Lua's math.floor) wherever that fits an int64,
// and clamps below at 0.
TEST(FloorAtLeastZeroTest, IsTheExactFloor) {
  constexpr double kTwo63 = 9'223'372'036'854'775'808.0;
  for (const double v : TrickyValues()) {
    int64_t expected = 0;
    if (v >= kTwo63) {
      expected = std::numeric_limits<int64_t>::max();
    } else if (v > 0) {
      expected = static_cast<int64_t>(std::floor(v));
    }
    EXPECT_EQ(FloorAtLeastZero(v), expected) << std::hexfloat << v;
  }
  EXPECT_EQ(FloorAtLeastZero(NAN), 0);
  EXPECT_EQ(FloorAtLeastZero(INFINITY), std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace tollgate::algorithm
