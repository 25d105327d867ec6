# `cmake --install`: headers, the libraries (exported as outbox:: targets with
# their dependencies), the tools, lib/cmake/outbox/outboxConfig.cmake (+ version
# file) and lib/pkgconfig/outbox.pc. Modelled on fmt's and spdlog's packaging.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(OUTBOX_LIBRARIES outbox_core outbox_store_common outbox_store_postgres outbox_store_mariadb
    outbox_transport_kafka outbox_http outbox_relay outbox_inbox)
foreach(lib IN LISTS OUTBOX_LIBRARIES)
  string(REGEX REPLACE "^outbox_" "" export_name "${lib}")
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

install(TARGETS ${OUTBOX_LIBRARIES} EXPORT outboxTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/outbox DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(OUTBOX_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/outbox)
install(EXPORT outboxTargets NAMESPACE outbox:: DESTINATION ${OUTBOX_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/outboxConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/outboxConfig.cmake
                              INSTALL_DESTINATION ${OUTBOX_CMAKE_DIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/outboxConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/outboxConfig.cmake ${PROJECT_BINARY_DIR}/outboxConfigVersion.cmake
        DESTINATION ${OUTBOX_CMAKE_DIR})

configure_file(${PROJECT_SOURCE_DIR}/cmake/outbox.pc.in ${PROJECT_BINARY_DIR}/outbox.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/outbox.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
