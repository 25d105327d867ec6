# `cpack -G DEB` in a build tree: two Debian packages, from the install
# components (cmake/OutboxInstall.cmake).
#   outbox          the tools, the systemd units, /etc/outbox/relay.toml and
#                   consumer.toml (made from share/outbox/ by postinst), the `outbox`
#                   system user, alert rules, dashboard, docs. Its library
#                   dependencies are computed by dpkg-shlibdeps.
#   liboutbox-dev   headers, static libraries, the CMake package and pkg-config
#                   file; depends on the -dev packages find_package(outbox) needs.
# Test: tests/package_deb_test.sh (ctest package.deb) installs both with dpkg -i.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME outbox)
set(CPACK_PACKAGE_VENDOR "outbox")
set(CPACK_PACKAGE_CONTACT "outbox maintainers <outbox@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "transactional outbox relay and idempotent inbox for PostgreSQL/MariaDB and Kafka")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL tools dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME outbox)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_TOOLS_DESCRIPTION
    "transactional outbox relay and inbox consumer (outbox-relay, outbox-consumer, outboxctl)\n outbox-relay moves committed outbox rows from PostgreSQL or MariaDB to Kafka,\n in order per aggregate, without losing or reordering events; outbox-consumer\n applies each event's effect exactly once (a SQL statement or an HTTP POST);\n outboxctl inspects, replays and purges them. Ships systemd units, Prometheus\n alert rules and a Grafana dashboard.")
set(CPACK_DEBIAN_TOOLS_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/deb/postinst;${PROJECT_SOURCE_DIR}/packaging/deb/prerm;${PROJECT_SOURCE_DIR}/packaging/deb/postrm")
set(CPACK_DEBIAN_TOOLS_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_DEV_PACKAGE_NAME liboutbox-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libpq-dev, librdkafka-dev, libmariadb-dev, librabbitmq-dev, nlohmann-json3-dev (>= 3.11), libcpp-httplib-dev, pkg-config")
set(CPACK_DEBIAN_DEV_DESCRIPTION
    "transactional outbox and idempotent inbox: C++ development files\n Headers, static libraries, a CMake package (find_package(outbox)) and a\n pkg-config file for the outbox stores, relay engine, Kafka transport and inbox.")
include(CPack)
