// Checkpoints written by an older trickle still load and resume bit for bit.
//
// A checkpoint's header holds the hash of the algorithm's configuration record
// (detail::fnv1a(config_record::serialize())), so any change to how a record writes its
// values (the text of a double, the fields a policy adds) would make every checkpoint
// written before it unloadable. The files under data/compat/ were written by trickle at
// commit 8bb4f77, before messages printed numbers in their shortest form, for
// configurations whose records are full of doubles that the old 17-digit text spells out
// (0.14999999999999999, a piecewise point "4:0.29999999999999999", an outer lr schedule,
// a random-k fraction, adam's betas). Each file holds both workers' checkpoints, their
// parameters when they saved, and their parameters after `more` further steps; this
// test loads the checkpoints into objects of today's trickle, steps on and compares the
// parameters with the old run's bit for bit.
//
// To write the files again (only ever with the trickle whose checkpoints are to be
// kept readable): run this binary with TRICKLE_WRITE_COMPAT_DIR=<dir> and the test case
// "compat: write" selected (-tc="compat: write").
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle;

namespace {

constexpr int N = 2;
constexpr int saved_at = 5; // steps before the checkpoint
constexpr int more = 5;     // steps after it

struct replica {
    std::vector<float> a, b;
    param_group<float> group;
    explicit replica(int r) : a(30), b(10) {
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.125f * static_cast<float>(i) + 0.5f * static_cast<float>(r);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = -0.25f * static_cast<float>(i);
        group.add("a", a.data(), a.size()).add("b", b.data(), b.size());
    }
    // A stand-in for an optimizer step: integer arithmetic rounded once to float, the same
    // on every machine (no libm).
    void train(int r, int t) {
        for (std::size_t i = 0; i < a.size(); ++i)
            a[i] += 0.0078125f * static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(t) * 3 +
                                                                        static_cast<std::size_t>(r)) % 11) - 5);
        for (std::size_t i = 0; i < b.size(); ++i)
            b[i] -= 0.015625f * static_cast<float>(static_cast<int>((i + static_cast<std::size_t>(t * r)) % 5) - 2);
    }
    std::vector<float> params() const {
        std::vector<float> p = a;
        p.insert(p.end(), b.begin(), b.end());
        return p;
    }
    void set(const std::vector<float>& p) {
        std::copy(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(a.size()), a.begin());
        std::copy(p.begin() + static_cast<std::ptrdiff_t>(a.size()), p.end(), b.begin());
    }
};

using factory = std::function<detail::erased_handle(const param_group<float>&, comm::local&)>;

struct config {
    const char* name;
    factory make;
};

std::vector<config> configs() {
    using piecewise_warmup = schedule::warmup<schedule::piecewise>;
    using cosine_nesterov = outer::lr_scheduled<outer::nesterov, schedule::cosine>;
    return {
        {"sparta_warmup_piecewise",
         [](const param_group<float>& g, comm::local& c) -> detail::erased_handle {
             piecewise_warmup sch{.steps = 3, .start_fraction = 0.05};
             sch.then.points = {{4, 0.3}, {6, 0.1}};
             return sparta<sampler::permutation, piecewise_warmup>(
                 g, c, {.fraction = 0.15, .seed = 4, .broadcast_initial = false}, {}, sch);
         }},
        {"diloco_cosine_nesterov",
         [](const param_group<float>& g, comm::local& c) -> detail::erased_handle {
             return diloco<cosine_nesterov>(
                 g, c, {.interval = 2, .seed = 9, .prune_fraction = 0.1, .broadcast_initial = false},
                 cosine_nesterov{.optimizer = {.lr = 0.7, .momentum = 0.9}, .schedule = {.end_fraction = 0.1, .steps = 10}});
         }},
        {"sparta_diloco_adam_random_k",
         [](const param_group<float>& g, comm::local& c) -> detail::erased_handle {
             return sparta_diloco<sampler::uniform, schedule::linear, topology::all_reduce, outer::adam, codec::fp32,
                                  codec::random_k<>>(
                 g, c, {.fraction = 0.2, .seed = 3}, {.interval = 3, .seed = 5, .broadcast_initial = false},
                 {}, {.end_fraction = 0.05, .steps = 10}, {}, {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95},
                 {}, {.fraction = 0.35});
         }},
    };
}

std::string save_of(const detail::erased_handle& a) {
    std::ostringstream os;
    a.save(os);
    return os.str();
}

// One file: the blobs in order, each as u64 length + bytes.
struct compat_file {
    std::string checkpoint[N];
    std::vector<float> at_save[N], after[N];
};

void put_blob(std::string& out, const void* data, std::uint64_t n) {
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out.append(static_cast<const char*>(data), n);
}

std::string take_blob(const std::string& in, std::size_t& at) {
    std::uint64_t n = 0;
    REQUIRE(at + sizeof n <= in.size());
    std::memcpy(&n, in.data() + at, sizeof n);
    at += sizeof n;
    REQUIRE(at + n <= in.size());
    std::string s = in.substr(at, n);
    at += n;
    return s;
}

std::vector<float> floats_of(const std::string& s) {
    std::vector<float> v(s.size() / sizeof(float));
    std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
    return v;
}

std::string encode(const compat_file& f) {
    std::string out;
    for (int r = 0; r < N; ++r) {
        put_blob(out, f.checkpoint[r].data(), f.checkpoint[r].size());
        put_blob(out, f.at_save[r].data(), f.at_save[r].size() * sizeof(float));
        put_blob(out, f.after[r].data(), f.after[r].size() * sizeof(float));
    }
    return out;
}

compat_file decode(const std::string& in) {
    compat_file f;
    std::size_t at = 0;
    for (int r = 0; r < N; ++r) {
        f.checkpoint[r] = take_blob(in, at);
        f.at_save[r] = floats_of(take_blob(in, at));
        f.after[r] = floats_of(take_blob(in, at));
    }
    CHECK(at == in.size());
    return f;
}

std::string data_path(const char* name) { return std::string(TRICKLE_COMPAT_DATA_DIR) + "/" + name + ".bin"; }

std::string read_file(const std::string& path) {
    std::ifstream is(path, std::ios::binary);
    REQUIRE_MESSAGE(is.good(), "cannot read ", path);
    return {std::istreambuf_iterator<char>(is), std::istreambuf_iterator<char>()};
}

} // namespace

TEST_CASE("compat: write" * doctest::skip()) {
    const char* dir = std::getenv("TRICKLE_WRITE_COMPAT_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "set TRICKLE_WRITE_COMPAT_DIR");
    for (const auto& cfg : configs()) {
        compat_file f;
        std::vector<replica> m;
        for (int r = 0; r < N; ++r) m.emplace_back(r);
        comm::run_local(N, [&](comm::local& c) {
            const int r = c.rank();
            replica& rep = m[static_cast<std::size_t>(r)];
            auto algo = cfg.make(rep.group, c);
            for (int t = 0; t < saved_at; ++t) {
                rep.train(r, t);
                algo.step(exec::host{});
            }
            f.checkpoint[r] = save_of(algo);
            f.at_save[r] = rep.params();
            for (int t = saved_at; t < saved_at + more; ++t) {
                rep.train(r, t);
                algo.step(exec::host{});
            }
            f.after[r] = rep.params();
        });
        std::ofstream os(std::string(dir) + "/" + cfg.name + ".bin", std::ios::binary);
        const std::string bytes = encode(f);
        os.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        REQUIRE(os.good());
    }
}

TEST_CASE("compat: checkpoints written by trickle at 8bb4f77 load and resume bit for bit") {
    for (const auto& cfg : configs()) {
        CAPTURE(cfg.name);
        const compat_file f = decode(read_file(data_path(cfg.name)));
        std::vector<replica> m;
        for (int r = 0; r < N; ++r) m.emplace_back(r);
        std::vector<std::vector<float>> after(N);
        std::vector<std::uint64_t> steps(N);
        const auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) {
            const int r = c.rank();
            replica& rep = m[static_cast<std::size_t>(r)];
            auto algo = cfg.make(rep.group, c);
            rep.set(f.at_save[r]);
            std::istringstream is(f.checkpoint[r]);
            algo.load(is, cfg.name);
            steps[static_cast<std::size_t>(r)] = algo.stats().steps;
            for (int t = saved_at; t < saved_at + more; ++t) {
                rep.train(r, t);
                algo.step(exec::host{});
            }
            after[static_cast<std::size_t>(r)] = rep.params();
        });
        for (int r = 0; r < N; ++r) {
            CAPTURE(r);
            REQUIRE_MESSAGE(errors[static_cast<std::size_t>(r)].empty(), errors[static_cast<std::size_t>(r)]);
            CHECK(steps[static_cast<std::size_t>(r)] == saved_at);
            CHECK(trickle_test::bitwise_equal(after[static_cast<std::size_t>(r)], f.after[r]));
        }
    }
}
