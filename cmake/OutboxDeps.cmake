# Third-party dependencies, all from Debian 12 packages (see docs/dependencies.md).
# scripts/deps installs them; this file only finds them.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PQ REQUIRED IMPORTED_TARGET libpq)
pkg_check_modules(RDKAFKA REQUIRED IMPORTED_TARGET rdkafka)
pkg_check_modules(MARIADB REQUIRED IMPORTED_TARGET libmariadb)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(Threads REQUIRED)
if(OUTBOX_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
