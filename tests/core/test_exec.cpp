// for_each_index runs one body over every index, in each host execution space.
#include "exec_tests.hpp"

#include <doctest/doctest.h>

using namespace trickle;

TEST_CASE_TEMPLATE_DEFINE("for_each_index covers every index once", Exec, for_each_test) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{255}, std::size_t{100003}}) {
        const auto v = trickle_test::run_iota(Exec{}, n);
        CHECK(v.size() == n);
        CHECK(trickle_test::is_iota(v));
    }
}
TEST_CASE_TEMPLATE_INVOKE(for_each_test, exec::host);
TEST_CASE_TEMPLATE_INVOKE(for_each_test, exec::openmp); // serial where OpenMP is not enabled

TEST_CASE("execution spaces name their memory") {
    static_assert(execution_space<exec::host>);
    static_assert(can_access_v<exec::host, host_space>);
    static_assert(!can_access_v<exec::host, cuda_space>);
    static_assert(execution_space<exec::cuda>); // declared in every build; launching needs nvcc
    static_assert(can_access_v<exec::cuda, cuda_space>);
    CHECK(std::string(exec::host::name) == "host");
}
