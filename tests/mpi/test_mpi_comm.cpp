// comm::mpi under mpirun: sums, identical bits, byte counts, failure modes, agreement, and equality with comm::local.
#include <trickle/algorithm/agreement.hpp>
#include <trickle/comm/local.hpp>
#include <trickle/comm/mpi.hpp>

#include "mpi_test_support.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <mpi.h>

#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

using namespace trickle;
using trickle_mpi_test::contains;
using trickle_mpi_test::gather_all;
using trickle_mpi_test::same_bits_everywhere;
using trickle_mpi_test::still_works;
using trickle_mpi_test::thrown;
using trickle_mpi_test::wavy;
using trickle_mpi_test::whole;

TEST_CASE("mpi: constructing before MPI_Init throws invalid_argument") {
    CHECK(contains(trickle_mpi_test::error_before_init, "comm::mpi: MPI is not initialized"));
}

TEST_CASE("mpi: rank and size come from the communicator; the caller's communicator is untouched") {
    MPI_Comm user = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &user);
    MPI_Comm_set_errhandler(user, MPI_ERRORS_ARE_FATAL);
    {
        comm::mpi c(user);
        CHECK(c.rank() == trickle_mpi_test::world_rank());
        CHECK(c.size() == trickle_mpi_test::world_size());
        CHECK(c.traffic() == traffic_counters{});
        CHECK(still_works(c));
    }
    MPI_Errhandler h = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(user, &h);
    CHECK(h == MPI_ERRORS_ARE_FATAL);
    MPI_Errhandler_free(&h);
    // Still valid after comm::mpi is gone: the destructor freed only its duplicate.
    int size = 0;
    CHECK(MPI_Comm_size(user, &size) == MPI_SUCCESS);
    CHECK(size == trickle_mpi_test::world_size());
    CHECK(MPI_Comm_free(&user) == MPI_SUCCESS);
}

TEST_CASE("mpi: bad constructor arguments throw on every rank") {
    CHECK(contains(thrown<invalid_argument>([] { comm::mpi c(MPI_COMM_NULL); }), "MPI_COMM_NULL"));
    CHECK(contains(thrown<invalid_argument>([] { comm::mpi c(MPI_COMM_WORLD, 0); }),
                   "max_message_elements must be in [1, 2147483647], got 0"));
    CHECK(contains(thrown<invalid_argument>([] { comm::mpi c(MPI_COMM_WORLD, std::size_t{1} << 40); }),
                   "max_message_elements must be in"));
    const int r = trickle_mpi_test::world_rank();
    CHECK(contains(thrown<invalid_argument>([&] { comm::mpi c(MPI_COMM_WORLD, r == 0 ? 8 : 16); }),
                   "max_message_elements differs between ranks (from 8 to 16)"));
}

TEST_CASE("mpi: an MPI error code becomes a comm_error naming the call and MPI's text") {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(MPI_ERR_TRUNCATE, text, &len);
    const std::string msg = thrown<comm_error>([] { detail::check_mpi(MPI_ERR_TRUNCATE, "MPI_Recv(buf)", "f.cpp", 7); });
    CHECK(contains(msg, "MPI call 'MPI_Recv(buf)' failed at f.cpp:7"));
    CHECK(contains(msg, std::string(text, static_cast<std::size_t>(len))));
    CHECK_NOTHROW(detail::check_mpi(MPI_SUCCESS, "MPI_Barrier(c)", "f.cpp", 8));
}

TEST_CASE("mpi all_reduce_sum: correct sums, the same bits on every rank, bytes of the cost model") {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    INFO("rank ", r);
    for (std::size_t n : {0, 1, 2, 3, 5, 7, 1000, 4099}) {
        INFO("n = ", n);
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = wavy(r, i);
        const traffic_counters before = c.traffic();
        c.all_reduce_sum(v.data(), n);
        const traffic_counters d = c.traffic() - before;
        CHECK(d.bytes_sent == detail::all_reduce_bytes(n, sizeof(float), N, r));
        CHECK(d.bytes_received == d.bytes_sent);
        CHECK(d.calls == 1);
        CHECK(same_bits_everywhere(v));
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
            double exact = 0, magnitude = 0;
            for (int q = 0; q < N; ++q) {
                exact += wavy(q, i);
                magnitude += std::fabs(wavy(q, i));
            }
            if (std::fabs(v[i] - exact) > 2e-7 * N * magnitude) ++wrong;
        }
        CHECK(wrong == 0);
        // Over all ranks, a ring all-reduce moves exactly 2 (N-1) n elements.
        std::vector<std::uint64_t> sent{d.bytes_sent};
        std::uint64_t total = 0;
        for (auto b : gather_all(sent)) total += b;
        CHECK(total == 2ull * static_cast<std::uint64_t>(N - 1) * n * sizeof(float));
    }
}

TEST_CASE("mpi: transfers split by max_message_elements give the same results and byte counts") {
    const int r = trickle_mpi_test::world_rank();
    const int N = trickle_mpi_test::world_size();
    INFO("rank ", r);
    for (std::size_t max : {1, 3, 5, 8}) {
        comm::mpi c(MPI_COMM_WORLD, max);
        INFO("max_message_elements = ", max);
        for (std::size_t n : {0, 1, 7, 8, 9, 30, 101}) {
            INFO("n = ", n);
            std::vector<float> v(n);
            for (std::size_t i = 0; i < n; ++i) v[i] = whole(r, i);
            const traffic_counters before = c.traffic();
            c.all_reduce_sum(v.data(), n);
            const traffic_counters d = c.traffic() - before;
            CHECK(d.bytes_sent == detail::all_reduce_bytes(n, sizeof(float), N, r));
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < n; ++i) {
                float exact = 0;
                for (int q = 0; q < N; ++q) exact += whole(q, i);
                wrong += v[i] != exact;
            }
            CHECK(wrong == 0);
            CHECK(same_bits_everywhere(v));
        }
        // A ring shift of 11 and a broadcast of 13 elements, in pieces.
        const int right = (r + 1) % N, left = (r + N - 1) % N;
        std::vector<float> mine(11), got(11, -1.0f);
        for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = whole(r, i);
        c.send_recv(mine.data(), mine.size(), right, got.data(), got.size(), left);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != whole(left, i);
        CHECK(wrong == 0);
        std::vector<float> b(13);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = whole(r, i);
        c.broadcast(b.data(), b.size(), N - 1);
        wrong = 0;
        for (std::size_t i = 0; i < b.size(); ++i) wrong += b[i] != whole(N - 1, i);
        CHECK(wrong == 0);
    }
}

TEST_CASE("mpi send_recv: ring shifts both ways, with a different count on each rank") {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    INFO("rank ", r);
    const int right = (r + 1) % N, left = (r + N - 1) % N;
    // Rank q sends q + 1 elements to its right neighbour.
    std::vector<float> mine(static_cast<std::size_t>(r) + 1);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = whole(r, i);
    std::vector<float> from_left(static_cast<std::size_t>(left) + 1, -1.0f);
    traffic_counters before = c.traffic();
    c.send_recv(mine.data(), mine.size(), right, from_left.data(), from_left.size(), left);
    traffic_counters d = c.traffic() - before;
    CHECK(d.bytes_sent == mine.size() * sizeof(float));
    CHECK(d.bytes_received == from_left.size() * sizeof(float));
    CHECK(d.calls == 1);
    for (std::size_t i = 0; i < from_left.size(); ++i) CHECK(from_left[i] == whole(left, i));

    // The other way round, with every count the same.
    std::vector<float> three(3, static_cast<float>(r)), from_right(3);
    c.send_recv(three.data(), 3, left, from_right.data(), 3, right);
    CHECK(from_right == std::vector<float>(3, static_cast<float>(right)));

    // To myself, and nothing at all.
    std::vector<float> self(4);
    c.send_recv(three.data(), 3, r, self.data(), 3, r);
    CHECK(self[2] == static_cast<float>(r));
    before = c.traffic();
    c.send_recv(nullptr, 0, right, nullptr, 0, left);
    d = c.traffic() - before;
    CHECK(d == traffic_counters{0, 0, 1});
}

TEST_CASE("mpi broadcast: from every root, with the bytes of the cost model") {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    INFO("rank ", r);
    for (int root = 0; root < N; ++root) {
        std::vector<float> v(7);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = wavy(r, i);
        const traffic_counters before = c.traffic();
        c.broadcast(v.data(), v.size(), root);
        const traffic_counters d = c.traffic() - before;
        for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == wavy(root, i));
        if (r == root) {
            CHECK(d == traffic_counters{static_cast<std::uint64_t>(N - 1) * 7 * 4, 0, 1});
        } else {
            CHECK(d == traffic_counters{0, 7 * 4, 1});
        }
    }
    std::vector<float> none;
    CHECK_NOTHROW(c.broadcast(none.data(), 0, 0));
}

TEST_CASE("mpi all_gather_bytes: every rank's bytes in rank order") {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    INFO("rank ", r);
    struct record {
        std::int32_t rank;
        char tag[6];
        double x;
    };
    const record mine{r, {'t', 'r', 'k', static_cast<char>('0' + r % 10), 0, 0}, 0.5 * r};
    std::vector<record> all(static_cast<std::size_t>(N));
    const traffic_counters before = c.traffic();
    c.all_gather_bytes(&mine, all.data(), sizeof mine);
    const traffic_counters d = c.traffic() - before;
    for (int q = 0; q < N; ++q) {
        CHECK(all[static_cast<std::size_t>(q)].rank == q);
        CHECK(all[static_cast<std::size_t>(q)].tag[3] == '0' + q % 10);
        CHECK(all[static_cast<std::size_t>(q)].x == 0.5 * q);
    }
    CHECK(d == traffic_counters{static_cast<std::uint64_t>(N - 1) * sizeof mine,
                                static_cast<std::uint64_t>(N - 1) * sizeof mine, 1});
    CHECK_NOTHROW(c.all_gather_bytes(nullptr, nullptr, 0));
    CHECK(c.traffic().calls == before.calls + 2);
}

TEST_CASE("mpi all_gather and all_to_all: blocks where their definition puts them, bytes of the cost model") {
    comm::mpi c;
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{65536}}) {
        INFO("bytes = ", bytes, ", rank ", c.rank());
        CHECK(trickle_test::check_byte_collectives(c, bytes) == std::string());
    }
    std::vector<unsigned char> s(64), d(64);
    const std::string e = thrown<comm_error>([&] { c.all_to_all(s.data(), d.data(), c.rank() == 0 ? 3 : 4); });
    CHECK(e.find("comm::mpi all_to_all: ranks passed different sizes (from 3 to 4 bytes)") != std::string::npos);
    const std::string n = thrown<invalid_argument>([&] { c.all_gather(c.rank() == 0 ? nullptr : s.data(), d.data(), 4); });
    CHECK(n.find("comm::mpi all_gather: rank 0 passed a null pointer") != std::string::npos);
}

TEST_CASE("mpi: mismatched arguments throw on every rank, change nothing, and leave the communicator usable") {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    INFO("rank ", r);
    REQUIRE(N >= 2);
    const traffic_counters start = c.traffic();

    SUBCASE("all_reduce_sum with different counts") {
        std::vector<float> v(r == 1 ? 5 : 4, 1.0f);
        const auto copy = v;
        const std::string e = thrown<comm_error>([&] { c.all_reduce_sum(v.data(), v.size()); });
        CHECK(contains(e, "all_reduce_sum: ranks passed different element counts (from 4 to 5)"));
        CHECK(contains(e, detail::concat("rank ", r, " passed ", copy.size())));
        CHECK(v == copy);
    }
    SUBCASE("all_reduce_sum with a null pointer on one rank") {
        std::vector<float> v(4, 1.0f);
        const std::string e =
            thrown<invalid_argument>([&] { c.all_reduce_sum(r == N - 1 ? nullptr : v.data(), v.size()); });
        CHECK(contains(e, detail::concat("rank ", N - 1, " passed a null pointer")));
        CHECK(v == std::vector<float>(4, 1.0f));
    }
    SUBCASE("all_gather_bytes with different sizes") {
        std::vector<char> send(r == 0 ? 3 : 2, 'x'), recv(3 * static_cast<std::size_t>(N), 'y');
        const std::string e = thrown<comm_error>([&] { c.all_gather_bytes(send.data(), recv.data(), send.size()); });
        CHECK(contains(e, "all_gather_bytes: ranks passed different sizes (from 2 to 3 bytes)"));
        CHECK(recv == std::vector<char>(3 * static_cast<std::size_t>(N), 'y'));
    }
    SUBCASE("broadcast with different roots") {
        std::vector<float> v(3, static_cast<float>(r));
        const std::string e = thrown<comm_error>([&] { c.broadcast(v.data(), 3, r == 0 ? 1 : 0); });
        CHECK(contains(e, "broadcast: ranks passed different sizes or roots"));
        CHECK(v == std::vector<float>(3, static_cast<float>(r)));
    }
    SUBCASE("broadcast with different sizes") {
        std::vector<float> v(4, static_cast<float>(r));
        const std::string e = thrown<comm_error>([&] { c.broadcast(v.data(), r == 1 ? 4 : 3, 0); });
        CHECK(contains(e, "(sizes from 3 to 4)"));
        CHECK(v == std::vector<float>(4, static_cast<float>(r)));
    }
    SUBCASE("broadcast from a root out of range") {
        std::vector<float> v(3, 1.0f);
        CHECK(contains(thrown<invalid_argument>([&] { c.broadcast(v.data(), 3, N); }),
                       detail::concat("root ", N, " out of range [0, ", N, ")")));
    }
    SUBCASE("send_recv whose counts do not pair up") {
        const int right = (r + 1) % N, left = (r + N - 1) % N;
        std::vector<float> mine(3, 1.0f), got(4, -1.0f);
        // Rank 1 expects 4 elements; its left neighbour sends 3.
        const std::string e = thrown<comm_error>(
            [&] { c.send_recv(mine.data(), 3, right, got.data(), r == 1 ? 4 : 3, left); });
        CHECK(contains(e, "do not pair up: rank 1 expects 4 elements from rank 0, which sends 3 to rank 1"));
        CHECK(got == std::vector<float>(4, -1.0f));
    }
    SUBCASE("send_recv whose peers do not pair up") {
        // Everyone sends right; rank 0 receives from itself instead of its left neighbour.
        const int right = (r + 1) % N, left = (r + N - 1) % N;
        std::vector<float> mine(2, 1.0f), got(2, -1.0f);
        const std::string e = thrown<comm_error>(
            [&] { c.send_recv(mine.data(), 2, right, got.data(), 2, r == 0 ? 0 : left); });
        CHECK(contains(e, "rank 0 expects 2 elements from rank 0, which sends 2 to rank 1"));
        CHECK(got == std::vector<float>(2, -1.0f));
    }
    SUBCASE("send_recv with a peer out of range or a null pointer") {
        std::vector<float> mine(2, 1.0f), got(2, -1.0f);
        CHECK(contains(thrown<invalid_argument>([&] { c.send_recv(mine.data(), 2, r == 2 % N ? -1 : r, got.data(), 2, r); }),
                       detail::concat("rank ", 2 % N, " passed a peer out of range (dst -1, src ", 2 % N)));
        CHECK(contains(
            thrown<invalid_argument>([&] { c.send_recv(r == 1 ? nullptr : mine.data(), 2, r, got.data(), 2, r); }),
            "rank 1 passed a null pointer with a nonzero count"));
        CHECK(got == std::vector<float>(2, -1.0f));
    }
    CHECK(c.traffic() == start);
    CHECK(still_works(c));
}

TEST_CASE("mpi: a moved-from communicator refuses work; the moved-to one works") {
    comm::mpi a;
    comm::mpi b(std::move(a));
    std::vector<float> v(2, 1.0f);
    CHECK(contains(thrown<invalid_argument>([&] { a.all_reduce_sum(v.data(), 2); }), "moved from"));
    CHECK(contains(thrown<invalid_argument>([&] { a.barrier(); }), "moved from"));
    CHECK(still_works(b));
    comm::mpi d(MPI_COMM_WORLD, 4);
    d = std::move(b);
    CHECK(still_works(d));
    CHECK(d.traffic().calls == 2); // b's counters moved with it
    CHECK_NOTHROW(d.barrier());
}

namespace {
config_record sparta_record(double fraction, int seed, const std::string& err = "") {
    config_record rec("sparta");
    rec.add("fraction", fraction).add("seed", seed).add("layout", "a:10,b:5");
    if (!err.empty()) rec.set_error(err);
    return rec;
}
} // namespace

TEST_CASE("mpi: agree() passes on equal configurations and throws on every rank otherwise") {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    INFO("rank ", r);
    REQUIRE(N >= 2);
    CHECK_NOTHROW(agree(c, sparta_record(0.005, 42)));

    const std::string mismatch =
        thrown<mismatch_error>([&] { agree(c, sparta_record(r == N - 1 ? 0.01 : 0.005, 42)); });
    CHECK(contains(mismatch, "workers disagree on the sparta configuration"));
    CHECK(contains(mismatch, detail::concat("fraction: rank 0 has 0.005, rank ", N - 1, " has 0.01")));
    CHECK(!contains(mismatch, "seed"));

    // Records of different lengths on different ranks.
    const std::string longer = thrown<mismatch_error>([&] {
        config_record rec("sparta");
        rec.add("seed", 1);
        if (r == 1) rec.add("outer_lr", 0.7);
        agree(c, rec);
    });
    CHECK(contains(longer, "outer_lr: rank 1 has 0.7, rank 0 does not set it"));

    const std::string invalid = thrown<invalid_argument>(
        [&] { agree(c, sparta_record(0.005, 42, r == 1 ? "fraction must be in (0, 1], got 1.5" : "")); });
    CHECK(invalid == "rank 1: fraction must be in (0, 1], got 1.5");
    CHECK(still_works(c));
}

namespace {

// What one rank saw in a fixed sequence of operations: compared between comm::mpi and comm::local.
struct outcome {
    std::vector<float> wavy_sum;  // may round differently in another addition order
    std::vector<float> exact;     // results that must match bit for bit
    std::vector<unsigned char> gathered;
    std::array<std::uint64_t, 3> traffic{};
};

constexpr std::size_t wavy_n = 1001, whole_n = 37, ring_n = 6, bcast_n = 9, gather_b = 12;

template <class Comm>
outcome run_sequence(Comm& c) {
    const int N = c.size(), r = c.rank();
    outcome o;
    o.wavy_sum.resize(wavy_n);
    for (std::size_t i = 0; i < wavy_n; ++i) o.wavy_sum[i] = wavy(r, i);
    c.all_reduce_sum(o.wavy_sum.data(), wavy_n);

    std::vector<float> sum(whole_n), ring(ring_n), got(ring_n), bc(bcast_n);
    for (std::size_t i = 0; i < whole_n; ++i) sum[i] = whole(r, i) * 0.25f;
    c.all_reduce_sum(sum.data(), whole_n);
    for (std::size_t i = 0; i < ring_n; ++i) ring[i] = whole(r, i);
    c.send_recv(ring.data(), ring_n, (r + 1) % N, got.data(), ring_n, (r + N - 1) % N);
    for (std::size_t i = 0; i < bcast_n; ++i) bc[i] = wavy(r, i);
    c.broadcast(bc.data(), bcast_n, N - 1);
    for (auto* part : {&sum, &got, &bc}) o.exact.insert(o.exact.end(), part->begin(), part->end());

    std::vector<unsigned char> mine(gather_b);
    for (std::size_t i = 0; i < gather_b; ++i) mine[i] = static_cast<unsigned char>(r * 16 + i);
    o.gathered.resize(gather_b * static_cast<std::size_t>(N));
    c.all_gather_bytes(mine.data(), o.gathered.data(), gather_b);
    c.barrier();
    const traffic_counters t = c.traffic();
    o.traffic = {t.bytes_sent, t.bytes_received, t.calls};
    return o;
}

// Concatenates one field of every rank's outcome.
template <class T>
std::vector<T> flatten(const std::vector<outcome>& all, std::vector<T> outcome::*field) {
    std::vector<T> out;
    for (const auto& o : all) out.insert(out.end(), (o.*field).begin(), (o.*field).end());
    return out;
}

} // namespace

TEST_CASE("mpi: the same results and byte counts as comm::local for the same inputs") {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    INFO("rank ", r);
    const outcome mine = run_sequence(c);

    // Rank 0 plays all N workers as threads for the reference and sends it to everyone.
    std::vector<float> ref_wavy, ref_exact;
    std::vector<unsigned char> ref_gathered;
    std::vector<std::uint64_t> ref_traffic;
    if (r == 0) {
        std::vector<outcome> local(static_cast<std::size_t>(N));
        comm::run_local(N, [&](comm::local& l) { local[static_cast<std::size_t>(l.rank())] = run_sequence(l); });
        ref_wavy = flatten(local, &outcome::wavy_sum);
        ref_exact = flatten(local, &outcome::exact);
        ref_gathered = flatten(local, &outcome::gathered);
        for (const auto& o : local) ref_traffic.insert(ref_traffic.end(), o.traffic.begin(), o.traffic.end());
    }
    trickle_mpi_test::broadcast_from_0(ref_wavy);
    trickle_mpi_test::broadcast_from_0(ref_exact);
    trickle_mpi_test::broadcast_from_0(ref_gathered);
    trickle_mpi_test::broadcast_from_0(ref_traffic);

    const auto R = static_cast<std::size_t>(r);
    const std::size_t ne = mine.exact.size(), ng = mine.gathered.size();
    REQUIRE(ref_exact.size() == ne * static_cast<std::size_t>(N));
    CHECK(std::memcmp(mine.exact.data(), ref_exact.data() + R * ne, ne * sizeof(float)) == 0);
    CHECK(std::memcmp(mine.gathered.data(), ref_gathered.data() + R * ng, ng) == 0);
    for (std::size_t k = 0; k < 3; ++k) CHECK(mine.traffic[k] == ref_traffic[R * 3 + k]);
    // comm::local adds in rank order; MPI may add in another order, so allow rounding.
    std::size_t far = 0;
    for (std::size_t i = 0; i < wavy_n; ++i) {
        const float a = mine.wavy_sum[i], b = ref_wavy[R * wavy_n + i];
        if (std::fabs(a - b) > 4e-7f * N * (std::fabs(b) + 1.0f)) ++far;
    }
    CHECK(far == 0);
}

TEST_CASE("mpi through comm::async: overlapped all-reduces and shifts give the blocking bits and bytes") {
    comm::mpi c(MPI_COMM_WORLD);
    if (!c.thread_level_ok()) {
        MESSAGE("skipped: MPI was initialized below MPI_THREAD_SERIALIZED");
        return;
    }
    const auto o = trickle_mpi_test::run_async_against_blocking(c, 1003, 77, 5, [] {
        double busy = 0;
        for (int k = 0; k < 100000; ++k) busy += std::sqrt(static_cast<double>(k));
        CHECK(busy > 0);
    });
    CHECK(o.same_sums);
    CHECK(o.same_shifted);
    CHECK(o.same_traffic);
    CHECK(still_works(c));
}
