// buffer: aligned, zeroed, move-only storage in a memory space.
#include <trickle/exec/buffer.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <utility>

using namespace trickle;

TEST_CASE("buffer: host allocation is aligned and zeroed") {
    buffer<float> b(1000);
    CHECK(b.size() == 1000);
    CHECK(b.size_bytes() == 4000);
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % buffer<float>::alignment == 0);
    bool zero = true;
    for (std::size_t i = 0; i < b.size(); ++i) zero = zero && b.data()[i] == 0.0f;
    CHECK(zero);
    CHECK(b.view().size() == 1000);
}

TEST_CASE("buffer: move transfers ownership") {
    buffer<int> a(5);
    a.data()[2] = 7;
    buffer<int> b(std::move(a));
    CHECK(a.empty());
    CHECK(a.data() == nullptr);
    CHECK(b.data()[2] == 7);
    buffer<int> c;
    c = std::move(b);
    CHECK(c.data()[2] == 7);
    CHECK(buffer<int>(0).data() == nullptr);
}

TEST_CASE("buffer: bad requests") {
    CHECK_THROWS_AS(buffer<double>(static_cast<std::size_t>(-1) / 4), invalid_argument);
#if !TRICKLE_HAS_CUDA
    CHECK_THROWS_WITH_AS((buffer<float, cuda_space>(4)), doctest::Contains("no CUDA runtime"), invalid_argument);
    CHECK_THROWS_WITH_AS(buffer<float>(4, host_alloc::pinned), doctest::Contains("pinned"), invalid_argument);
#endif
}

TEST_CASE("copy_elements between host buffers") {
    buffer<float> a(3), b(3);
    a.data()[0] = 1;
    a.data()[2] = 3;
    copy_elements<host_space, host_space>(b.data(), a.data(), 3);
    CHECK(b.data()[0] == 1);
    CHECK(b.data()[2] == 3);
}
