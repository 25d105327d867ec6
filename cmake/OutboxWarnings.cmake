# Shared compile settings for every outbox target: high warnings, optional -Werror,
# optional sanitizers. Applied through the interface target outbox_build_flags.
add_library(outbox_build_flags INTERFACE)
target_compile_options(outbox_build_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wcast-align -Wunused -Wconversion -Wsign-conversion
  -Wnull-dereference -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual>)
if(OUTBOX_WERROR)
  target_compile_options(outbox_build_flags INTERFACE -Werror)
endif()
# clang checks the lock annotations (include/outbox/thread_annotations.h); a
# violation is an error in every clang build (the asan preset, which the test
# command runs, compiles the whole tree with clang).
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(outbox_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety -Werror=thread-safety>
    # librdkafka's RD_KAFKA_V_* macros type-check with ({ ... }), which
    # -Wpedantic names in clang (gcc accepts it in a system header's macro).
    -Wno-gnu-statement-expression)
endif()
if(OUTBOX_SANITIZE)
  target_compile_options(outbox_build_flags INTERFACE
    -fsanitize=${OUTBOX_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(outbox_build_flags INTERFACE -fsanitize=${OUTBOX_SANITIZE})
endif()
if(OUTBOX_SANITIZE MATCHES "thread")
  # Route librdkafka's C11 thread calls through pthread so TSan sees them
  # (see the file's comment). Executables only.
  target_sources(outbox_build_flags INTERFACE
    $<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:${PROJECT_SOURCE_DIR}/cmake/tsan_c11_threads.c>)
endif()

# Accelerators for our own builds only (top level): each is used when the
# machine has it, and a machine without it builds the same thing more slowly.
# lld links the ~40 test executables several times faster than ld.bfd (the
# link step was most of a rebuild after a one-file change); ccache, when
# installed, serves unchanged translation units from its cache.
if(OUTBOX_TOP_LEVEL)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=lld" OUTBOX_HAVE_LLD)
  if(OUTBOX_HAVE_LLD)
    target_link_options(outbox_build_flags INTERFACE -fuse-ld=lld)
  endif()
  find_program(OUTBOX_CCACHE ccache)
  if(OUTBOX_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
    set(CMAKE_C_COMPILER_LAUNCHER "${OUTBOX_CCACHE}")
    set(CMAKE_CXX_COMPILER_LAUNCHER "${OUTBOX_CCACHE}")
  endif()
endif()
