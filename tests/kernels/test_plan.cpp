// The device path's plan, computed on the host: tile plans of run selections (the pre-pass
// every CUDA exchange runs), the tile -> segment table of the DiLoCo passes, the vector
// split of a piece, the lanes per tile, and the one table search. A host emulation of the
// tile movers (plan, then pieces) must give gather_body's values and scatter_body's
// parameters bit for bit: that is what the CUDA agents compute, tested without a GPU.
#include <trickle/algorithm/flat_params.hpp>
#include <trickle/kernels.hpp>
#include <trickle/sampler.hpp>

#include "sampler_tests.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

using namespace trickle;
using trickle_test::test_layout;

namespace {

template <class T>
struct host_group {
    std::vector<std::vector<T>> tensors;
    param_group<T> group;
    explicit host_group(const std::vector<std::size_t>& sizes, int salt = 0) {
        tensors.reserve(sizes.size());
        for (std::size_t t = 0; t < sizes.size(); ++t) {
            std::vector<T> v(sizes[t]);
            for (std::size_t i = 0; i < v.size(); ++i)
                v[i] = from_float<T>(static_cast<float>(std::sin(0.37 * static_cast<double>(i) + salt + 3.0 * t)));
            tensors.push_back(std::move(v));
        }
        for (std::size_t t = 0; t < sizes.size(); ++t) {
            std::string name = "t"; // (appended, not "t" + to_string: g++ 12 -O3 warns falsely there, -Wrestrict)
            name += std::to_string(t);
            group.add(name, tensors[t].data(), tensors[t].size());
        }
    }
    std::vector<T> flat() const {
        std::vector<T> out;
        for (const auto& v : tensors) out.insert(out.end(), v.begin(), v.end());
        return out;
    }
};

// What one tile group of the CUDA tile kernel does, on the host: the planned first run,
// then run_at for the rest of the tile; each run moved piece by piece.
template <bool Gather, class T, class Sel>
void emulate_tiles(const flat_view<T>& params, const Sel& sel, float* buf, float scale) {
    const std::size_t count = sel.count();
    const std::size_t L = detail::tile_length(sel);
    const std::size_t tiles = detail::tile_count(count, L);
    auto move = [&](std::uint32_t seg, std::size_t pos, std::size_t k, std::size_t len) {
        if (seg == detail::no_segment) {
            if (Gather)
                for (std::size_t j = 0; j < len; ++j) buf[k + j] = 0.0f;
            return;
        }
        for_each_piece_from(params.segments + seg, pos, pos + len, [&](T* p, std::size_t i, std::size_t m) {
            float* w = buf + k + (i - pos);
            for (std::size_t j = 0; j < m; ++j) {
                if (Gather)
                    w[j] = to_float(p[j]);
                else
                    p[j] = from_float<T>(w[j] * scale);
            }
        });
    };
    for (std::size_t t = 0; t < tiles; ++t) {
        const detail::tile_plan pl = detail::plan_tile(params, sel, count, L, t);
        const std::size_t k0 = t * L, k1 = std::min(count, k0 + L);
        REQUIRE(pl.len >= 1);
        REQUIRE(k0 + pl.len <= k1);
        move(pl.seg, pl.pos, k0, pl.len);
        for (std::size_t k = k0 + pl.len; k < k1;) {
            const auto r = sel.run_at(k);
            const std::size_t len = std::min<std::size_t>(r.len, k1 - k);
            move(r.pos < params.total ? params.segment_of(r.pos) : detail::no_segment, r.pos, k, len);
            k += len;
        }
    }
}

template <class T, class Sampler>
void check_tiles(Sampler s, const std::vector<std::size_t>& sizes, double p) {
    host_group<T> g(sizes);
    flat_params<T, host_space> f(g.group);
    for (std::uint64_t step = 0; step < 4; ++step) {
        const auto sel = s.select(sampler_context{11, step, step, p, f.layout(), f.host_layout()});
        using sel_t = std::remove_cvref_t<decltype(sel)>;
        const std::size_t count = sel.count();
        REQUIRE(detail::uses_runs(sel));
        // Every tile's plan agrees with the selection position by position.
        const std::size_t L = detail::tile_length(sel);
        for (std::size_t t = 0; t < detail::tile_count(count, L); ++t) {
            const auto pl = detail::plan_tile(f.view(), sel, count, L, t);
            for (std::size_t j = 0; j < pl.len; ++j) {
                const std::size_t want = sel(t * L + j);
                if (pl.pos >= f.total()) {
                    CHECK(want >= f.total());
                } else {
                    REQUIRE(want == pl.pos + j);
                }
            }
            if (pl.pos < f.total()) {
                const auto& seg = f.host_view().segments[pl.seg];
                CHECK(seg.offset <= pl.pos);
                CHECK(pl.pos < seg.offset + seg.size);
            } else {
                CHECK(pl.seg == detail::no_segment);
            }
        }
        // The emulated movers give the bodies' bits.
        std::vector<float> ref(count), got(count, -7.0f);
        for_each_index(exec::host{}, count, gather_body<T, sel_t>{f.view(), sel, ref.data()});
        emulate_tiles<true>(f.view(), sel, got.data(), 1.0f);
        REQUIRE(std::memcmp(ref.data(), got.data(), count * sizeof(float)) == 0);
        host_group<T> a(sizes, 1), b(sizes, 1);
        flat_params<T, host_space> fa(a.group), fb(b.group);
        for (std::size_t k = 0; k < count; ++k) ref[k] = static_cast<float>(k % 977) * 0.013f - 3.0f;
        for_each_index(exec::host{}, count, scatter_body<T, sel_t>{fa.view(), sel, ref.data(), 0.25f});
        emulate_tiles<false>(fb.view(), sel, ref.data(), 0.25f);
        const auto fa_flat = a.flat(), fb_flat = b.flat();
        REQUIRE(std::memcmp(fa_flat.data(), fb_flat.data(), fa_flat.size() * sizeof(T)) == 0);
    }
}

} // namespace

TEST_CASE_TEMPLATE("tile plans of run selections give the bodies' bits", T, float, trickle::half, trickle::bfloat16) {
    const std::vector<std::size_t> sizes{1000, 3, 4099, 17, 2048, 777};
    for (std::size_t bs : {std::size_t{1}, std::size_t{32}, std::size_t{100}, std::size_t{256}, std::size_t{3000},
                           std::size_t{5000}})
        check_tiles<T>(sampler::block{.block_size = bs}, sizes, 0.2);
    // A rotating window wraps around the end of the group inside a tile.
    sampler::layerwise rot{.how = sampler::layerwise::mode::rotating};
    rot.cursor = 7000; // of 7944 positions: a window of 3972 wraps inside its first tile
    check_tiles<T>(rot, sizes, 0.5);
    check_tiles<T>(sampler::layerwise{.how = sampler::layerwise::mode::rotating}, sizes, 0.9);
}

TEST_CASE("tile_length: a block per tile up to long_run_tile, long runs cut into long_run_tile") {
    test_layout lay({100000});
    const auto b = sampler::block{.block_size = 256}.select(lay.context(1, 0, 0, 0.1));
    CHECK(detail::tile_length(b) == 256);
    const auto big = sampler::block{.block_size = 100000}.select(lay.context(1, 0, 0, 0.1));
    CHECK(detail::tile_length(big) == detail::long_run_tile);
    sampler::layerwise rot{.how = sampler::layerwise::mode::rotating};
    CHECK(detail::tile_length(rot.select(lay.context(1, 0, 0, 0.1))) == detail::long_run_tile);
    CHECK(detail::tile_count(0, 256) == 0);
    CHECK(detail::tile_count(257, 256) == 2);
}

TEST_CASE("tile_segments: each tile's first element lies in its segment") {
    host_group<float> g({5000, 1, 1, 8192, 4096, 3});
    flat_params<float, host_space> f(g.group);
    for (std::size_t tile : {std::size_t{1}, std::size_t{7}, std::size_t{4096}}) {
        const auto table = detail::tile_segments(f.host_view(), tile);
        REQUIRE(table.size() == (f.total() + tile - 1) / tile);
        for (std::size_t t = 0; t < table.size(); ++t) {
            const auto& s = f.host_view().segments[table[t]];
            CHECK(s.offset <= t * tile);
            CHECK(t * tile < s.offset + s.size);
        }
    }
}

TEST_CASE("split_for_vectors: a head to 16-byte alignment, whole vectors, a tail") {
    alignas(16) static float f[64];
    alignas(16) static std::uint16_t h[64];
    for (std::size_t off = 0; off < 8; ++off)
        for (std::size_t m : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{9}, std::size_t{40}}) {
            const auto s = detail::split_for_vectors(f + off, m);
            CHECK(s.head + 4 * s.vectors + s.tail == m);
            CHECK(s.tail < 4);
            if (s.vectors > 0) CHECK(detail::aligned16(f + off + s.head));
            CHECK(s.head < 4);
            const auto t = detail::split_for_vectors(h + off, m);
            CHECK(t.head + 8 * t.vectors + t.tail == m);
            if (t.vectors > 0) CHECK((reinterpret_cast<std::uintptr_t>(h + off + t.head) & 15u) == 0);
        }
    CHECK(detail::split_for_vectors(f, 16).head == 0);
    CHECK(detail::split_for_vectors(f, 16).vectors == 4);
    CHECK(detail::split_for_vectors(f + 1, 16).head == 3);
    CHECK(detail::split_for_vectors(f + 1, 16).vectors == 3);
    CHECK(detail::split_for_vectors(f + 1, 16).tail == 1);
}

TEST_CASE("tile_lane_shift: a lane per 16-byte vector, from 4 lanes to a warp") {
    CHECK(detail::tile_lane_shift(1, 4) == 2);   // 4 lanes, the fewest
    CHECK(detail::tile_lane_shift(32, 4) == 3);  // 8 vectors: 8 lanes
    CHECK(detail::tile_lane_shift(64, 4) == 4);
    CHECK(detail::tile_lane_shift(128, 4) == 5); // a warp
    CHECK(detail::tile_lane_shift(2048, 4) == 5);
    CHECK(detail::tile_lane_shift(64, 2) == 3);  // 64 bf16 values: 8 vectors
}

TEST_CASE("last_where: the one table search agrees with upper_bound") {
    for (std::uint32_t count = 1; count < 40; ++count) {
        std::vector<std::size_t> starts(count);
        for (std::uint32_t s = 0; s < count; ++s) starts[s] = s * 3 + (s % 4 == 1 ? 0 : 1) * (s > 0); // repeats: empty tensors
        std::sort(starts.begin(), starts.end());
        starts[0] = 0;
        for (std::size_t i = 0; i < starts.back() + 5; ++i) {
            const auto got = detail::last_where(count, [&](std::uint32_t s) { return starts[s] <= i; });
            const auto want = static_cast<std::uint32_t>(std::upper_bound(starts.begin(), starts.end(), i) - starts.begin() - 1);
            REQUIRE(got == want);
        }
    }
}
