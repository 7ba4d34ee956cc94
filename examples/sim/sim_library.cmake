# examples/sim/sim_library.cmake: the trickle_sim header library (the simulator's trainer), shared by trickle-sim and tests/sim.
# Included from both directories; whichever comes first defines the target.
if(NOT TARGET trickle_sim)
    add_library(trickle_sim INTERFACE)
    target_include_directories(trickle_sim INTERFACE ${CMAKE_CURRENT_LIST_DIR})
    target_link_libraries(trickle_sim INTERFACE trickle)
    # The model's matrix products use CBLAS when OpenBLAS (Debian: libopenblas-dev) is
    # found, and the simulator's own blocked loops otherwise.
    set(BLA_VENDOR OpenBLAS)
    find_package(BLAS QUIET)
    find_path(TRICKLE_SIM_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
    if(BLAS_FOUND AND TRICKLE_SIM_CBLAS_INCLUDE_DIR)
        target_include_directories(trickle_sim SYSTEM INTERFACE ${TRICKLE_SIM_CBLAS_INCLUDE_DIR})
        target_link_libraries(trickle_sim INTERFACE ${BLAS_LIBRARIES})
        target_compile_definitions(trickle_sim INTERFACE TRICKLE_SIM_HAVE_CBLAS=1)
        message(STATUS "trickle-sim: matrix products through OpenBLAS (${BLAS_LIBRARIES})")
    else()
        message(STATUS "trickle-sim: OpenBLAS not found; matrix products use built-in blocked loops")
    endif()
endif()
