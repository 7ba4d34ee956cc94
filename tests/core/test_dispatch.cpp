// Grid sizing of the CUDA dispatch (exec/dispatch.hpp), as plain arithmetic on the host.
#include <trickle/exec/dispatch.hpp>

#include <doctest/doctest.h>

#include <initializer_list>

using namespace trickle::exec;

TEST_CASE("size_grid: no more blocks than work, no fewer than one, at most what fits") {
    const device_facts h100{132};
    const tuning t{256, 4, 16};
    CHECK(size_grid(0, t, h100, 8).blocks == 0);
    CHECK(size_grid(1, t, h100, 8).blocks == 1);
    CHECK(size_grid(1, t, h100, 8).threads == 256);
    CHECK(size_grid(5, t, h100, 8).blocks == 5);
    for (std::size_t tiles : {std::size_t{10}, std::size_t{1000}, std::size_t{1} << 30})
        for (int resident : {0, 1, 2, 8, 32}) {
            const auto g = size_grid(tiles, t, h100, resident);
            CHECK(g.blocks >= 1);
            CHECK(g.blocks <= tiles);
            CHECK(g.blocks <= static_cast<unsigned>(132 * (resident < 1 ? 1 : resident)));
        }
}

TEST_CASE("size_grid: every block that fits on every multiprocessor when the work allows") {
    // The H200's profile (exec/dispatch.hpp): fewer blocks than fit left the exchange
    // kernels latency-bound, so a large launch fills each multiprocessor.
    const device_facts h200{132};
    const tuning t{256, 1, 16};
    CHECK(size_grid(1u << 20, t, h200, 8).blocks == 8 * 132);
    CHECK(size_grid(1u << 20, t, h200, 4).blocks == 4 * 132);
    CHECK(size_grid(1u << 20, t, h200, 0).blocks == 132);
    // A launch with fewer units than that gets a block per unit.
    CHECK(size_grid(700, t, h200, 8).blocks == 700);
    const device_facts a100{108};
    CHECK(size_grid(1u << 20, t, a100, 6).blocks == 6 * 108);
    CHECK(fits_32bit((std::size_t{1} << 31) - 1));
    CHECK(!fits_32bit(std::size_t{1} << 31));
}
