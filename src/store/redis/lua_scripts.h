// Copyright tollgate authors. The Lua scripts of src/store/redis/lua/, embedded at build time
// by cmake/Redis.cmake into a generated lua_scripts.cc (one constant per file).
#ifndef TOLLGATE_SRC_STORE_REDIS_LUA_SCRIPTS_H_
#define TOLLGATE_SRC_STORE_REDIS_LUA_SCRIPTS_H_

#include <string_view>

namespace tollgate::redis {

// lua/check.lua: the requests of one flush in one atomic call, each all or nothing (see the
// file's header).
extern const std::string_view kLuaCheck;
// lua/add.lua: adds consumption that happened elsewhere, without checking (reconciliation).
extern const std::string_view kLuaAdd;
// lua/refund.lua: gives back what one check.lua call consumed (cluster, several nodes).
extern const std::string_view kLuaRefund;
// lua/sync.lua: one sync round of one instance (sync mode): counts, and grants by the rule of
// src/algorithm/share.h.
extern const std::string_view kLuaSync;
// lua/heartbeat.lua: one instance's heartbeat; returns the number of live instances.
extern const std::string_view kLuaHeartbeat;

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_LUA_SCRIPTS_H_
