# Shared compile settings for every outbox target: high warnings, optional -Werror,
# optional sanitizers. Applied through the interface target outbox_build_flags.
add_library(outbox_build_flags INTERFACE)
target_compile_options(outbox_build_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Wunused -Woverloaded-virtual -Wconversion -Wsign-conversion
  -Wnull-dereference -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
if(OUTBOX_WERROR)
  target_compile_options(outbox_build_flags INTERFACE -Werror)
endif()
if(OUTBOX_SANITIZE)
  target_compile_options(outbox_build_flags INTERFACE
    -fsanitize=${OUTBOX_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(outbox_build_flags INTERFACE -fsanitize=${OUTBOX_SANITIZE})
endif()
