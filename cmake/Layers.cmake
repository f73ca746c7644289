# The layers of src/: one library each, linked to the layers it uses and to no other, lowest
# first (docs/design/overview.md, "Layers"). A layer may use the ones before it in this table,
# never one after it:
#   a call against the direction: the link check below fails the build (every layer library
#     is linked alone, with what it uses, into a shared object that may leave nothing undefined);
#   an include against the direction: the include check fails the build (every
#     `#include "src/..."` under src/ names a folder of the file's own layer or of one it uses,
#     directly or through others; public headers include none).
# tests/layers_test.sh shows both failing on a deliberate backward include and call.
#
# This file has two roles. Included from CMakeLists.txt it makes the libraries and the checks.
# Run as `cmake -DSOURCE_DIR=<tree> -P cmake/Layers.cmake` it is the include check of <tree>.

if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.25)  # the policies of the project's own CMakeLists.txt
endif()

# ---- The table: each layer's folder is its name with store_ as store/. ----------------------
set(TOLLGATE_LAYERS
  algorithm     # pure algorithms (header-only)
  core          # clock, timers, the Store interface's helpers, limit rules, names
  net           # sockets and handler scopes shared by the servers and the Redis client (headers)
  store_memory
  store_redis
  store_sync
  limiter       # the Limiter over the stores (the memory store by default)
  resilience    # deadlines, breaker, failure policies, fallback shares, the instance registry
  fleet         # tollgate::Fleet: the production stack in one call
  config        # YAML -> validated limits
  server        # HTTP, gRPC, RLS planning and descriptor matching, metrics, tracing
  rlqs          # Envoy's Rate Limit Quota Service: streams, buckets, grants synced in Redis
  xds           # config over xDS (reports to the server's metrics)
  cli)          # the binary's subcommands (src/cli/main.cc is the tollgate executable)
set(TOLLGATE_USES_algorithm)
set(TOLLGATE_USES_core)
set(TOLLGATE_USES_net)
set(TOLLGATE_USES_store_memory algorithm core)
set(TOLLGATE_USES_store_redis algorithm core net)
set(TOLLGATE_USES_store_sync algorithm core store_memory store_redis)
set(TOLLGATE_USES_limiter core store_memory)
set(TOLLGATE_USES_resilience algorithm core store_memory store_redis)
set(TOLLGATE_USES_fleet core store_memory store_redis store_sync limiter resilience)
set(TOLLGATE_USES_config core)
set(TOLLGATE_USES_server core net store_memory limiter config)
set(TOLLGATE_USES_rlqs core store_redis store_sync config server)
set(TOLLGATE_USES_xds core config server)
set(TOLLGATE_USES_cli core config fleet server rlqs xds)

# The layers `layer` may use, itself included: what it uses, and what those use.
function(tollgate_layer_closure layer out)
  set(result ${layer})
  set(queue ${layer})
  while(queue)
    list(POP_FRONT queue current)
    foreach(used ${TOLLGATE_USES_${current}})
      if(NOT used IN_LIST result)
        list(APPEND result ${used})
        list(APPEND queue ${used})
      endif()
    endforeach()
  endwhile()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# The table runs one way: each layer uses only layers listed before it.
set(_seen)
foreach(layer ${TOLLGATE_LAYERS})
  foreach(used ${TOLLGATE_USES_${layer}})
    if(NOT used IN_LIST _seen)
      message(FATAL_ERROR "cmake/Layers.cmake: ${layer} uses ${used}, which is not below it")
    endif()
  endforeach()
  list(APPEND _seen ${layer})
endforeach()

# ---- The include check (script mode). -----------------------------------------------------
if(CMAKE_SCRIPT_MODE_FILE)
  if(NOT SOURCE_DIR)
    message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<tree> -P cmake/Layers.cmake")
  endif()
  set(folders)
  foreach(layer ${TOLLGATE_LAYERS})
    string(REGEX REPLACE "^store_" "store/" folder ${layer})
    set(layer_of_${folder} ${layer})
    list(APPEND folders ${folder})
  endforeach()
  set(problems)
  file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cc
       ${SOURCE_DIR}/include/*.h)
  list(SORT files)
  foreach(file ${files})
    if(file MATCHES "^include/")
      set(allowed)  # the public API includes no private header
      set(owner "the public API")
    else()
      string(REGEX MATCH "^src/(store/[^/]+|[^/]+)/" match ${file})
      set(folder ${CMAKE_MATCH_1})
      if(NOT folder OR NOT DEFINED layer_of_${folder})
        list(APPEND problems "${file}: src/${folder} is in no layer (cmake/Layers.cmake)")
        continue()
      endif()
      tollgate_layer_closure(${layer_of_${folder}} allowed)
      set(owner "layer ${layer_of_${folder}}")
    endif()
    file(STRINGS ${SOURCE_DIR}/${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"src/")
    foreach(line ${includes})
      string(REGEX MATCH "\"src/((store/[^/\"]+|[^/\"]+)/[^\"]*)\"" match "${line}")
      set(target_folder ${CMAKE_MATCH_2})
      set(target_layer ${layer_of_${target_folder}})
      if(NOT target_layer)
        list(APPEND problems "${file}: includes src/${CMAKE_MATCH_1}, in no layer")
      elseif(NOT target_layer IN_LIST allowed)
        list(APPEND problems
             "${file}: includes src/${CMAKE_MATCH_1}: ${owner} may not use layer ${target_layer}")
      endif()
    endforeach()
  endforeach()
  if(problems)
    list(JOIN problems "\n  " text)
    message(FATAL_ERROR "Includes against the layers (cmake/Layers.cmake):\n  ${text}")
  endif()
  return()
endif()

# ---- The libraries. ------------------------------------------------------------------------
# The layer's library: tollgate_<layer>; the cli layer's is tollgate_commands (tollgate_cli
# is the executable).
function(tollgate_layer_target layer out)
  if(layer STREQUAL "cli")
    set(${out} tollgate_commands PARENT_SCOPE)
  else()
    set(${out} tollgate_${layer} PARENT_SCOPE)
  endif()
endfunction()

set(TOLLGATE_LAYER_DIR ${CMAKE_BINARY_DIR}/layers)
file(CONFIGURE OUTPUT ${TOLLGATE_LAYER_DIR}/empty.cc
  CONTENT "// The link check's only source of its own.\n" @ONLY)
option(TOLLGATE_CHECK_LAYERS "Check in every build that no layer calls or includes one above it" ON)
# GCC links the sanitizers' runtime into a shared object; clang only into executables unless
# told to link its shared runtime.
set(TOLLGATE_LINK_CHECK_OPTIONS)
if(TOLLGATE_SANITIZE AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(TOLLGATE_LINK_CHECK_OPTIONS -shared-libsan)
endif()

foreach(layer ${TOLLGATE_LAYERS})
  string(REGEX REPLACE "^store_" "store/" folder ${layer})
  tollgate_layer_target(${layer} target)
  tollgate_sources(sources ${folder})
  set(uses)
  foreach(used ${TOLLGATE_USES_${layer}})
    tollgate_layer_target(${used} used_target)
    list(APPEND uses ${used_target})
  endforeach()
  if(sources)
    add_library(${target} STATIC ${sources})
    set(scope PUBLIC)
  else()  # headers only
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  endif()
  # Private headers are included as "src/..." from the repository root, the public API as
  # "tollgate/..." from include/; only the latter is installed.
  target_include_directories(${target} ${scope}
    $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}>)
  target_link_libraries(${target} ${scope} ${uses})
  string(REGEX REPLACE "^tollgate_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})

  if(TOLLGATE_CHECK_LAYERS AND sources)
    add_library(${target}_link_check SHARED ${TOLLGATE_LAYER_DIR}/empty.cc)
    target_link_libraries(${target}_link_check PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${target}>")
    target_link_options(${target}_link_check PRIVATE LINKER:--no-undefined
      ${TOLLGATE_LINK_CHECK_OPTIONS})
    set_target_properties(${target}_link_check PROPERTIES
      LIBRARY_OUTPUT_DIRECTORY ${TOLLGATE_LAYER_DIR})
  endif()
endforeach()

# What each layer needs besides the layers (Debian packages, cmake/Dependencies.cmake).
target_link_libraries(tollgate_algorithm INTERFACE absl::span)
target_link_libraries(tollgate_core
  PUBLIC absl::status absl::statusor absl::any_invocable absl::span absl::synchronization
  PRIVATE absl::strings absl::time Boost::headers Threads::Threads)
# src/core/build_info.h (cmake/BuildInfo.cmake) is generated there.
target_include_directories(tollgate_core PUBLIC $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/generated>)
target_link_libraries(tollgate_net INTERFACE Boost::headers absl::flat_hash_map)
target_link_libraries(tollgate_store_memory PRIVATE absl::flat_hash_map absl::hash absl::strings
  Threads::Threads)
target_link_libraries(tollgate_store_redis
  PUBLIC absl::flat_hash_map absl::strings absl::time
  # PRIVATE, but a static library still needs hiredis at the user's link: the installed
  # package config (cmake/tollgateConfig.cmake.in) finds it again.
  PRIVATE PkgConfig::HIREDIS Boost::headers OpenSSL::SSL Threads::Threads)
target_link_libraries(tollgate_store_sync PRIVATE absl::flat_hash_map absl::hash absl::strings
  Threads::Threads)
target_link_libraries(tollgate_limiter PRIVATE absl::flat_hash_map absl::strings)
target_link_libraries(tollgate_resilience PRIVATE absl::flat_hash_map absl::strings
  Threads::Threads)
target_link_libraries(tollgate_fleet PRIVATE absl::strings)
target_link_libraries(tollgate_config PUBLIC absl::flat_hash_map PRIVATE absl::strings yaml-cpp)
target_link_libraries(tollgate_server
  PUBLIC tollgate_proto Boost::headers nlohmann_json::nlohmann_json spdlog::spdlog
         absl::flat_hash_map absl::synchronization absl::strings absl::random_random
         Threads::Threads PkgConfig::NGHTTP2 OpenSSL::SSL)  # OpenSSL: TLS on the gRPC port
target_link_libraries(tollgate_rlqs PRIVATE absl::flat_hash_map absl::strings spdlog::spdlog)
target_link_libraries(tollgate_xds
  PUBLIC tollgate_grpc absl::status absl::statusor absl::synchronization
  PRIVATE yaml-cpp absl::strings absl::time spdlog::spdlog Threads::Threads)
target_link_libraries(tollgate_commands PUBLIC CLI11::CLI11 spdlog::spdlog OpenSSL::SSL)

# ---- The include check, in every build. ---------------------------------------------------
if(TOLLGATE_CHECK_LAYERS)
  file(GLOB_RECURSE TOLLGATE_LAYER_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*.h
       ${CMAKE_SOURCE_DIR}/src/*.cc ${CMAKE_SOURCE_DIR}/include/*.h)
  add_custom_command(OUTPUT ${TOLLGATE_LAYER_DIR}/includes.checked
    COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
            -P ${CMAKE_SOURCE_DIR}/cmake/Layers.cmake
    COMMAND ${CMAKE_COMMAND} -E touch ${TOLLGATE_LAYER_DIR}/includes.checked
    DEPENDS ${TOLLGATE_LAYER_FILES} ${CMAKE_SOURCE_DIR}/cmake/Layers.cmake
    COMMENT "Checking every #include \"src/...\" against the layers"
    VERBATIM)
  add_custom_target(tollgate_layer_includes ALL DEPENDS ${TOLLGATE_LAYER_DIR}/includes.checked)
endif()

# tests/layers_test.sh: a deliberate backward call (core calls the memory store), linked as
# core's link check is. Built only by that test; its build must fail.
file(CONFIGURE OUTPUT ${TOLLGATE_LAYER_DIR}/backward_call.cc CONTENT
  "#include \"tollgate/memory_store.h\"\nvoid TollgateBackwardCall() { (void)tollgate::MemoryStore::Create({}); }\n" @ONLY)
add_library(tollgate_layer_backward_call SHARED EXCLUDE_FROM_ALL
  ${TOLLGATE_LAYER_DIR}/backward_call.cc)
target_link_libraries(tollgate_layer_backward_call PRIVATE
  "$<LINK_LIBRARY:WHOLE_ARCHIVE,tollgate_core>")
target_link_options(tollgate_layer_backward_call PRIVATE LINKER:--no-undefined
  ${TOLLGATE_LINK_CHECK_OPTIONS})
set_target_properties(tollgate_layer_backward_call PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${TOLLGATE_LAYER_DIR})

# ---- The library users link (tollgate/tollgate.h): every layer up to the fleet, and config.
add_library(tollgate INTERFACE)
add_library(tollgate::tollgate ALIAS tollgate)
target_link_libraries(tollgate INTERFACE tollgate_fleet tollgate_config)
set(TOLLGATE_LIBRARY_LAYERS algorithm core net store_memory store_redis store_sync limiter
    resilience fleet config)
