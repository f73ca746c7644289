// Copyright tollgate authors. Names of enum values, as used in config, JSON and metrics.
#include "tollgate/decision.h"
#include "tollgate/limit.h"

namespace tollgate {

std::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kTokenBucket:
      return "token_bucket";
    case Algorithm::kFixedWindow:
      return "fixed_window";
    case Algorithm::kSlidingWindow:
      return "sliding_window";
    case Algorithm::kConcurrency:
      return "concurrency";
  }
  return "unknown";
}

std::string_view FailureModeName(FailureMode mode) {
  switch (mode) {
    case FailureMode::kFailOpen:
      return "fail_open";
    case FailureMode::kFailClosed:
      return "fail_closed";
    case FailureMode::kLocal:
      return "local";
  }
  return "unknown";
}

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kExact:
      return "exact";
    case Mode::kSync:
      return "sync";
  }
  return "unknown";
}

std::string_view SharesName(Shares shares) {
  switch (shares) {
    case Shares::kDemand:
      return "demand";
    case Shares::kEqual:
      return "equal";
  }
  return "unknown";
}

std::string_view DecisionSourceName(DecisionSource source) {
  switch (source) {
    case DecisionSource::kMemory:
      return "memory";
    case DecisionSource::kRedis:
      return "redis";
    case DecisionSource::kSync:
      return "sync";
    case DecisionSource::kFallback:
      return "fallback";
  }
  return "unknown";
}

std::string_view DenyReasonName(DenyReason reason) {
  switch (reason) {
    case DenyReason::kNone:
      return "none";
    case DenyReason::kOverLimit:
      return "over_limit";
    case DenyReason::kCostExceedsLimit:
      return "cost_exceeds_limit";
    case DenyReason::kStoreUnavailable:
      return "store_unavailable";
    case DenyReason::kNotFound:
      return "not_found";
    case DenyReason::kAlreadySettled:
      return "already_settled";
  }
  return "unknown";
}

}  // namespace tollgate
