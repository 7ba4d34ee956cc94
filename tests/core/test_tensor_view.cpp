// tensor_view: a trivially copyable pointer + count that never crosses memory spaces.
#include <trickle/core/dtype.hpp>
#include <trickle/core/tensor_view.hpp>

#include <doctest/doctest.h>

#include <type_traits>
#include <vector>

using namespace trickle;

TEST_CASE("tensor_view: basic access") {
    std::vector<float> v{1, 2, 3};
    tensor_view<float> t(v.data(), v.size());
    CHECK(t.size() == 3);
    CHECK(t.size_bytes() == 12);
    CHECK(t[1] == 2.0f);
    t[1] = 5.0f;
    CHECK(v[1] == 5.0f);
    float sum = 0;
    for (float x : t) sum += x;
    CHECK(sum == 9.0f);
    tensor_view<const float> c = t; // adding const is allowed
    CHECK(c.data() == v.data());
    CHECK(tensor_view<float>().empty());
}

TEST_CASE("tensor_view: null pointer with elements is rejected") {
    CHECK_THROWS_AS(tensor_view<float>(nullptr, 4), trickle::invalid_argument);
    CHECK_NOTHROW(tensor_view<float>(nullptr, 0));
}

TEST_CASE("tensor_view: spaces do not convert into each other") {
    static_assert(std::is_trivially_copyable_v<tensor_view<bfloat16, cuda_space>>);
    static_assert(!std::is_convertible_v<tensor_view<float, host_space>, tensor_view<float, cuda_space>>);
    static_assert(!std::is_convertible_v<tensor_view<float, cuda_space>, tensor_view<float, host_space>>);
    static_assert(!std::is_convertible_v<tensor_view<const float>, tensor_view<float>>);
    static_assert(std::is_same_v<host_view<half>::memory_space, host_space>);
    CHECK(true);
}
