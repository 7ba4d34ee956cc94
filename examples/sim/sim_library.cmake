# examples/sim/sim_library.cmake: the trickle_sim library (the simulator's trainer), shared by trickle-sim and tests/sim.
# Included from both directories; whichever comes first defines the target. The trainer is
# headers; the strategies_*.cpp hold the instantiations of trickle's algorithms for
# every policy combination, compiled once here rather than in every includer.
if(NOT TARGET trickle_sim)
    add_library(trickle_sim STATIC
        ${CMAKE_CURRENT_LIST_DIR}/strategies_sparta.cpp
        ${CMAKE_CURRENT_LIST_DIR}/strategies_diloco.cpp
        ${CMAKE_CURRENT_LIST_DIR}/strategies_sparta_diloco.cpp
        ${CMAKE_CURRENT_LIST_DIR}/strategies_overlap.cpp
        ${CMAKE_CURRENT_LIST_DIR}/strategies_sparta_diloco_overlap.cpp
        ${CMAKE_CURRENT_LIST_DIR}/strategies_elastic.cpp
        ${CMAKE_CURRENT_LIST_DIR}/strategies_elastic_sparta_diloco.cpp
        ${CMAKE_CURRENT_LIST_DIR}/strategies_demo.cpp
        ${CMAKE_CURRENT_LIST_DIR}/trainer_elastic.cpp)
    target_include_directories(trickle_sim PUBLIC ${CMAKE_CURRENT_LIST_DIR})
    target_link_libraries(trickle_sim PUBLIC trickle)
    target_compile_options(trickle_sim PRIVATE -Wall -Wextra -Wpedantic ${TRICKLE_WERROR_CXX})
    # The tests that link it are instrumented; so is everything they call.
    if(TRICKLE_SANITIZE)
        target_compile_options(trickle_sim PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                   -fno-sanitize-recover=undefined)
        target_link_options(trickle_sim INTERFACE -fsanitize=address,undefined)
    elseif(TRICKLE_TSAN)
        target_compile_options(trickle_sim PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
        target_link_options(trickle_sim INTERFACE -fsanitize=thread)
    endif()
    # The model's matrix products use CBLAS when OpenBLAS (Debian: libopenblas-dev) is
    # found, and the simulator's own blocked loops otherwise.
    set(BLA_VENDOR OpenBLAS)
    find_package(BLAS QUIET)
    find_path(TRICKLE_SIM_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
    if(BLAS_FOUND AND TRICKLE_SIM_CBLAS_INCLUDE_DIR)
        target_include_directories(trickle_sim SYSTEM PUBLIC ${TRICKLE_SIM_CBLAS_INCLUDE_DIR})
        target_link_libraries(trickle_sim PUBLIC ${BLAS_LIBRARIES})
        target_compile_definitions(trickle_sim PUBLIC TRICKLE_SIM_HAVE_CBLAS=1)
        message(STATUS "trickle-sim: matrix products through OpenBLAS (${BLAS_LIBRARIES})")
    else()
        message(STATUS "trickle-sim: OpenBLAS not found; matrix products use built-in blocked loops")
    endif()
    # The GPT's products and attention split over the cores the workers leave free
    # (examples/sim/gpt.hpp); without OpenMP (or with TRICKLE_ENABLE_OPENMP=OFF, as under
    # ThreadSanitizer) each worker runs on its one thread.
    if(TRICKLE_HAVE_OPENMP AND TARGET OpenMP::OpenMP_CXX)
        target_link_libraries(trickle_sim PUBLIC OpenMP::OpenMP_CXX)
        target_compile_definitions(trickle_sim PUBLIC TRICKLE_SIM_HAVE_OPENMP=1)
    endif()
endif()
