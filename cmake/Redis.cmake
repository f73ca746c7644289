# The Lua scripts of src/store/redis/lua/*.lua, embedded at build time into a generated .cc in
# the build tree, part of the Redis store's layer (tollgate_store_redis, cmake/Layers.cmake).
#
# This file has two roles. Included from CMakeLists.txt it adds the generated source. Run as
# `cmake -DOUTPUT=... -DINPUTS=a.lua;b.lua -P Redis.cmake` it writes the generated file:
# one `extern const std::string_view kLua<Name>` per script, as a raw string literal.
if(CMAKE_SCRIPT_MODE_FILE)
  set(text "// Generated from src/store/redis/lua/*.lua by cmake/Redis.cmake. Do not edit.\n")
  string(APPEND text "#include \"src/store/redis/lua_scripts.h\"\n\nnamespace tollgate::redis {\n")
  foreach(input ${INPUTS})
    get_filename_component(stem ${input} NAME_WE)
    string(REPLACE "_" ";" words ${stem})
    set(name "")
    foreach(word ${words})
      string(SUBSTRING ${word} 0 1 first)
      string(TOUPPER ${first} first)
      string(SUBSTRING ${word} 1 -1 rest)
      string(APPEND name ${first} ${rest})
    endforeach()
    file(READ ${input} body)
    string(FIND "${body}" ")tollgate_lua\"" clash)
    if(NOT clash EQUAL -1)
      message(FATAL_ERROR "${input} contains the raw string delimiter")
    endif()
    string(APPEND text "\nextern const std::string_view kLua${name};\n")
    string(APPEND text "const std::string_view kLua${name} = R\"tollgate_lua(${body})tollgate_lua\";\n")
  endforeach()
  string(APPEND text "\n}  // namespace tollgate::redis\n")
  file(WRITE ${OUTPUT}.tmp "${text}")
  file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
  return()
endif()

file(GLOB TOLLGATE_REDIS_LUA CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/store/redis/lua/*.lua)
set(TOLLGATE_REDIS_LUA_CC ${CMAKE_CURRENT_BINARY_DIR}/generated/src/store/redis/lua_scripts.cc)
add_custom_command(OUTPUT ${TOLLGATE_REDIS_LUA_CC}
  COMMAND ${CMAKE_COMMAND} -DOUTPUT=${TOLLGATE_REDIS_LUA_CC} "-DINPUTS=${TOLLGATE_REDIS_LUA}"
          -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/Redis.cmake
  DEPENDS ${TOLLGATE_REDIS_LUA} ${CMAKE_CURRENT_SOURCE_DIR}/cmake/Redis.cmake
  COMMENT "Embedding src/store/redis/lua/*.lua"
  VERBATIM)

target_sources(tollgate_store_redis PRIVATE ${TOLLGATE_REDIS_LUA_CC})
