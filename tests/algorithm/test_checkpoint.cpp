// The checkpoint format (checkpoint.hpp) by example: the checksums sit where the format
// says and cover what it says, old versions are refused by name, bytes after the end are
// refused by top-level loads and left alone by checkpoint_trailing::leave, names quoted
// from a file are escaped, and SPARTA + DiLoCo refuses parts of two checkpoints. Every
// refusal is checked on every worker, with the algorithm's whole state (its save())
// compared before and after.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle;

namespace {

constexpr int N = 2;

struct replica {
    std::vector<float> a, b;
    param_group<float> group;
    explicit replica(int r) : a(20), b(6) {
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * static_cast<float>(i) + 0.5f * static_cast<float>(r);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = -0.2f * static_cast<float>(i);
        group.add("a", a.data(), a.size()).add("b", b.data(), b.size());
    }
    void train(int r, int t) {
        for (std::size_t i = 0; i < a.size(); ++i)
            a[i] += 0.01f * static_cast<float>(std::cos(0.2 * static_cast<double>(i) + 0.5 * (t + r)));
    }
};

using factory = std::function<detail::erased_handle(const param_group<float>&, comm::local&)>;

const diloco_options dopt{.interval = 2, .seed = 9, .broadcast_initial = false};
const sparta_options sopt{.fraction = 0.25, .seed = 4, .broadcast_initial = false};

factory make_diloco() {
    return [](const param_group<float>& g, comm::local& c) -> detail::erased_handle {
        return diloco<outer::nesterov>(g, c, dopt, outer::nesterov{.lr = 0.7, .momentum = 0.9});
    };
}
factory make_sparta() {
    return [](const param_group<float>& g, comm::local& c) -> detail::erased_handle {
        return sparta<sampler::permutation>(g, c, sopt);
    };
}
factory make_sparta_diloco() {
    return [](const param_group<float>& g, comm::local& c) -> detail::erased_handle {
        return sparta_diloco<sampler::permutation>(g, c, sopt, dopt);
    };
}

std::string save_of(const detail::erased_handle& a) {
    std::ostringstream os;
    a.save(os);
    return os.str();
}

// Rank 0's checkpoint after each of `at` steps (ascending).
std::vector<std::string> checkpoints(const factory& make, const std::vector<int>& at) {
    std::vector<replica> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r);
    std::vector<std::string> out(at.size());
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        auto algo = make(m[static_cast<std::size_t>(r)].group, c);
        int t = 0;
        for (std::size_t k = 0; k < at.size(); ++k) {
            for (; t < at[k]; ++t) {
                m[static_cast<std::size_t>(r)].train(r, t);
                algo.step(exec::host{});
            }
            const std::string s = save_of(algo);
            if (r == 0) out[k] = s;
        }
    });
    return out;
}

// Every worker builds the algorithm, loads `state`, then runs attempt(algo); returns each
// worker's error ("" when attempt returned) and checks that a failed attempt left the
// state as `state` left it.
std::vector<std::string> attempt(const factory& make, const std::string& state,
                                 const std::function<void(detail::erased_handle&, int)>& fn) {
    std::vector<replica> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r);
    std::vector<int> changed(N, 0);
    auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) {
        auto algo = make(m[static_cast<std::size_t>(c.rank())].group, c);
        std::istringstream is(state);
        algo.load(is);
        try {
            fn(algo, c.rank());
        } catch (const trickle::error&) {
            changed[static_cast<std::size_t>(c.rank())] = save_of(algo) != state;
            throw;
        }
    });
    for (int r = 0; r < N; ++r) CHECK_MESSAGE(changed[static_cast<std::size_t>(r)] == 0, "rank ", r, " changed by a failed load");
    return errors;
}

void load_string(detail::erased_handle& a, const std::string& bytes) {
    std::istringstream is(bytes);
    a.load(is);
}

void check_all(const std::vector<std::string>& errors, const std::string& what) {
    for (int r = 0; r < N; ++r) CHECK_MESSAGE(errors[static_cast<std::size_t>(r)].find(what) != std::string::npos, errors[static_cast<std::size_t>(r)]);
    CHECK(errors[0] == errors[1]);
}

std::uint64_t u64_at(const std::string& s, std::size_t at) {
    std::uint64_t v = 0;
    std::memcpy(&v, s.data() + at, 8);
    return v;
}

// Walks the checkpoints in s as the format describes and rewrites every stored checksum
// to the running CRC-32C of the bytes before it, stored checksums excepted. Returns the
// number of checksums that were already right (all of them for an undamaged file).
std::size_t rechecksum(std::string& s) {
    std::size_t right = 0, p = 0;
    while (p < s.size()) {
        std::uint32_t crc = 0;
        auto seal = [&](std::size_t from, std::size_t to) { // the record [from, to), then its checksum
            crc = crc32c(s.data() + from, to - from, crc);
            std::uint32_t stored = 0;
            std::memcpy(&stored, s.data() + to, 4);
            right += stored == crc;
            std::memcpy(s.data() + to, &crc, 4);
            return to + 4;
        };
        REQUIRE(s.compare(p, 8, "TRKLCKPT") == 0);
        p = seal(p, p + 8 + 4 + 8 + u64_at(s, p + 12) + 8);
        for (;;) {
            const std::uint64_t name_len = u64_at(s, p);
            const bool end = s.compare(p + 8, name_len, "end") == 0;
            p = seal(p, end ? p + 8 + 3 : p + 8 + name_len + 8 + u64_at(s, p + 8 + name_len));
            if (end) break;
        }
    }
    REQUIRE(p == s.size());
    return right;
}

std::size_t records_in(const std::string& s) {
    std::string copy = s;
    return rechecksum(copy);
}

// The offset of section `name`'s payload in the first checkpoint of s.
std::size_t payload_of(const std::string& s, const std::string& name) {
    std::size_t p = 8 + 4 + 8 + u64_at(s, 12) + 8 + 4;
    for (;;) {
        const std::uint64_t len = u64_at(s, p);
        REQUIRE(s.compare(p + 8, len, "end") != 0);
        if (s.compare(p + 8, len, name) == 0) return p + 8 + len + 8;
        p += 8 + len + 8 + u64_at(s, p + 8 + len) + 4;
    }
}

} // namespace

TEST_CASE("checkpoint: every record closes with the running CRC-32C the format describes") {
    for (const auto& make : {make_diloco(), make_sparta(), make_sparta_diloco()}) {
        const std::string good = checkpoints(make, {5})[0];
        std::string same = good;
        const std::size_t records = rechecksum(same);
        CHECK(same == good);      // recomputed as documented, every stored checksum is the same
        CHECK(records >= 4);      // header, two sections or more, end
        CHECK(records == records_in(good));
    }
    // The header's checksum is the plain CRC-32C of the header's bytes before it.
    const std::string d = checkpoints(make_diloco(), {3})[0];
    const std::size_t header = 8 + 4 + 8 + u64_at(d, 12) + 8;
    std::uint32_t stored = 0;
    std::memcpy(&stored, d.data() + header, 4);
    CHECK(stored == crc32c(d.data(), header));
    CHECK(u64_at(d, 12) == 6);
    CHECK(d.compare(20, 6, "diloco") == 0);
    std::uint32_t version = 0;
    std::memcpy(&version, d.data() + 8, 4);
    CHECK(version == 3);
}

TEST_CASE("checkpoint: a damaged byte is refused naming its record; re-checksummed, the same edit loads") {
    const auto ck = checkpoints(make_diloco(), {6, 9});
    const std::string& good = ck[0];
    // A bit of the snapshot flipped: refused, naming the section, on every worker, and
    // the state (that of step 9) is unchanged.
    std::string bad = good;
    const std::size_t snap = payload_of(good, "snapshot");
    bad[snap + 5] ^= 0x10;
    check_all(attempt(make_diloco(), ck[1], [&](auto& a, int) { load_string(a, bad); }),
              "checkpoint: checksum mismatch in section 'snapshot'");
    // The counters, the header's configuration hash, the end marker.
    bad = good;
    bad[payload_of(good, "outer_counters")] ^= 1;
    check_all(attempt(make_diloco(), ck[1], [&](auto& a, int) { load_string(a, bad); }),
              "checksum mismatch in section 'outer_counters'");
    bad = good;
    bad[8 + 4 + 8 + 6 + 3] ^= 0x80;
    check_all(attempt(make_diloco(), ck[1], [&](auto& a, int) { load_string(a, bad); }), "checksum mismatch in header");
    bad = good;
    bad[bad.size() - 2] ^= 4;
    check_all(attempt(make_diloco(), ck[1], [&](auto& a, int) { load_string(a, bad); }), "checksum mismatch in end marker");
    // The checksum is what refused it: the same edit with the checksums recomputed is a
    // valid checkpoint, and it loads (this is not a defence against deliberate edits).
    bad = good;
    bad[snap + 5] ^= 0x10;
    CHECK(rechecksum(bad) < records_in(good));
    const auto errors = attempt(make_diloco(), ck[1], [&](auto& a, int) {
        load_string(a, bad);
        if (save_of(a) != bad) throw std::logic_error("the edited snapshot was not applied");
    });
    for (const auto& e : errors) CHECK(e.empty());
}

TEST_CASE("checkpoint: older and unknown format versions are refused by name") {
    const auto ck = checkpoints(make_sparta(), {4, 6});
    auto with_version = [&](std::uint32_t v) {
        std::string s = ck[0];
        std::memcpy(s.data() + 8, &v, 4);
        rechecksum(s);
        return s;
    };
    check_all(attempt(make_sparta(), ck[1], [&](auto& a, int) { load_string(a, with_version(2)); }),
              "checkpoint: format version 2 (an older trickle's, without checksums, or a damaged header); this build "
              "reads format version 3 only");
    check_all(attempt(make_sparta(), ck[1], [&](auto& a, int) { load_string(a, with_version(1)); }), "format version 1");
    check_all(attempt(make_sparta(), ck[1], [&](auto& a, int) { load_string(a, with_version(4)); }),
              "unknown format version 4");
    check_all(attempt(make_sparta(), ck[1], [&](auto& a, int) { load_string(a, with_version(0xFFFFFFFFu)); }),
              "unknown format version 4294967295");
}

TEST_CASE("checkpoint: bytes after the end are refused by top-level loads, left by checkpoint_trailing::leave") {
    const auto d = checkpoints(make_diloco(), {4, 8});
    const auto sd = checkpoints(make_sparta_diloco(), {4, 8});
    const std::string after = "unexpected bytes after the end marker";
    // A stream: load() refuses by default.
    check_all(attempt(make_diloco(), d[1], [&](auto& a, int) { load_string(a, d[0] + "\n"); }), after);
    check_all(attempt(make_diloco(), d[1], [&](auto& a, int) { load_string(a, d[0] + d[0]); }), after);
    // SPARTA + DiLoCo: the SPARTA part may be followed by the DiLoCo part, nothing may
    // follow the DiLoCo part; the SPARTA part is put back when the DiLoCo part is refused.
    check_all(attempt(make_sparta_diloco(), sd[1], [&](auto& a, int) { load_string(a, sd[0] + std::string(3, '\0')); }),
              after);
    // A SPARTA + DiLoCo file is a SPARTA checkpoint with something after it.
    check_all(attempt(make_sparta(), checkpoints(make_sparta(), {8})[0], [&](auto& a, int) { load_string(a, sd[0]); }),
              after);

    // Files: load_checkpoint refuses an appended file on every worker; the file without
    // the appendix loads.
    const auto dir = std::filesystem::temp_directory_path() / "trickle_test_checkpoint_trailing";
    std::filesystem::create_directories(dir);
    for (int r = 0; r < N; ++r) {
        std::ofstream(dir / ("appended" + std::to_string(r)), std::ios::binary) << sd[0] << "appended";
        std::ofstream(dir / ("plain" + std::to_string(r)), std::ios::binary) << sd[0];
    }
    check_all(attempt(make_sparta_diloco(), sd[1],
                      [&](auto& a, int r) { load_checkpoint(a, (dir / ("appended" + std::to_string(r))).string()); }),
              after);
    for (const auto& e : attempt(make_sparta_diloco(), sd[1], [&](auto& a, int r) {
             load_checkpoint(a, (dir / ("plain" + std::to_string(r))).string());
             if (save_of(a) != sd[0]) throw std::logic_error("not restored");
         }))
        CHECK(e.empty());
    std::filesystem::remove_all(dir);

    // Two checkpoints in one stream: with `leave` the first load stops right after the
    // first checkpoint, and the second load (refusing what follows) reads the rest.
    const std::string two = d[0] + d[1];
    const auto errors = attempt(make_diloco(), d[1], [&](auto& a, int) {
        std::istringstream is(two);
        a.load(is, "two", checkpoint_trailing::leave);
        if (save_of(a) != d[0]) throw std::logic_error("first not loaded");
        if (is.tellg() != static_cast<std::streamoff>(d[0].size())) throw std::logic_error("read past the first");
        a.load(is, "two", checkpoint_trailing::refuse);
        if (save_of(a) != d[1]) throw std::logic_error("second not loaded");
    });
    for (const auto& e : errors) CHECK(e.empty());
}

TEST_CASE("checkpoint: names quoted from a file are escaped and capped") {
    CHECK(detail::quote_from_file("stats") == "'stats'");
    CHECK(detail::quote_from_file(std::string("a'b\\c\x01\n\x7f\xff", 9)) == "'a\\'b\\\\c\\x01\\x0a\\x7f\\xff'");
    CHECK(detail::quote_from_file(std::string(100, 'x')) == "'" + std::string(64, 'x') + "'... (100 bytes)");

    // A section name with control bytes (same length: only the name is checked first).
    const auto ck = checkpoints(make_sparta(), {3, 5});
    std::string bad = ck[0];
    const std::size_t name = 8 + 4 + 8 + u64_at(bad, 12) + 8 + 4 + 8;
    REQUIRE(bad.compare(name, 5, "stats") == 0);
    bad.replace(name, 5, std::string("s\x07\n\x1b", 4) + "[");
    auto errors = attempt(make_sparta(), ck[1], [&](auto& a, int) { load_string(a, bad); });
    check_all(errors, "expected section 'stats', found section 's\\x07\\x0a\\x1b['");
    CHECK(errors[0].find('\n') == std::string::npos);
    CHECK(errors[0].find('\x1b') == std::string::npos);

    // A kind of 200 bytes with a newline: shown escaped, cut at 64 bytes.
    std::ostringstream os;
    detail::checkpoint_writer w(os);
    w.header(std::string("evil\nkind") + std::string(191, 'k'), 0);
    w.finish();
    errors = attempt(make_sparta(), ck[1], [&](auto& a, int) { load_string(a, os.str()); });
    check_all(errors, "checkpoint: written by 'evil\\x0akind" + std::string(55, 'k') + "'... (200 bytes), expected 'sparta'");
    CHECK(errors[0].find('\n') == std::string::npos);
    // A name length beyond any name: refused before reading it.
    bad = ck[0];
    const std::uint64_t huge = 1ull << 40;
    std::memcpy(bad.data() + 12, &huge, 8);
    check_all(attempt(make_sparta(), ck[1], [&](auto& a, int) { load_string(a, bad); }),
              "corrupt header (the algorithm's kind would be 1099511627776 bytes long)");
}

TEST_CASE("sparta_diloco: a SPARTA part and a DiLoCo part of two checkpoints are refused, both parts unchanged") {
    const auto ck = checkpoints(make_sparta_diloco(), {5, 9});
    // The SPARTA part ends where the DiLoCo part's magic begins.
    auto split = [](const std::string& s) { return s.find("TRKLCKPT", 8); };
    const std::string mixed = ck[0].substr(0, split(ck[0])) + ck[1].substr(split(ck[1]));
    CHECK(records_in(mixed) == records_in(ck[0])); // every checksum of each part is right
    const auto state = checkpoints(make_sparta_diloco(), {11})[0];
    check_all(attempt(make_sparta_diloco(), state, [&](auto& a, int) { load_string(a, mixed); }),
              "checkpoint: the DiLoCo part is at step 9, the SPARTA part at 5 (parts of two different checkpoints)");
    // The SPARTA part alone: its load succeeds, the DiLoCo part is missing, the SPARTA part
    // is put back (the state is compared whole by attempt()).
    check_all(attempt(make_sparta_diloco(), state, [&](auto& a, int) { load_string(a, ck[0].substr(0, split(ck[0]))); }),
              "checkpoint: truncated in header");
}
