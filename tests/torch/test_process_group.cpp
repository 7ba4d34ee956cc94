// comm::process_group over Gloo: the same bits, bytes and errors as comm::local.
#include "torch_support.hpp"

#include <trickle/comm/local.hpp>

#include <doctest/doctest.h>
#include <test_support.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace trickle;
using trickle_test::mixed;
using trickle_torch_test::require_all;
using trickle_torch_test::require_ok;
using trickle_torch_test::run_gloo;

namespace {

std::vector<float> inputs(int r, std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = mixed(r, i);
    return v;
}

// The ring's sums, written out: chunk q (the even split) adds rank q+1's value first, then
// q+2's, ..., rank q's last.
std::vector<float> ring_sum(int N, std::size_t n) {
    std::vector<std::vector<float>> v;
    for (int r = 0; r < N; ++r) v.push_back(inputs(r, n));
    std::vector<float> out(n);
    for (int q = 0; q < N; ++q)
        for (std::size_t i = trickle::detail::chunk_begin(n, N, q); i < trickle::detail::chunk_begin(n, N, q) + trickle::detail::chunk_size(n, N, q);
             ++i) {
            float acc = v[static_cast<std::size_t>((q + 1) % N)][i];
            for (int s = 2; s <= N; ++s) acc += v[static_cast<std::size_t>((q + s) % N)][i];
            out[i] = acc;
        }
    return out;
}

} // namespace

TEST_CASE("process_group all_reduce_sum: the same bits on every rank, by one all-gather, by chunks (comm::local's) "
          "or round the pipelined ring (ring order), under either argument check") {
    // gather_extra_bytes 0: chunks for N >= 3; 1 MiB: one all-gather for all these sizes;
    // ring_min_bytes 0: the ring for N >= 3 where it does not gather; segments of 7 values:
    // many segments per step, and ragged ones.
    constexpr std::size_t never = SIZE_MAX;
    for (const comm::process_group_options o :
         {comm::process_group_options{.ring_min_bytes = never},
          comm::process_group_options{.gather_extra_bytes = 0, .ring_min_bytes = never},
          comm::process_group_options{.gather_extra_bytes = 0, .ring_min_bytes = 0},
          comm::process_group_options{.gather_extra_bytes = 0, .ring_min_bytes = 0, .ring_segment_bytes = 28},
          comm::process_group_options{.checks = comm::argument_checks::in_payload, .gather_extra_bytes = 0,
                                      .ring_min_bytes = never},
          comm::process_group_options{.checks = comm::argument_checks::in_payload, .gather_extra_bytes = 0,
                                      .ring_min_bytes = 0, .ring_segment_bytes = 28},
          comm::process_group_options{.checks = comm::argument_checks::in_payload, .gather_extra_bytes = 1 << 20}}) {
        for (int N : {1, 2, 3, 4}) {
            for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1001}, std::size_t{20000}}) {
                std::vector<std::vector<float>> ref(static_cast<std::size_t>(N)), got(static_cast<std::size_t>(N));
                std::vector<std::uint64_t> want(static_cast<std::size_t>(N)), want_in(static_cast<std::size_t>(N));
                std::vector<traffic_counters> got_t(static_cast<std::size_t>(N));
                std::vector<std::uint64_t> collectives(static_cast<std::size_t>(N));
                std::vector<int> gathered(static_cast<std::size_t>(N)), in_ring(static_cast<std::size_t>(N));
                comm::run_local(N, [&](comm::local& c) {
                    auto v = inputs(c.rank(), n);
                    c.all_reduce_sum(v.data(), n);
                    ref[static_cast<std::size_t>(c.rank())] = v;
                });
                const auto errors = run_gloo(
                    N,
                    [&](comm::process_group& c) {
                        auto v = inputs(c.rank(), n);
                        c.all_reduce_sum(v.data(), n);
                        const auto r = static_cast<std::size_t>(c.rank());
                        got[r] = v;
                        got_t[r] = c.traffic();
                        want[r] = want_in[r] = trickle_torch_test::all_reduce_bytes(c, n);
                        collectives[r] = c.collectives();
                        gathered[r] = c.all_reduce_gathers(n) ? 1 : 0;
                        in_ring[r] = c.all_reduce_in_ring(n) ? 1 : 0;
                        if (in_ring[r]) {
                            const auto b = trickle::detail::ring_all_reduce_bytes(n, sizeof(float), N, c.rank());
                            want[r] = b.sent;
                            want_in[r] = b.received;
                        }
                    },
                    o);
                require_ok(errors);
                for (int r = 0; r < N; ++r) {
                    const auto q = static_cast<std::size_t>(r);
                    INFO("N = ", N, ", n = ", n, ", rank ", r, ", gather_extra_bytes ", o.gather_extra_bytes,
                         ", ring_min_bytes ", o.ring_min_bytes, ", segment ", o.ring_segment_bytes, ", in_payload ",
                         o.checks == comm::argument_checks::in_payload);
                    CHECK(trickle_test::bitwise_equal(got[q], in_ring[q] ? ring_sum(N, n) : ref[q]));
                    CHECK(got_t[q].bytes_sent == want[q]);
                    CHECK(got_t[q].bytes_received == want_in[q]);
                    CHECK(got_t[q].calls == 1);
                    // The collectives on the wire: an argument check (under collective checks),
                    // then one all-gather, two all-to-alls, or the ring's header all-gather and
                    // 2 (N-1) steps; none for nothing to move.
                    const unsigned check = N > 1 && o.checks == comm::argument_checks::collective ? 1u : 0u;
                    const unsigned moves = N == 1 || n == 0 ? 0u
                                           : gathered[q]    ? 1u
                                           : in_ring[q]     ? 1u + 2u * static_cast<unsigned>(N - 1)
                                                            : 2u;
                    CHECK(collectives[q] == check + moves);
                    CHECK(in_ring[q] == (N >= 3 && n != 0 && !gathered[q] && o.ring_min_bytes == 0 ? 1 : 0));
                }
                // (N - 1)(N - 2) 4n / N more bytes: 2,669 for N = 3 and n = 1001, within the default
                // 4 KiB; 6,006 for N = 4, past it.
                if (N == 3 && n == 1001) CHECK(gathered[0] == (o.gather_extra_bytes != 0));
                if (N == 4 && n == 1001)
                    CHECK(gathered[0] == (o.gather_extra_bytes >= 6006 ? 1 : 0));
                if (N == 4 && n == 20000 && o.gather_extra_bytes == comm::process_group_options{}.gather_extra_bytes)
                    CHECK(gathered[0] == 0);
                if (N == 2 && n != 0) CHECK(gathered[0] == 1); // two ranks: the all-gather sends no more
                // Past gather_max_bytes (1 MiB), even two ranks take the chunks.
                if (N == 2 && n == 20000) {
                    comm::process_group_options big = o;
                    big.gather_max_bytes = 4 * 20000 - 1;
                    require_ok(run_gloo(2, [&](comm::process_group& c) {
                        if (c.all_reduce_gathers(20000)) throw std::logic_error("gathers past gather_max_bytes");
                        auto v = inputs(c.rank(), 20000);
                        c.all_reduce_sum(v.data(), 20000);
                        if (!trickle_test::bitwise_equal(v, ref[static_cast<std::size_t>(c.rank())]))
                            throw std::logic_error("chunks: other bits");
                    }, big));
                }
            }
        }
    }
}

TEST_CASE("process_group broadcast, all_gather_bytes, send_recv and barrier") {
    const int N = 3;
    const auto errors = run_gloo(N, [&](comm::process_group& c) {
        const int r = c.rank();
        std::vector<float> b = inputs(r, 77);
        c.broadcast(b.data(), b.size(), 1);
        if (!trickle_test::bitwise_equal(b, inputs(1, 77))) throw std::logic_error("broadcast");
        const std::uint64_t mine = 100u + static_cast<std::uint64_t>(r);
        std::vector<std::uint64_t> all(N);
        c.all_gather_bytes(&mine, all.data(), sizeof mine);
        for (int q = 0; q < N; ++q)
            if (all[static_cast<std::size_t>(q)] != 100u + static_cast<std::uint64_t>(q)) throw std::logic_error("gather");
        // A ring: send to the next rank, receive from the previous one.
        const std::vector<float> send = inputs(r, 10);
        std::vector<float> recv(10);
        c.send_recv(send.data(), 10, (r + 1) % N, recv.data(), 10, (r + N - 1) % N);
        if (!trickle_test::bitwise_equal(recv, inputs((r + N - 1) % N, 10))) throw std::logic_error("send_recv");
        c.barrier();
        const traffic_counters t = c.traffic();
        const std::uint64_t bcast = r == 1 ? 2u * 77 * 4 : 0u;
        if (t.bytes_sent != bcast + 2 * sizeof mine + 40) throw std::logic_error("traffic sent");
        if (t.calls != 3) throw std::logic_error("traffic calls");
    });
    require_ok(errors);
}

TEST_CASE("process_group all_gather and all_to_all: blocks where their definition puts them, bytes of the cost model") {
    for (int N : {1, 3})
        for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4099}})
            require_ok(run_gloo(N, [&](comm::process_group& c) {
                const std::string bad = trickle_test::check_byte_collectives(c, bytes);
                if (!bad.empty()) throw std::logic_error(bad);
            }));
    require_all(run_gloo(3,
                         [&](comm::process_group& c) {
                             std::vector<unsigned char> s(30), d(30);
                             c.all_to_all(s.data(), d.data(), c.rank() == 0 ? 9 : 10);
                         }),
                "comm::process_group all_to_all: ranks passed different sizes (from 9 to 10 bytes)");
}

TEST_CASE("process_group: bad arguments throw on every rank, without a hang, and move nothing") {
    const int N = 3;
    SUBCASE("different element counts") {
        const auto errors = run_gloo(N, [&](comm::process_group& c) {
            std::vector<float> v(10, 1.0f);
            c.all_reduce_sum(v.data(), c.rank() == 2 ? 9 : 10);
        });
        require_all(errors, "ranks passed different element counts (from 9 to 10)");
    }
    SUBCASE("a null pointer") {
        const auto errors = run_gloo(N, [&](comm::process_group& c) {
            std::vector<float> v(10, 1.0f);
            c.all_reduce_sum(c.rank() == 1 ? nullptr : v.data(), 10);
        });
        require_all(errors, "rank 1 passed a null pointer");
    }
    SUBCASE("different broadcast roots") {
        const auto errors = run_gloo(N, [&](comm::process_group& c) {
            std::vector<float> v(4, 1.0f);
            c.broadcast(v.data(), 4, c.rank() == 0 ? 1 : 0);
        });
        require_all(errors, "different sizes or roots");
    }
    SUBCASE("sends and receives that do not pair up") {
        const auto errors = run_gloo(N, [&](comm::process_group& c) {
            std::vector<float> s(4, 1.0f), d(4);
            c.send_recv(s.data(), 4, (c.rank() + 1) % N, d.data(), c.rank() == 0 ? 3 : 4, (c.rank() + N - 1) % N);
        });
        require_all(errors, "do not pair up");
    }
    SUBCASE("the state is unchanged after a refused call") {
        const auto errors = run_gloo(N, [&](comm::process_group& c) {
            std::vector<float> v = inputs(c.rank(), 10);
            try {
                c.all_reduce_sum(v.data(), c.rank() == 0 ? 8 : 10);
            } catch (const comm_error&) {
            }
            if (!trickle_test::bitwise_equal(v, inputs(c.rank(), 10))) throw std::logic_error("data changed");
            if (c.traffic().calls != 0) throw std::logic_error("a refused call was counted");
        });
        require_ok(errors);
    }
}

TEST_CASE("process_group, argument checks in the payload: ranks in different calls, or a null pointer, throw on every "
          "rank in the same collective, and move nothing") {
    const int N = 3;
    const comm::process_group_options o{.checks = comm::argument_checks::in_payload};
    SUBCASE("one rank in another collective of the same size") {
        // all_reduce_sum of 10 floats and all_gather_bytes of 40 bytes travel in blocks of one size.
        const auto errors = run_gloo(
            N,
            [&](comm::process_group& c) {
                std::vector<float> v = inputs(c.rank(), 10);
                std::vector<unsigned char> all(3 * 40);
                try {
                    if (c.rank() == 1)
                        c.all_gather_bytes(v.data(), all.data(), 40);
                    else
                        c.all_reduce_sum(v.data(), 10);
                } catch (const comm_error&) {
                    if (!trickle_test::bitwise_equal(v, inputs(c.rank(), 10))) throw std::logic_error("data changed");
                    if (c.traffic().calls != 0) throw std::logic_error("a refused call was counted");
                    throw;
                }
            },
            o);
        require_all(errors, "the ranks are not in the same call: rank 0 is in its collective 0 (all_reduce_sum of 10 "
                            "elements), rank 1 in its collective 0 (all_gather_bytes of 40 bytes)");
    }
    SUBCASE("one rank a call behind") {
        const auto errors = run_gloo(
            N,
            [&](comm::process_group& c) {
                std::vector<float> v(10, 1.0f);
                // Ranks 0 and 1 make a collective rank 2 skips: one of zero bytes, which moves
                // nothing (a skipped collective that moved data would leave the backend itself
                // waiting for the missing rank), but counts in their sequence.
                if (c.rank() != 2) c.all_gather(nullptr, nullptr, 0);
                c.all_reduce_sum(v.data(), 10);
            },
            o);
        require_all(errors, "rank 0 is in its collective 1 (all_reduce_sum of 10 elements), rank 2 in its collective 0 "
                            "(all_reduce_sum of 10 elements)");
    }
    SUBCASE("a null pointer, by the gather and by the chunks") {
        for (std::size_t extra : {std::size_t{64 * 1024}, std::size_t{0}}) {
            const auto errors = run_gloo(
                N,
                [&](comm::process_group& c) {
                    std::vector<float> v = inputs(c.rank(), 10);
                    try {
                        c.all_reduce_sum(c.rank() == 1 ? nullptr : v.data(), 10);
                    } catch (const invalid_argument&) {
                        if (!trickle_test::bitwise_equal(v, inputs(c.rank(), 10))) throw std::logic_error("data changed");
                        throw;
                    }
                },
                comm::process_group_options{.checks = comm::argument_checks::in_payload, .gather_extra_bytes = extra});
            require_all(errors, "rank 1 passed a null pointer");
        }
    }
    SUBCASE("the byte collectives") {
        for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4099}})
            require_ok(run_gloo(
                N,
                [&](comm::process_group& c) {
                    const std::string bad = trickle_test::check_byte_collectives(c, bytes);
                    if (!bad.empty()) throw std::logic_error(bad);
                    // all_gather and all_to_all: one collective each, no check of their own.
                    if (bytes != 0 && c.collectives() == 0) throw std::logic_error("no collective counted");
                },
                o));
        const auto errors = run_gloo(
            N,
            [&](comm::process_group& c) {
                std::vector<unsigned char> s(30), d(30);
                c.all_to_all(c.rank() == 2 ? nullptr : s.data(), d.data(), 10);
            },
            o);
        require_all(errors, "rank 2 passed a null pointer");
    }
}
