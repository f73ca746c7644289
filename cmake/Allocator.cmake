# The malloc of the `tollgate` binary only: the library leaves the choice to the program that
# links it. TOLLGATE_MALLOC is `tcmalloc` (tcmalloc_minimal, libgoogle-perftools-dev),
# `jemalloc` (libjemalloc-dev) or `system` (glibc). Why the default: BENCHMARKS.md, Service.
# Sanitizer builds always use the system allocator: ASan must see every malloc and free.
set(TOLLGATE_MALLOC "tcmalloc" CACHE STRING "malloc of the tollgate binary: tcmalloc, jemalloc or system")
set_property(CACHE TOLLGATE_MALLOC PROPERTY STRINGS tcmalloc jemalloc system)

if(TOLLGATE_SANITIZE OR TOLLGATE_MALLOC STREQUAL "system")
  message(STATUS "tollgate binary: system malloc")
  return()
endif()

if(TOLLGATE_MALLOC STREQUAL "tcmalloc")
  pkg_check_modules(TOLLGATE_MALLOC_LIB IMPORTED_TARGET libtcmalloc_minimal)
elseif(TOLLGATE_MALLOC STREQUAL "jemalloc")
  pkg_check_modules(TOLLGATE_MALLOC_LIB IMPORTED_TARGET jemalloc)
else()
  message(FATAL_ERROR "TOLLGATE_MALLOC must be tcmalloc, jemalloc or system, not ${TOLLGATE_MALLOC}")
endif()
if(NOT TOLLGATE_MALLOC_LIB_FOUND)
  message(FATAL_ERROR "TOLLGATE_MALLOC=${TOLLGATE_MALLOC}: its package is missing "
                      "(scripts/bootstrap installs it), or configure with -DTOLLGATE_MALLOC=system")
endif()
message(STATUS "tollgate binary: ${TOLLGATE_MALLOC}")
# Linked as a shared library so that it replaces malloc for every library of the process
# (gRPC, protobuf, hiredis) as well as ours.
target_link_libraries(tollgate_cli PRIVATE PkgConfig::TOLLGATE_MALLOC_LIB)
