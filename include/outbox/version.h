// The library's version: the one source of it (CMakeLists.txt reads these
// lines for project(VERSION)); every tool prints it with --version and the
// relay exports it as outbox_build_info{version="..."}.
#ifndef OUTBOX_VERSION_H_
#define OUTBOX_VERSION_H_

#define OUTBOX_VERSION_MAJOR 0
#define OUTBOX_VERSION_MINOR 2
#define OUTBOX_VERSION_PATCH 0
// MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons.
#define OUTBOX_VERSION (OUTBOX_VERSION_MAJOR * 10000 + OUTBOX_VERSION_MINOR * 100 + OUTBOX_VERSION_PATCH)

#define OUTBOX_VERSION_STR_(x) #x
#define OUTBOX_VERSION_STR(x) OUTBOX_VERSION_STR_(x)
// "0.2.0"
#define OUTBOX_VERSION_STRING                                                   \
  OUTBOX_VERSION_STR(OUTBOX_VERSION_MAJOR)                                      \
  "." OUTBOX_VERSION_STR(OUTBOX_VERSION_MINOR) "." OUTBOX_VERSION_STR(OUTBOX_VERSION_PATCH)

#endif  // OUTBOX_VERSION_H_
