// Grid sizing of the CUDA dispatch (exec/dispatch.hpp), as plain arithmetic on the host.
#include <trickle/exec/dispatch.hpp>

#include <doctest/doctest.h>

#include <initializer_list>

using namespace trickle::exec;

TEST_CASE("size_grid: no more blocks than work, no fewer than one, at most what fits") {
    const device_facts h100{132, 9, 0};
    const tuning t{256, 4, 16};
    CHECK(size_grid(0, t, h100, 8, 16384).blocks == 0);
    CHECK(size_grid(1, t, h100, 8, 16384).blocks == 1);
    CHECK(size_grid(1, t, h100, 8, 16384).threads == 256);
    CHECK(size_grid(5, t, h100, 8, 16384).blocks == 5);
    for (std::size_t tiles : {std::size_t{10}, std::size_t{1000}, std::size_t{1} << 30})
        for (int resident : {0, 1, 2, 8, 32})
            for (std::size_t bytes : {std::size_t{1}, std::size_t{4096}, std::size_t{65536}}) {
                const auto g = size_grid(tiles, t, h100, resident, bytes);
                CHECK(g.blocks >= 1);
                CHECK(g.blocks <= tiles);
                CHECK(g.blocks <= static_cast<unsigned>(132 * (resident < 1 ? 1 : resident)));
            }
}

TEST_CASE("size_grid: blocks per SM are the fewest that keep the bytes-in-flight target") {
    const device_facts h100{132, 9, 0};
    const tuning t{256, 1, 16};
    const std::size_t target = bytes_in_flight_per_sm(h100);
    // A block pass moving a quarter of the target: four blocks per SM.
    CHECK(size_grid(1u << 20, t, h100, 16, target / 4).blocks == 4 * 132);
    // A pass moving more than the target: one block per SM is enough.
    CHECK(size_grid(1u << 20, t, h100, 16, target * 2).blocks == 132);
    // Occupancy caps it.
    CHECK(size_grid(1u << 20, t, h100, 2, 16).blocks == 2 * 132);
}

TEST_CASE("bytes in flight per SM grow with the architecture's bandwidth per SM") {
    CHECK(bytes_in_flight_per_sm({108, 8, 0}) > bytes_in_flight_per_sm({84, 8, 6}));
    CHECK(bytes_in_flight_per_sm({132, 9, 0}) > bytes_in_flight_per_sm({108, 8, 0}));
    CHECK(fits_32bit((std::size_t{1} << 31) - 1));
    CHECK(!fits_32bit(std::size_t{1} << 31));
}
