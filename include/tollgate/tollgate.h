// Copyright tollgate authors. The whole public API: every header a user includes.
//
// Start with tollgate/fleet.h (the production stack in one call) or tollgate/limiter.h (a
// limiter over one store); tollgate/config.h reads limits from YAML.
#ifndef TOLLGATE_TOLLGATE_H_
#define TOLLGATE_TOLLGATE_H_

#include "tollgate/clock.h"
#include "tollgate/config.h"
#include "tollgate/decision.h"
#include "tollgate/fallback_shares.h"
#include "tollgate/fleet.h"
#include "tollgate/limit.h"
#include "tollgate/limiter.h"
#include "tollgate/memory_store.h"
#include "tollgate/redis_connections.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"
#include "tollgate/store.h"
#include "tollgate/sync_store.h"
#include "tollgate/timers.h"

#endif  // TOLLGATE_TOLLGATE_H_
