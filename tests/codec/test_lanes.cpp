// The lane forms of the encoded all-reduce's passes (kernels/codec_pass.hpp *_slots_lanes, with
// codec::lane_coder and for_each_lane_group's host emulation of the device's lanes): the
// bytes, values and residuals of the thread-per-block bodies and of the codecs' own
// encode_block, for every block codec, block size, lane count and rounding.
#include <trickle/codec.hpp>
#include <trickle/codec/lanes.hpp>
#include <trickle/exec/host.hpp>
#include <trickle/kernels/codec_pass.hpp>
#include <trickle/kernels/lane_group.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace trickle;
using trickle_test::bitwise_equal;

namespace {

// Inputs that reach every branch of the scale: mixed magnitudes with -0 and subnormals,
// NaN and infinities, a block of zeros, values near the end of the fp32 range, tiny ones.
std::vector<float> inputs(int kind, std::size_t n, int r = 0) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        float x = trickle_test::mixed(r, i);
        switch (kind) {
        case 1:
            if (i % 11 == 2) x = std::numeric_limits<float>::quiet_NaN();
            if (i % 13 == 4) x = (i & 1) ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
            break;
        case 2: x = (i % 3 == 0) ? -0.0f : 0.0f; break;
        case 3: x = std::ldexp(static_cast<float>(std::sin(0.7 * static_cast<double>(i) + r)), 127); break;
        case 4: x = std::numeric_limits<float>::denorm_min() * static_cast<float>(i % 7) * ((i & 1) ? -1.0f : 1.0f); break;
        case 5: x = std::abs(x) + 1.0f; break; // all positive: min-max with lo = 0
        default: break;
        }
        v[i] = x;
    }
    return v;
}

template <class C>
std::string name_of(const C& c) {
    config_record rec("codec");
    c.describe(rec);
    return rec.serialize();
}

// One worker's encode pass, both forms, with error feedback on or off and to nearest or
// stochastically: the same slot bytes and residuals. (The thread-per-block form leaves the
// fed-back values in the array, its scratch; the lane form recomputes them and leaves the
// array as it was.)
template <class C>
void check_encode(const C& c, std::size_t n, int ranks, unsigned shift, bool feedback, bool stochastic, int kind) {
    const std::size_t B = c.block_values();
    const slot_layout at{n, B, (n + B - 1) / B, codec::reduce_scratch::slot_bytes(c, n, ranks), ranks};
    const auto x = inputs(kind, n);
    auto r0 = inputs(0, n, 3);
    std::vector<float> va = x, vb = x, ra = r0, rb = r0;
    std::vector<std::byte> sa(static_cast<std::size_t>(ranks) * at.E, std::byte{0x5a}), sb = sa;
    const codec::philox_words words{7, 11};
    const auto run = [&](const auto& w) {
        using W = std::remove_cvref_t<decltype(w)>;
        for_each_index(exec::host{}, at.blocks,
                       encode_slots_body<C, W>{c, at, {va.data()}, feedback ? ra.data() : nullptr, 0.9f, sa.data(), w});
        for_each_lane_group(exec::host{}, at.blocks, shift,
                            encode_slots_lanes<codec::lane_coder<C>, W>{{{c}}, at, {vb.data()}, feedback ? rb.data() : nullptr,
                                                                        0.9f, sb.data(), w});
    };
    if (stochastic) {
        if constexpr (requires(const float* i, std::byte* o) { c.encode_block(i, n, o, words, std::size_t{}); }) run(words);
    } else {
        run(nearest_words{});
    }
    INFO(name_of(c), " n=", n, " ranks=", ranks, " G=", 1u << shift, " feedback=", feedback, " stochastic=", stochastic,
         " inputs=", kind);
    CHECK(bitwise_equal(sa, sb));
    CHECK(bitwise_equal(vb, x));
    if (!feedback) CHECK(bitwise_equal(va, x));
    CHECK(bitwise_equal(ra, rb));
}

// The sum pass of worker `me` over slots encoded by `ranks` workers, and the decode pass.
template <class C>
void check_sum_decode(const C& c, std::size_t n, int ranks, unsigned shift, bool stochastic) {
    const std::size_t B = c.block_values();
    const slot_layout at{n, B, (n + B - 1) / B, codec::reduce_scratch::slot_bytes(c, n, ranks), ranks};
    // Worker q's slots: the chunks of its own values.
    std::vector<std::vector<std::byte>> slots(static_cast<std::size_t>(ranks));
    for (int q = 0; q < ranks; ++q) {
        auto v = inputs(q % 2 ? 1 : 0, n, q);
        slots[static_cast<std::size_t>(q)].assign(static_cast<std::size_t>(ranks) * at.E, std::byte{0});
        for_each_index(exec::host{}, at.blocks,
                       encode_slots_body<C>{c, at, {v.data()}, nullptr, 0.0f, slots[static_cast<std::size_t>(q)].data(), {}});
    }
    const codec::philox_words words{5, 9};
    for (int me = 0; me < ranks; ++me) {
        // What worker `me` receives from the all-to-all: slot q holds worker q's chunk `me`.
        std::vector<std::byte> in(static_cast<std::size_t>(ranks) * at.E);
        for (int q = 0; q < ranks; ++q)
            std::memcpy(in.data() + static_cast<std::size_t>(q) * at.E,
                        slots[static_cast<std::size_t>(q)].data() + static_cast<std::size_t>(me) * at.E, at.E);
        const std::size_t chunk = codec::reduce_scratch::max_chunk_values(c, n, ranks);
        std::vector<float> suma(chunk), part(chunk), sumb(chunk);
        std::vector<std::byte> outa(at.E, std::byte{0x33}), outb = outa;
        const auto run = [&](const auto& w) {
            using W = std::remove_cvref_t<decltype(w)>;
            for_each_index(exec::host{}, at.chunk_blocks(me),
                           sum_slots_body<C, W>{c, at, me, in.data(), suma.data(), part.data(), outa.data(), w});
            for_each_lane_group(exec::host{}, at.chunk_blocks(me), shift,
                                sum_slots_lanes<codec::lane_coder<C>, W>{{{c}}, at, me, in.data(), sumb.data(), outb.data(), w});
        };
        if (stochastic) {
            if constexpr (requires(const float* i, std::byte* o) { c.encode_block(i, n, o, words, std::size_t{}); })
                run(words);
        } else {
            run(nearest_words{});
        }
        INFO(name_of(c), " n=", n, " ranks=", ranks, " me=", me, " G=", 1u << shift, " stochastic=", stochastic);
        CHECK(bitwise_equal(outa, outb));
        const std::size_t mine = at.chunk_values(me);
        CHECK(std::memcmp(suma.data(), sumb.data(), mine * sizeof(float)) == 0);
    }
    // Decode: every block from its owner's slot of worker 0's bytes.
    std::vector<float> da(n, 1.0f), db(n, 2.0f);
    for_each_index(exec::host{}, at.blocks, decode_slots_body<C>{c, at, slots[0].data(), {da.data()}});
    for_each_lane_group(exec::host{}, at.blocks, shift,
                        decode_slots_lanes<codec::lane_coder<C>>{{{c}}, at, slots[0].data(), {db.data()}});
    INFO(name_of(c), " decode n=", n, " G=", 1u << shift);
    CHECK(bitwise_equal(da, db));
}

template <class C>
void check_codec(const C& c) {
    for (std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{64}, std::size_t{203}, std::size_t{1000}})
        for (unsigned shift = 0; shift <= 5; ++shift)
            for (int kind = 0; kind <= 5; ++kind) {
                check_encode(c, n, 1, shift, false, false, kind);
                check_encode(c, n, 3, shift, kind % 2 == 0, kind == 1 || kind == 4, kind);
            }
    for (std::size_t n : {std::size_t{7}, std::size_t{300}, std::size_t{1111}})
        for (unsigned shift : {0u, 2u, 5u})
            for (int ranks : {1, 2, 5}) {
                check_sum_decode(c, n, ranks, shift, false);
                check_sum_decode(c, n, ranks, shift, true);
            }
}

} // namespace

TEST_CASE("lane forms of the encoded all-reduce's passes: the thread-per-block bodies' bytes, values and residuals") {
    check_codec(codec::int8_block{});
    check_codec(codec::int8_block{.block_size = 33, .symmetric = false});
    check_codec(codec::int4_block{.block_size = 7});
    check_codec(codec::int4_block{.block_size = 256, .symmetric = false});
    check_codec(codec::sign2_block{});
    check_codec(codec::sign2_block{.block_size = 3});
    check_codec(codec::fp8_block{});
    check_codec(codec::fp8_block{.block_size = 100, .e5m2 = true});
}

TEST_CASE("lane coder: a block's extent is the combine of its quads' extents, and its quads rebuild encode_block") {
    const codec::int8_block c{.block_size = 64, .symmetric = false};
    const codec::lane_coder<codec::int8_block> lc{{c}};
    for (int kind = 0; kind <= 5; ++kind) {
        const auto x = inputs(kind, 61);
        // The block's extent in one pass (what encode_block derives its scale from).
        const codec::block_extent whole = codec::extent_of<codec::block_format<8, codec::scheme::minmax>>(x.data(), x.size());
        codec::block_extent parts{};
        for (std::size_t j = 0; j < x.size(); j += 4) parts = lc.combine(parts, lc.extent(x.data() + j, std::min<std::size_t>(4, x.size() - j)));
        CHECK(whole.pos == parts.pos);
        CHECK(whole.neg == parts.neg);
        std::vector<std::byte> a(c.block_bytes(x.size()), std::byte{1}), b(a.size(), std::byte{2});
        c.encode_block(x.data(), x.size(), a.data());
        const auto p = lc.params(parts);
        lc.store_header(p, b.data());
        // The quads in reverse order: each writes only its own bytes.
        for (std::size_t q = (x.size() + 3) / 4; q-- > 0;) {
            const std::size_t j = 4 * q;
            lc.encode_quad(p, x.data() + j, std::min<std::size_t>(4, x.size() - j), j, x.size(), b.data(), nullptr);
        }
        CHECK(bitwise_equal(a, b));
    }
}

namespace {

// A body whose extent is a bit mask of lanes: after the butterfly every lane must hold all of them.
struct mask_body {
    struct extent_type {
        std::uint32_t bits = 0;
    };
    std::uint32_t* seen = nullptr; // per unit and lane: the total it got
    static extent_type combine(const extent_type& a, const extent_type& b) { return {a.bits | b.bits}; }
    extent_type first(std::size_t, unsigned lane, unsigned) const { return {1u << lane}; }
    void second(std::size_t unit, unsigned lane, unsigned, const extent_type& e) const { seen[unit * 32 + lane] = e.bits; }
};

} // namespace

TEST_CASE("for_each_lane_group: every lane of a group gets the group's total; too many lanes are refused") {
    for (unsigned shift = 0; shift <= 5; ++shift) {
        std::vector<std::uint32_t> seen(3 * 32, 0);
        for_each_lane_group(exec::host{}, 3, shift, mask_body{seen.data()});
        const unsigned G = 1u << shift;
        const std::uint32_t all = G == 32 ? 0xffffffffu : (1u << G) - 1u;
        for (std::size_t u = 0; u < 3; ++u)
            for (unsigned l = 0; l < 32; ++l) CHECK(seen[u * 32 + l] == (l < G ? all : 0u));
    }
    std::vector<std::uint32_t> seen(32, 0);
    CHECK_THROWS_AS(for_each_lane_group(exec::host{}, 1, 6, mask_body{seen.data()}), invalid_argument);
    for (std::uint32_t s : seen) CHECK(s == 0u);
    CHECK(lane_group_shift(1) == 0);
    CHECK(lane_group_shift(4) == 0);
    CHECK(lane_group_shift(5) == 1);
    CHECK(lane_group_shift(64) == 4);
    CHECK(lane_group_shift(128) == 5);
    CHECK(lane_group_shift(4096) == 5);
}
