# `cmake --install`: headers, the libraries (exported as outbox:: targets with
# their dependencies), the tools, lib/cmake/outbox/outboxConfig.cmake (+ version
# file) and lib/pkgconfig/outbox.pc. Modelled on fmt's and spdlog's packaging.
# Two components, which are also the two Debian packages (cmake/OutboxPackage.cmake):
#   dev    headers, static libraries, CMake package, pkg-config file (liboutbox-dev)
#   tools  outbox-relay, outbox-consumer, outboxctl, outbox-mock-kafka, the
#          systemd units, the configuration templates, alert rules, dashboard
#          and docs (outbox)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(OUTBOX_LIBRARIES outbox_core outbox_store_common outbox_inbox_apply outbox_store_postgres outbox_store_mariadb
    outbox_stores
    outbox_transport_kafka outbox_transport_http outbox_transport_rabbitmq outbox_http outbox_relay outbox_inbox)
foreach(lib IN LISTS OUTBOX_LIBRARIES)
  string(REGEX REPLACE "^outbox_" "" export_name "${lib}")
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

# Everything `cmake --install` and cpack copy, as one target: scripts/test
# builds the dev preset's tests and this, not the whole tree.
add_custom_target(outbox_installable)
add_dependencies(outbox_installable ${OUTBOX_LIBRARIES})
if(OUTBOX_BUILD_TOOLS)
  add_dependencies(outbox_installable outbox-relay outbox-consumer outboxctl outbox-mock-kafka)
endif()

install(TARGETS ${OUTBOX_LIBRARIES} EXPORT outboxTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/outbox DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev)

set(OUTBOX_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/outbox)
install(EXPORT outboxTargets NAMESPACE outbox:: DESTINATION ${OUTBOX_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/outboxConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/outboxConfig.cmake
                              INSTALL_DESTINATION ${OUTBOX_CMAKE_DIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/outboxConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/outboxConfig.cmake ${PROJECT_BINARY_DIR}/outboxConfigVersion.cmake
        DESTINATION ${OUTBOX_CMAKE_DIR} COMPONENT dev)

configure_file(${PROJECT_SOURCE_DIR}/cmake/outbox.pc.in ${PROJECT_BINARY_DIR}/outbox.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/outbox.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)

# What the people who run the relay need. No absolute destinations: the
# configuration template goes to share/outbox, and the package's postinst
# copies it to /etc/outbox/relay.toml when that file does not exist.
install(FILES ${PROJECT_SOURCE_DIR}/packaging/systemd/outbox-relay.service
              ${PROJECT_SOURCE_DIR}/packaging/systemd/outbox-consumer.service
        DESTINATION lib/systemd/system COMPONENT tools)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/relay.toml ${PROJECT_SOURCE_DIR}/packaging/consumer.toml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/outbox COMPONENT tools)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/prometheus/outbox-alerts.yml
              ${PROJECT_SOURCE_DIR}/packaging/prometheus/outbox-alerts.test.yml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/outbox/prometheus COMPONENT tools)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/grafana/outbox-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/outbox/grafana COMPONENT tools)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/relay.md
              ${PROJECT_SOURCE_DIR}/docs/alerts.md ${PROJECT_SOURCE_DIR}/docs/inbox.md
              ${PROJECT_SOURCE_DIR}/docs/consumer.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT tools)
