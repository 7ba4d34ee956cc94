# Runs the quick start with 4 threads and with 4 MPI processes and checks that both print
# the same result line (the checksum to fp32 rounding, the bytes exactly).
execute_process(COMMAND ${THREADS} OUTPUT_VARIABLE a RESULT_VARIABLE rc_a)
execute_process(COMMAND ${MPIEXEC} ${MPIFLAGS} -np 4 ${MPI_APP} OUTPUT_VARIABLE b RESULT_VARIABLE rc_b)
if(rc_a OR rc_b)
    message(FATAL_ERROR "quickstart failed: threads ${rc_a}, mpi ${rc_b}\n${a}\n${b}")
endif()
string(REGEX MATCH "rank0_checksum=([-0-9.e+]+) bytes_sent=([0-9]+)" _ "${a}")
set(ca ${CMAKE_MATCH_1})
set(ba ${CMAKE_MATCH_2})
string(REGEX MATCH "rank0_checksum=([-0-9.e+]+) bytes_sent=([0-9]+)" _ "${b}")
set(cb ${CMAKE_MATCH_1})
set(bb ${CMAKE_MATCH_2})
if(NOT ba STREQUAL bb)
    message(FATAL_ERROR "bytes differ: threads ${ba}, mpi ${bb}")
endif()
# CMake has no floating point: compare the checksums with a relative tolerance in Python.
execute_process(COMMAND python3 -c "import sys; a,b=float('${ca}'),float('${cb}'); sys.exit(0 if abs(a-b) <= 1e-5*max(1.0,abs(a)) else 1)"
                RESULT_VARIABLE rc_c)
if(rc_c)
    message(FATAL_ERROR "checksums differ: threads ${ca}, mpi ${cb}")
endif()
message(STATUS "threads and MPI agree: checksum ${ca} / ${cb}, ${ba} bytes")
