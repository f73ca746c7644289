// Copyright tollgate authors. A limit made ready to decide: the one place the memory store
// turns a limit's Algorithm into code.
//
// A LimitRule holds what one algorithm's pure step (src/algorithm/) needs for one limit: its
// numbers, and the values that depend on them alone (a token bucket's durations, a sliding
// window's 1 / window), computed once by RuleFor with the expressions the step itself uses, so
// a decision is the same whether they were computed now or long ago. An operation
// (CheckOperation) runs a rule's step on an entry's state; every path of the store (single
// checks, the all-or-nothing batch, CheckEach) decides through it.
//
// To add an algorithm: its state to AnyState, a rule struct (a `State` type and `Check`,
// `Charge` and `Settle` members, as below) to LimitRule, and its case in RuleFor. To add an
// operation: a member beside those in each rule struct, and an operation struct like
// CheckOperation that calls it; the store's single-entry path (MemoryStoreImpl::ApplyOne)
// takes any operation. A concurrency limit is not a rate: it has no LimitRule, and its lease
// set is decided by src/algorithm/concurrency.h (ItemRule).
//
// Pure values: no I/O, no clock, no locks; safe to copy and to use from any thread. A check's
// members are always inlined: they are every plain check's hot path, whatever else the store's
// translation unit instantiates.
#ifndef TOLLGATE_SRC_STORE_MEMORY_LIMIT_RULE_H_
#define TOLLGATE_SRC_STORE_MEMORY_LIMIT_RULE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <variant>

#include "absl/base/attributes.h"
#include "absl/status/statusor.h"
#include "src/algorithm/concurrency.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/outcome.h"
#include "src/algorithm/sliding_window.h"
#include "src/algorithm/token_bucket.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"
#include "tollgate/store.h"

namespace tollgate::memory {

// The state one entry keeps: one algorithm's.
using AnyState = std::variant<algorithm::TokenBucketState, algorithm::FixedWindowState,
                              algorithm::SlidingWindowState>;

// The index of state type S in AnyState.
template <typename S>
inline constexpr size_t kStateIndex = AnyState(std::in_place_type<S>).index();

struct TokenBucketRule {
  using State = algorithm::TokenBucketState;
  algorithm::TokenBucketParams params;
  algorithm::TokenBucketTimes times;  // TokenBucketTimesFor(params)

  ABSL_ATTRIBUTE_ALWAYS_INLINE algorithm::Outcome<State> Check(const std::optional<State>& state,
                                                               int64_t now_micros,
                                                               int64_t cost) const {
    return algorithm::TokenBucketCheck(state, now_micros, params, times, cost);
  }
  algorithm::Outcome<State> Charge(const std::optional<State>& state, int64_t now_micros,
                                   int64_t cost) const {
    return algorithm::TokenBucketCharge(state, now_micros, params, times, cost);
  }
  algorithm::Outcome<State> Settle(const std::optional<State>& state, int64_t now_micros,
                                   int64_t reserved, int64_t /*reserved_at_micros*/,
                                   int64_t cost) const {
    return algorithm::TokenBucketSettle(state, now_micros, params, times, reserved, cost);
  }
};

struct FixedWindowRule {
  using State = algorithm::FixedWindowState;
  algorithm::WindowParams params;

  ABSL_ATTRIBUTE_ALWAYS_INLINE algorithm::Outcome<State> Check(const std::optional<State>& state,
                                                               int64_t now_micros,
                                                               int64_t cost) const {
    return algorithm::FixedWindowCheck(state, now_micros, params, cost);
  }
  algorithm::Outcome<State> Charge(const std::optional<State>& state, int64_t now_micros,
                                   int64_t cost) const {
    return algorithm::FixedWindowCharge(state, now_micros, params, cost);
  }
  algorithm::Outcome<State> Settle(const std::optional<State>& state, int64_t now_micros,
                                   int64_t reserved, int64_t reserved_at_micros,
                                   int64_t cost) const {
    return algorithm::FixedWindowSettle(state, now_micros, params, reserved, reserved_at_micros,
                                        cost);
  }
};

struct SlidingWindowRule {
  using State = algorithm::SlidingWindowState;
  algorithm::WindowParams params;
  double per_window = 0;  // algorithm::PerWindow(params)

  ABSL_ATTRIBUTE_ALWAYS_INLINE algorithm::Outcome<State> Check(const std::optional<State>& state,
                                                               int64_t now_micros,
                                                               int64_t cost) const {
    return algorithm::SlidingWindowCheck(state, now_micros, params, per_window, cost);
  }
  algorithm::Outcome<State> Charge(const std::optional<State>& state, int64_t now_micros,
                                   int64_t cost) const {
    return algorithm::SlidingWindowCharge(state, now_micros, params, cost);
  }
  algorithm::Outcome<State> Settle(const std::optional<State>& state, int64_t now_micros,
                                   int64_t reserved, int64_t reserved_at_micros,
                                   int64_t cost) const {
    return algorithm::SlidingWindowSettle(state, now_micros, params, reserved, reserved_at_micros,
                                          cost);
  }
};

using LimitRule = std::variant<TokenBucketRule, FixedWindowRule, SlidingWindowRule>;

// `limit`'s rule. InvalidArgument naming the limit when it is not valid (ValidateLimit), or
// when it is a concurrency limit, which has no rate rule (ItemRuleFor).
absl::StatusOr<LimitRule> RuleFor(const Limit& limit);

// What one item of any op needs to be decided: a rate limit's rule, or a concurrency limit's
// numbers (its lease set lives beside the entries, side_table.h).
struct ItemRule {
  bool concurrency = false;
  LimitRule rate;                       // when !concurrency
  algorithm::ConcurrencyParams leases;  // when concurrency
};

// `item`'s rule, or InvalidArgument: no limit, an empty key, a negative cost, invalid numbers,
// an op the limit's algorithm does not take (a lease op on a rate limit, a charge, reservation
// or settle on a concurrency limit, a lease of cost > 1), or no `id` where the op needs one.
absl::StatusOr<ItemRule> ItemRuleFor(const CheckItem& item);

// What one step decided, and what the entry keeps if the step is applied.
struct Step {
  // `source` is kMemory.
  Decision decision;
  // The state after the step; the state it started from when nothing was consumed.
  AnyState state;
  // Whether `state` differs from the state the step started from (something was consumed).
  bool changed = false;
  // When `state` stops mattering (Outcome::expires_at_micros).
  int64_t expires_at_micros = 0;
};

// An operation on one entry: a check of `cost` units. Like every operation, a callable
// op(rule, state, now_micros) for every rule type, which returns that rule's Outcome from
// `state` (nullopt for a key without an entry, or whose entry holds a state of another
// algorithm: the limit was redefined). REQUIRES: cost >= 0.
struct CheckOperation {
  int64_t cost = 0;

  template <typename Rule>
  ABSL_ATTRIBUTE_ALWAYS_INLINE algorithm::Outcome<typename Rule::State> operator()(
      const Rule& rule, const std::optional<typename Rule::State>& state,
      int64_t now_micros) const {
    algorithm::Outcome<typename Rule::State> outcome = rule.Check(state, now_micros, cost);
    outcome.decision.source = DecisionSource::kMemory;
    return outcome;
  }
};

// An operation on one entry: a charge of `cost` units, consumption that already happened
// (Store's ItemOp::kCharge): applied in full whatever is left, so the limit may go into debt;
// never refused (the decision is allowed, a peek at the state after it). REQUIRES: cost >= 0.
struct ChargeOperation {
  int64_t cost = 0;

  template <typename Rule>
  algorithm::Outcome<typename Rule::State> operator()(
      const Rule& rule, const std::optional<typename Rule::State>& state,
      int64_t now_micros) const {
    algorithm::Outcome<typename Rule::State> outcome = rule.Charge(state, now_micros, cost);
    outcome.decision.source = DecisionSource::kMemory;
    return outcome;
  }
};

// An operation on one entry: a settle of a reservation of `reserved` units taken at
// `reserved_at_micros`, at the actual `cost` (Store's ItemOp::kSettle): a refund of the
// difference into the window or bucket it came from while that still counts, or a charge of
// the extra. Never refused (the decision is a peek after it). REQUIRES: reserved, cost >= 0.
struct SettleOperation {
  int64_t reserved = 0;
  int64_t reserved_at_micros = 0;
  int64_t cost = 0;

  template <typename Rule>
  algorithm::Outcome<typename Rule::State> operator()(
      const Rule& rule, const std::optional<typename Rule::State>& state,
      int64_t now_micros) const {
    algorithm::Outcome<typename Rule::State> outcome =
        rule.Settle(state, now_micros, reserved, reserved_at_micros, cost);
    outcome.decision.source = DecisionSource::kMemory;
    return outcome;
  }
};

// `operation` under `rule` from `state` (nullptr: none; a state of another algorithm counts as
// none), as a Step.
template <typename Operation>
Step Apply(const LimitRule& rule, const AnyState* state, int64_t now_micros,
           const Operation& operation) {
  return std::visit(
      [&](const auto& r) {
        using State = typename std::decay_t<decltype(r)>::State;
        const State* held = state != nullptr ? std::get_if<State>(state) : nullptr;
        const algorithm::Outcome<State> outcome =
            operation(r, held != nullptr ? std::optional<State>(*held) : std::nullopt, now_micros);
        return Step{outcome.decision, outcome.state, outcome.changed, outcome.expires_at_micros};
      },
      rule);
}

}  // namespace tollgate::memory

#endif  // TOLLGATE_SRC_STORE_MEMORY_LIMIT_RULE_H_
