// The engines' stages and the public surface they brought: policies given by type in any
// order, a schedule that decides when, the replica state's transactional load, backup and
// rollback, and a plain DiLoCo that compiles without the membership protocol.
//
// This file includes only what a plain DiLoCo and SPARTA over comm::local need (not
// trickle/trickle.hpp), so the last test can check that the membership protocol was not
// compiled in.
#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/algorithm/sparta_diloco.hpp>
#include <trickle/comm/local.hpp>
#include <trickle/topology/ring.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle;

namespace {

// Worker r's parameters after inner step t, before the algorithm's step.
void train(std::vector<float>& w, int r, int t) {
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] += 0.01f * static_cast<float>(std::sin(0.1 * static_cast<double>(i) * (r + 1) + 0.3 * t));
}

// Runs `steps` steps of the algorithm make(group, comm) on `workers` threads and returns
// every worker's parameters.
template <class Make>
std::vector<std::vector<float>> run(int workers, int steps, std::size_t n, Make&& make) {
    std::vector<std::vector<float>> w(static_cast<std::size_t>(workers));
    comm::run_local(workers, [&](comm::local& c) {
        auto& mine = w[static_cast<std::size_t>(c.rank())];
        mine.assign(n, 0.0f);
        for (std::size_t i = 0; i < n; ++i) mine[i] = 0.1f * static_cast<float>(i % 7) + 0.01f * c.rank();
        param_group<float> g;
        g.add("a", mine.data(), n / 2).add("b", mine.data() + n / 2, n - n / 2);
        auto algo = make(g, c);
        for (int t = 0; t < steps; ++t) {
            train(mine, c.rank(), t);
            algo.step(exec::host{});
        }
    });
    return w;
}

// A schedule that decides when as well as how much: exchanges after steps 2 and 5 only.
struct two_exchanges {
    static constexpr const char* name = "two_exchanges";
    double fraction(std::uint64_t, double base) const { return base; }
    double max_fraction(double base) const { return base; }
    bool due(std::uint64_t step, std::uint64_t) const { return step == 2 || step == 5; }
    void describe(config_record& rec) const { rec.add("schedule", name); }
};

// A communicator that satisfies the elastic concept without any implementation behind it
// (never constructed): only its type is asked about.
struct fake_elastic {
    using memory_space = host_space;
    int rank() const;
    int size() const;
    void all_reduce_sum(float*, std::size_t);
    void send_recv(const float*, std::size_t, int, float*, std::size_t, int);
    void broadcast(float*, std::size_t, int);
    void all_gather_bytes(const void*, void*, std::size_t);
    void barrier();
    void synchronize() const;
    traffic_counters traffic() const;
    int id() const;
    std::uint64_t epoch() const;
    comm::membership_change renew();
    comm::membership_change join();
    void leave();
};

} // namespace

TEST_CASE("policies given by type, in any order, build the algorithm the positional call builds") {
    const std::size_t n = 96;
    SUBCASE("sparta_diloco: the outer optimizer alone") {
        const outer::nesterov opt{.lr = 0.5f, .momentum = 0.8f};
        const sparta_options so{.fraction = 0.1, .seed = 3};
        const diloco_options dopt{.interval = 4, .seed = 3};
        const auto positional = run(3, 12, n, [&](auto& g, auto& c) {
            return sparta_diloco<>(g, c, so, dopt, sampler::uniform{}, schedule::constant{}, topology::all_reduce{}, opt);
        });
        const auto by_type = run(3, 12, n, [&](auto& g, auto& c) { return sparta_diloco<>(g, c, so, dopt, opt); });
        const auto defaults = run(3, 12, n, [&](auto& g, auto& c) { return sparta_diloco<>(g, c, so, dopt); });
        for (int r = 0; r < 3; ++r) {
            CHECK(trickle_test::bitwise_equal(positional[r], by_type[r]));
            CHECK(by_type[r] == by_type[0]); // an outer step ended the run: the replicas agree
        }
        CHECK(!trickle_test::bitwise_equal(by_type[0], defaults[0])); // lr 0.5 is not the default 0.7
    }
    SUBCASE("diloco: the topology before the outer optimizer") {
        const diloco_options dopt{.interval = 3, .seed = 9};
        const outer::nesterov opt{.lr = 0.6f, .momentum = 0.9f};
        const auto positional = run(4, 9, n, [&](auto& g, auto& c) {
            return diloco<outer::nesterov, topology::ring>(g, c, dopt, opt, topology::ring{});
        });
        const auto by_type = run(4, 9, n, [&](auto& g, auto& c) {
            return diloco<outer::nesterov, topology::ring>(g, c, dopt, topology::ring{}, opt);
        });
        for (int r = 0; r < 4; ++r) CHECK(trickle_test::bitwise_equal(positional[r], by_type[r]));
    }
    SUBCASE("sparta: the codec alone") {
        const sparta_options so{.fraction = 0.25, .seed = 1};
        const auto positional = run(2, 5, n, [&](auto& g, auto& c) {
            return sparta<sampler::uniform, schedule::constant, topology::all_reduce, codec::bf16>(
                g, c, so, sampler::uniform{}, schedule::constant{}, topology::all_reduce{}, codec::bf16{});
        });
        const auto by_type = run(2, 5, n, [&](auto& g, auto& c) {
            return sparta<sampler::uniform, schedule::constant, topology::all_reduce, codec::bf16>(g, c, so, codec::bf16{});
        });
        for (int r = 0; r < 2; ++r) CHECK(trickle_test::bitwise_equal(positional[r], by_type[r]));
    }
    // What does not fit a slot is not a by-type call (so it does not compile as one).
    static_assert(!detail::by_type_policies<detail::policy_slots<sampler::uniform, schedule::constant>, int>);
    static_assert(!detail::by_type_policies<detail::policy_slots<sampler::uniform, schedule::constant>,
                                            schedule::constant, schedule::constant>);
    static_assert(detail::by_type_policies<detail::policy_slots<sampler::uniform, schedule::constant>, schedule::constant>);
}

TEST_CASE("a schedule that says when: SPARTA exchanges at its steps only") {
    std::vector<std::uint64_t> exchanges;
    comm::run_local(2, [&](comm::local& c) {
        std::vector<float> v(64, 1.0f + c.rank());
        param_group<float> g;
        g.add("v", v.data(), v.size());
        sparta_engine<sampler::uniform, two_exchanges, topology::all_reduce, float, host_space, comm::local> s(
            g, c, {.fraction = 0.5, .seed = 4, .broadcast_initial = false});
        std::vector<std::uint64_t> at;
        for (int t = 0; t < 8; ++t) {
            const std::uint64_t before = s.stats().exchanges;
            s.step(exec::host{});
            if (s.stats().exchanges != before) at.push_back(static_cast<std::uint64_t>(t));
        }
        if (c.rank() == 0) exchanges = at;
    });
    CHECK(exchanges == std::vector<std::uint64_t>{2, 5});
}

TEST_CASE("the replica state: a refused load changes nothing, a rollback restores the backup") {
    std::uint64_t counter = 7;
    std::vector<float> values{1.0f, 2.0f, 3.0f};
    detail::replica_state rs("probe");
    rs.set_config_hash(42);
    rs.add("counter", detail::saved | detail::backed_up | detail::hashed, sizeof counter,
           [&] { return detail::bytes_of(counter); }, [&](const std::string& b) { detail::bytes_to(b, &counter, 1); });
    rs.add("values", detail::saved | detail::sent, values.size() * sizeof(float),
           [&] { return detail::bytes_of(values.data(), values.size()); },
           [&](const std::string& b) { detail::bytes_to(b, values.data(), values.size()); },
           [](const detail::staged_sections& st) {
               if (st.values<float>("values")[0] < 0.0f) throw invalid_argument("probe: negative first value");
           });
    std::ostringstream good;
    rs.save(good);
    const std::uint32_t hash = rs.hash();

    comm::local_world world(1);
    comm::local c = world.rank(0);
    const auto record = [](const detail::staged_sections&, bool) { return config_record("probe checkpoint"); };

    counter = 9;
    values = {-1.0f, 5.0f, 6.0f};
    std::ostringstream bad;
    rs.save(bad); // its "values" fail the check
    counter = 11;
    values = {4.0f, 4.0f, 4.0f};
    std::istringstream in_bad(bad.str());
    CHECK_THROWS_WITH_AS(rs.load(c, in_bad, "bad", checkpoint_trailing::refuse, record), doctest::Contains("negative"),
                         invalid_argument);
    CHECK(counter == 11);
    CHECK(values == std::vector<float>{4.0f, 4.0f, 4.0f});

    std::string damaged = good.str();
    damaged[damaged.size() / 2] ^= 0x10;
    std::istringstream in_damaged(damaged);
    CHECK_THROWS_AS(rs.load(c, in_damaged, "damaged", checkpoint_trailing::refuse, record), invalid_argument);
    CHECK(counter == 11);

    std::istringstream in_good(good.str());
    rs.load(c, in_good, "good", checkpoint_trailing::refuse, record);
    CHECK(counter == 7);
    CHECK(values == std::vector<float>{1.0f, 2.0f, 3.0f});
    CHECK(rs.hash() == hash);

    rs.backup();
    counter = 100;
    values[0] = 50.0f;
    rs.rollback();
    CHECK(counter == 7);          // backed up
    CHECK(values[0] == 50.0f);    // not backed up: a round must not change it before its collectives complete

    // A transfer carries the sent sections only.
    std::ostringstream sent_out;
    rs.send(sent_out);
    const std::string blob = sent_out.str();
    values = {0.0f, 0.0f, 0.0f};
    counter = 1;
    std::istringstream in_blob(blob);
    rs.receive(in_blob);
    CHECK(values == std::vector<float>{50.0f, 2.0f, 3.0f});
    CHECK(counter == 1);
    std::istringstream in_torn(blob.substr(0, blob.size() - 3));
    CHECK_THROWS_AS(rs.receive(in_torn), invalid_argument);
}

TEST_CASE("replica_state: a section in host memory is saved, sent and hashed where it lies; a transfer lands in it") {
    std::vector<float> big(1000);
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
    const std::vector<float> orig = big;
    int reads = 0, writes = 0;
    detail::replica_state plain("probe"), in_place("probe");
    for (auto* rs : {&plain, &in_place}) {
        rs->set_config_hash(3);
        rs->add("big", detail::saved | detail::sent | detail::hashed, big.size() * sizeof(float),
                [&] {
                    ++reads;
                    return detail::bytes_of(big.data(), big.size());
                },
                [&](const std::string& b) {
                    ++writes;
                    detail::bytes_to(b, big.data(), big.size());
                });
    }
    in_place.in_host_memory([&] { return std::span<float>(big); });
    // The same bytes and hash as through read(), which it no longer calls.
    std::ostringstream a, b, t;
    plain.save(a);
    const std::uint32_t plain_hash = plain.hash();
    reads = 0;
    in_place.save(b);
    in_place.send(t);
    CHECK(in_place.hash() == plain_hash);
    CHECK(reads == 0);
    CHECK(a.str() == b.str());
    // A transfer lands in place (no write()); through the plain section it is written once.
    std::fill(big.begin(), big.end(), 0.0f);
    std::istringstream in1(t.str());
    in_place.receive(in1);
    CHECK(big == orig);
    CHECK(writes == 0);
    std::fill(big.begin(), big.end(), 0.0f);
    std::istringstream in2(t.str());
    plain.receive(in2);
    CHECK(big == orig);
    CHECK(writes == 1);
    // A damaged transfer is refused by its checksum.
    std::string damaged = t.str();
    damaged[damaged.size() / 2] ^= 0x10;
    std::istringstream in3(damaged);
    CHECK_THROWS_WITH_AS(in_place.receive(in3), doctest::Contains("checksum"), invalid_argument);
}

TEST_CASE("a plain DiLoCo over comm::local compiles no membership protocol") {
    // This translation unit never included trickle/algorithm/membership.hpp: the protocol an
    // elastic communicator needs is undefined here, and the engines over a fixed world need
    // none.
    static_assert(comm::elastic_communicator<fake_elastic>);
    static_assert(!detail::round_protocol_defined<fake_elastic>);
    static_assert(detail::round_protocol_defined<comm::local>);
    const auto w = run(2, 6, 32, [&](auto& g, auto& c) { return diloco<>(g, c, {.interval = 3}); });
    CHECK(w[0] == w[1]);
}
