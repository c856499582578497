# `cmake --install BUILD --prefix P` installs the node binaries into P/bin, the public headers
# (include/syncline/) into P/include, and the client library with what it links into P/lib,
# with a CMake package in P/lib/cmake/syncline: find_package(syncline CONFIG) then
# target_link_libraries(app PRIVATE syncline::client). examples/embed_client uses it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS syncline-launch syncline-node syncline-ps syncline-worker syncline-gen
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The client and what it links: the core, the job, the codecs, the update rules and the
# checkpoint format (a worker's part of a checkpoint), the job's privacy key (privacy/); no model,
# GPU library or trainer.
set(syncline_installed_libraries syncline_client syncline_job syncline_core syncline_optim
    syncline_compression syncline_checkpoint syncline_privacy)
install(TARGETS ${syncline_installed_libraries}
        EXPORT synclineTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/syncline DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT synclineTargets NAMESPACE syncline::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/syncline)
configure_package_config_file(cmake/synclineConfig.cmake.in
  ${CMAKE_BINARY_DIR}/synclineConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/syncline)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/synclineConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ExactVersion)
install(FILES ${CMAKE_BINARY_DIR}/synclineConfig.cmake
              ${CMAKE_BINARY_DIR}/synclineConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/syncline)
