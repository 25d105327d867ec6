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

set(OUTBOX_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})
# outbox_embed_migrations(TARGET NAMESPACE FUNCTION DIR): embeds DIR/*.sql, in
# name order, into TARGET as `NAMESPACE::FUNCTION()` (see cmake/EmbedFiles.cmake).
function(outbox_embed_migrations target namespace function dir)
  file(GLOB files CONFIGURE_DEPENDS ${dir}/*.sql)
  list(SORT files)
  list(JOIN files "|" joined)
  get_filename_component(set_name ${dir} NAME)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${function}.cc)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DNAMESPACE=${namespace} -DFUNCTION=${function}
            "-DFILES=${joined}" -P ${OUTBOX_CMAKE_DIR}/EmbedFiles.cmake
    DEPENDS ${files} ${OUTBOX_CMAKE_DIR}/EmbedFiles.cmake
    COMMENT "Embedding the ${set_name} migrations of ${target}" VERBATIM)
  target_sources(${target} PRIVATE ${out})
endfunction()
