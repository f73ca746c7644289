// Copyright tollgate authors.
#include "src/algorithm/outcome.h"

#include <cmath>

namespace tollgate::algorithm {

int64_t CeilMicros(double micros) {
  if (!(micros > 0)) return 0;
  return static_cast<int64_t>(std::ceil(micros));
}

}  // namespace tollgate::algorithm
