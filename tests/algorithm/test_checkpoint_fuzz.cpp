// A seeded corruption fuzzer of the checkpoint loaders. DiLoCo, SPARTA and SPARTA + DiLoCo
// checkpoints (2 in-process workers, small groups) are damaged in every way a file can
// be damaged on disk or in a copy: every single bit flipped, every truncation, bytes
// appended, a prefix of one checkpoint joined to the rest of another of the same run, a
// checkpoint of another configuration, layout or algorithm, and a seeded sample of
// multi-byte damage. Every worker loads the same damaged bytes; every variant must be
// refused on every worker, with the same error, naming the damaged record where one is
// known, and leave the algorithm's state exactly as it was (its save() before and after).
// A control load of the undamaged checkpoint must succeed, so refusals are not vacuous.
//
// Bounded: a few thousand variants per algorithm, a few seconds under ASan/UBSan. For a
// longer local run, TRICKLE_CHECKPOINT_FUZZ_RANDOM sets the number of random multi-byte
// variants per algorithm (default 600) and TRICKLE_CHECKPOINT_FUZZ_SEED their seed.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle;

namespace {

constexpr int N = 2;

struct replica {
    std::vector<float> a, b;
    param_group<float> group;
    replica(std::size_t na, std::size_t nb, int r) : a(na), b(nb) {
        for (std::size_t i = 0; i < na; ++i) a[i] = 0.5f + 0.01f * static_cast<float>(i) + 0.25f * static_cast<float>(r);
        for (std::size_t i = 0; i < nb; ++i) b[i] = -0.25f + 0.02f * static_cast<float>(i);
        group.add("a", a.data(), na).add("b", b.data(), nb);
    }
    void train(int r, int t) {
        for (std::size_t i = 0; i < a.size(); ++i)
            a[i] += 0.01f * static_cast<float>(std::sin(0.3 * static_cast<double>(i) * (r + 1) + 0.7 * t));
        for (std::size_t i = 0; i < b.size(); ++i) b[i] -= 0.003f * static_cast<float>((i + static_cast<std::size_t>(t)) % 5);
    }
};

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return fallback;
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v, &end, 10);
    if (*end != '\0') throw std::invalid_argument(std::string(name) + " must be a decimal number, got '" + v + "'");
    return x;
}

// What an algorithm factory gets: the worker's group and communicator.
using algorithm_factory = std::function<detail::erased_handle(const param_group<float>&, comm::local&)>;

std::string save_of(const detail::erased_handle& a) {
    std::ostringstream os;
    a.save(os);
    return os.str();
}

// Every worker's checkpoint after each of `at` steps (ascending) of the algorithm `make`
// builds, over fresh replicas of na + nb parameters.
std::vector<std::vector<std::string>> checkpoints(const algorithm_factory& make, std::vector<int> at, std::size_t na = 24,
                                                  std::size_t nb = 8) {
    std::vector<replica> m;
    for (int r = 0; r < N; ++r) m.emplace_back(na, nb, r);
    std::vector<std::vector<std::string>> out(at.size(), std::vector<std::string>(N));
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        auto algo = make(m[static_cast<std::size_t>(r)].group, c);
        int t = 0;
        for (std::size_t k = 0; k < at.size(); ++k) {
            for (; t < at[k]; ++t) {
                m[static_cast<std::size_t>(r)].train(r, t);
                algo.step(exec::host{});
            }
            out[k][static_cast<std::size_t>(r)] = save_of(algo);
        }
    });
    return out;
}

// The records of one or more checkpoints in a row, read by the test's own parser of the
// format in checkpoint.hpp: [begin, end) of each and the words an error about it names.
struct record {
    std::size_t begin, end;
    std::string names; // '|'-separated alternatives, any of which the error must contain
};

std::vector<record> records(const std::string& s) {
    std::vector<record> out;
    std::size_t p = 0;
    auto u64 = [&](std::size_t at) {
        std::uint64_t v = 0;
        REQUIRE(at + 8 <= s.size());
        std::memcpy(&v, s.data() + at, 8);
        return v;
    };
    while (p < s.size()) {
        REQUIRE(s.compare(p, 8, "TRKLCKPT") == 0);
        const std::size_t kind_len = u64(p + 12);
        const std::size_t header_end = p + 12 + 8 + kind_len + 8 + 4;
        out.push_back({p, header_end, "bad magic|format version|header"});
        p = header_end;
        for (;;) {
            const std::size_t name_len = u64(p);
            const std::string name = s.substr(p + 8, name_len);
            if (name == "end") {
                out.push_back({p, p + 8 + 3 + 4, "end marker"});
                p += 8 + 3 + 4;
                break;
            }
            const std::size_t size = u64(p + 8 + name_len);
            const std::size_t end = p + 8 + name_len + 8 + size + 4;
            out.push_back({p, end, "section '" + name + "'"});
            p = end;
        }
    }
    REQUIRE(p == s.size());
    return out;
}

struct variant {
    std::string family; // "bit flip", "truncation", ...
    std::string bytes;
    std::string expect; // '|'-separated alternatives the error must contain ("" for any)
};

bool contains_any(const std::string& message, const std::string& alternatives) {
    if (alternatives.empty()) return !message.empty();
    std::size_t from = 0;
    for (;;) {
        const std::size_t bar = alternatives.find('|', from);
        const std::string alt = alternatives.substr(from, bar == std::string::npos ? std::string::npos : bar - from);
        if (message.find(alt) != std::string::npos) return true;
        if (bar == std::string::npos) return false;
        from = bar + 1;
    }
}

// Every damaged variant of `good` (rank 0's checkpoint); `other` is a checkpoint of the
// same run at another step, `foreign` checkpoints of other configurations with the words
// their refusal must contain.
std::vector<variant> variants(const std::string& good, const std::string& other,
                              const std::vector<std::pair<std::string, std::string>>& foreign, std::uint64_t seed,
                              std::uint64_t random_count) {
    std::vector<variant> out;
    const auto recs = records(good);
    auto record_at = [&](std::size_t byte) -> const record& {
        for (const auto& r : recs)
            if (byte >= r.begin && byte < r.end) return r;
        FAIL("byte outside every record");
        return recs.front();
    };
    // Every bit of every byte.
    for (std::size_t i = 0; i < good.size(); ++i)
        for (int bit = 0; bit < 8; ++bit) {
            std::string b = good;
            b[i] = static_cast<char>(static_cast<unsigned char>(b[i]) ^ (1u << bit));
            out.push_back({"bit flip", std::move(b), record_at(i).names});
        }
    // Every truncation, down to nothing.
    for (std::size_t n = 0; n < good.size(); ++n) out.push_back({"truncation", good.substr(0, n), "truncated"});
    // Appended bytes: a few lengths of zeros and of patterned bytes, the end record
    // again, and the whole checkpoint again.
    const std::string end_record = good.substr(recs.back().begin);
    for (std::size_t n : {1, 2, 3, 4, 7, 8, 15, 64, 4096}) {
        out.push_back({"appended", good + std::string(n, '\0'), "after the end marker"});
        std::string tail(n, '\0');
        for (std::size_t i = 0; i < n; ++i) tail[i] = static_cast<char>(0xA5 ^ (i * 29));
        out.push_back({"appended", good + tail, "after the end marker"});
    }
    out.push_back({"appended", good + end_record, "after the end marker"});
    out.push_back({"appended", good + good, "after the end marker"});
    out.push_back({"appended", good + "\n", "after the end marker"});
    // A prefix of one checkpoint of the run, the rest from the other: the chained
    // checksums refuse every join that is not one of the two checkpoints whole.
    for (std::size_t i = 1; i < std::min(good.size(), other.size()); ++i) {
        std::string ab = good.substr(0, i) + other.substr(i), ba = other.substr(0, i) + good.substr(i);
        if (ab != good && ab != other) out.push_back({"splice", std::move(ab), "checksum mismatch|holds|truncated|two different checkpoints"});
        if (ba != good && ba != other) out.push_back({"splice", std::move(ba), "checksum mismatch|holds|truncated|two different checkpoints"});
    }
    for (const auto& [bytes, expect] : foreign) out.push_back({"foreign", bytes, expect});
    // Seeded multi-byte damage: several flipped bits, an overwritten run, a deleted run,
    // an inserted run.
    std::uint64_t x = seed;
    auto next = [&]() { // splitmix64: the same sequence on every platform
        x += 0x9E3779B97F4A7C15ull;
        std::uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    };
    auto below = [&](std::size_t n) { return static_cast<std::size_t>(next() % n); };
    for (std::uint64_t k = 0; k < random_count;) {
        std::string b = good;
        switch (next() % 4) {
        case 0:
            for (std::size_t f = 2 + below(7); f > 0; --f) b[below(b.size())] ^= static_cast<char>(1u << below(8));
            break;
        case 1: {
            const std::size_t at = below(b.size()), n = std::min(1 + below(16), b.size() - at);
            for (std::size_t i = 0; i < n; ++i) b[at + i] = static_cast<char>(next());
            break;
        }
        case 2: {
            const std::size_t at = below(b.size());
            b.erase(at, 1 + below(16));
            break;
        }
        default: {
            std::string ins(1 + below(16), '\0');
            for (auto& c : ins) c = static_cast<char>(next());
            b.insert(below(b.size() + 1), ins);
        }
        }
        if (b == good) continue; // the damage undid itself
        out.push_back({"random", std::move(b), ""});
        ++k;
    }
    return out;
}

struct outcome {
    bool refused = false, unchanged = false;
    std::string message;
};

struct tally {
    std::size_t tried = 0, accepted = 0, changed = 0, unnamed = 0, differing = 0;
};

// Loads every variant on N workers into an algorithm holding `state` (each worker's own
// checkpoint of a later step than `good`), then `good` itself as the control. Returns
// the tally per family and overall.
std::map<std::string, tally> fuzz(const char* label, const algorithm_factory& make, const std::vector<std::string>& state,
                                  const std::string& good, const std::vector<variant>& vs) {
    std::vector<replica> m;
    for (int r = 0; r < N; ++r) m.emplace_back(24, 8, r);
    std::vector<std::vector<outcome>> out(N, std::vector<outcome>(vs.size()));
    std::vector<std::string> control(N);
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) {
        const auto r = static_cast<std::size_t>(c.rank());
        auto algo = make(m[r].group, c);
        auto restore = [&] {
            std::istringstream is(state[r]);
            algo.load(is);
            if (save_of(algo) != state[r]) throw std::logic_error("the state did not round-trip");
        };
        restore();
        for (std::size_t k = 0; k < vs.size(); ++k) {
            outcome& o = out[r][k];
            std::istringstream is(vs[k].bytes);
            try {
                algo.load(is);
            } catch (const trickle::error& e) {
                o.refused = true;
                o.message = e.what();
            }
            o.unchanged = save_of(algo) == state[r];
            // A damaged checkpoint was accepted (the verdict is collective, so every
            // worker is here together): put the state back for the next variant.
            if (!o.refused) restore();
        }
        // The control: the undamaged checkpoint loads on every worker.
        std::istringstream is(good);
        algo.load(is);
        control[r] = save_of(algo);
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int r = 0; r < N; ++r) CHECK_MESSAGE(errors[static_cast<std::size_t>(r)].empty(), errors[static_cast<std::size_t>(r)]);
    for (int r = 0; r < N; ++r) CHECK(control[static_cast<std::size_t>(r)] == good);

    std::map<std::string, tally> t;
    for (std::size_t k = 0; k < vs.size(); ++k) {
        for (const std::string& family : {vs[k].family, std::string("all")}) {
            tally& f = t[family];
            ++f.tried;
            bool accepted = false, changed = false, unnamed = false;
            for (int r = 0; r < N; ++r) {
                const outcome& o = out[static_cast<std::size_t>(r)][k];
                accepted = accepted || !o.refused;
                changed = changed || !o.unchanged;
                unnamed = unnamed || (o.refused && !contains_any(o.message, vs[k].expect));
            }
            f.accepted += accepted;
            f.changed += changed;
            f.unnamed += unnamed;
            f.differing += out[0][k].message != out[1][k].message;
        }
        const outcome& o = out[0][k];
        const bool bad = !o.refused || !out[1][k].refused || !o.unchanged || !out[1][k].unchanged ||
                         !contains_any(o.message, vs[k].expect) || o.message != out[1][k].message;
        if (bad) { // the first few failures in full
            static int shown = 0;
            if (shown++ < 10)
                FAIL_CHECK(label, ": ", vs[k].family, " variant ", k, " (", vs[k].bytes.size(), " bytes): refused ",
                           o.refused, "/", out[1][k].refused, ", unchanged ", o.unchanged, "/", out[1][k].unchanged,
                           ", expected '", vs[k].expect, "', rank 0: '", o.message, "', rank 1: '", out[1][k].message,
                           "'");
        }
    }
    std::printf("checkpoint fuzz, %s (%zu-byte checkpoint, %.2f s):", label, good.size(), seconds);
    for (const auto& [family, f] : t)
        std::printf(" %s %zu tried / %zu accepted;", family.c_str(), f.tried, f.accepted);
    std::printf("\n");
    return t;
}

void check_clean(const std::map<std::string, tally>& t) {
    const tally& all = t.at("all");
    CHECK(all.tried > 1000);
    CHECK(all.accepted == 0);
    CHECK(all.changed == 0);
    CHECK(all.unnamed == 0);
    CHECK(all.differing == 0);
    for (const char* family : {"bit flip", "truncation", "appended", "splice", "foreign", "random"})
        CHECK_MESSAGE(t.count(family) == 1, family, " variants missing");
}

// Read inside the test cases (doctest reports a bad value there), not at static initialization.
std::uint64_t seed() { return env_or("TRICKLE_CHECKPOINT_FUZZ_SEED", 20240611); }
std::uint64_t random_count() { return env_or("TRICKLE_CHECKPOINT_FUZZ_RANDOM", 600); }

// Options shared by every object of a fuzz run (and none broadcasts: the checkpoints'
// `initial` counters stay zero, so the control's save() is the file byte for byte).
const diloco_options dopt{.interval = 2, .seed = 5, .drop_probability = 0.3, .broadcast_initial = false};
const sparta_options sopt{.fraction = 0.25, .seed = 3, .broadcast_initial = false};

template <class Opt = outer::adam>
algorithm_factory make_diloco(diloco_options o = dopt, Opt opt = outer::adam{.lr = 0.01}) {
    return [=](const param_group<float>& g, comm::local& c) -> detail::erased_handle { return diloco<Opt>(g, c, o, opt); };
}
template <class Sampler = sampler::permutation>
algorithm_factory make_sparta(sparta_options o = sopt) {
    return [=](const param_group<float>& g, comm::local& c) -> detail::erased_handle { return sparta<Sampler>(g, c, o); };
}
algorithm_factory make_sparta_diloco(diloco_options o = dopt) {
    return [=](const param_group<float>& g, comm::local& c) -> detail::erased_handle {
        return sparta_diloco<sampler::permutation>(g, c, sopt, o);
    };
}

} // namespace

TEST_CASE("checkpoint fuzz: no damaged DiLoCo checkpoint loads, and none changes the state") {
    const auto ck = checkpoints(make_diloco(), {7, 10});
    const std::string& good = ck[0][0];
    const std::string different = "different configuration";
    auto foreign = [&](const algorithm_factory& make, const std::string& expect, std::size_t na = 24, std::size_t nb = 8) {
        return std::pair{checkpoints(make, {3}, na, nb)[0][0], expect};
    };
    const auto vs = variants(good, ck[1][0],
                             {foreign(make_diloco({.interval = 3, .seed = 5, .drop_probability = 0.3, .broadcast_initial = false}), different),
                              foreign(make_diloco({.interval = 2, .seed = 6, .drop_probability = 0.3, .broadcast_initial = false}), different),
                              foreign(make_diloco(dopt, outer::adam{.lr = 0.02}), different),
                              foreign(make_diloco(dopt, outer::nesterov{.lr = 0.7}), different),
                              foreign(make_diloco(), different, 25, 7), // same size, another layout
                              foreign(make_diloco(), different + "|holds", 24, 9),
                              foreign(make_sparta(), "written by 'sparta'"),
                              foreign(make_sparta_diloco(), "written by 'sparta'")},
                             seed(), random_count());
    check_clean(fuzz("diloco", make_diloco(), ck[1], good, vs));
}

TEST_CASE("checkpoint fuzz: no damaged SPARTA checkpoint loads, and none changes the state") {
    const auto ck = checkpoints(make_sparta(), {5, 9});
    const std::string& good = ck[0][0];
    const std::string different = "different configuration";
    auto foreign = [&](const algorithm_factory& make, const std::string& expect, std::size_t na = 24, std::size_t nb = 8) {
        return std::pair{checkpoints(make, {3}, na, nb)[0][0], expect};
    };
    const auto vs = variants(good, ck[1][0],
                             {foreign(make_sparta({.fraction = 0.5, .seed = 3, .broadcast_initial = false}), different),
                              foreign(make_sparta({.fraction = 0.25, .seed = 4, .broadcast_initial = false}), different),
                              foreign(make_sparta({.fraction = 0.25, .interval = 2, .seed = 3, .broadcast_initial = false}), different),
                              foreign(make_sparta<sampler::uniform>(), different),
                              foreign(make_sparta(), different, 20, 12),
                              foreign(make_diloco(), "written by 'diloco'"),
                              // A SPARTA + DiLoCo file begins with a valid SPARTA checkpoint of
                              // this configuration: its DiLoCo part is what follows the end.
                              foreign(make_sparta_diloco(), "after the end marker")},
                             seed() + 1, random_count());
    check_clean(fuzz("sparta", make_sparta(), ck[1], good, vs));
}

TEST_CASE("checkpoint fuzz: SPARTA + DiLoCo, two checkpoints in a row, a sample of the damage") {
    const auto ck = checkpoints(make_sparta_diloco(), {7, 10});
    const std::string& good = ck[0][0];
    auto vs = variants(good, ck[1][0],
                       {{checkpoints(make_diloco(), {3})[0][0], "written by 'diloco'"},
                        {checkpoints(make_sparta(), {3})[0][0], "truncated in header"}},
                       seed() + 2, random_count() / 2);
    // Every bit of the SPARTA part and of the DiLoCo part's records is already covered
    // above; here every 7th flip, which still meets every record of both parts.
    std::vector<variant> sample;
    std::size_t flip = 0;
    for (auto& v : vs)
        if (v.family != "bit flip" || flip++ % 7 == 0) sample.push_back(std::move(v));
    check_clean(fuzz("sparta_diloco", make_sparta_diloco(), ck[1], good, sample));
}
