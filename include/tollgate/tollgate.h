// Copyright tollgate authors. Everything a user of the library includes.
#ifndef TOLLGATE_TOLLGATE_H_
#define TOLLGATE_TOLLGATE_H_

#include "tollgate/clock.h"
#include "tollgate/config.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"
#include "tollgate/limiter.h"
#include "tollgate/memory_store.h"
#include "tollgate/store.h"

#endif  // TOLLGATE_TOLLGATE_H_
