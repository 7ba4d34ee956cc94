// benchmarks/check_fast_paths.cpp: the benchmarked fast paths write exactly what the one-position bodies write (bit for bit).
//
// The range bodies (runs, bulk positions, bucket lookups, prefetch pipelines) and the SIMD
// Philox lanes are what bench_host measures and what sparta::exchange launches. Here every
// sampler, dtype and awkward layout (tiny tensors, runs across tensor boundaries, padding,
// wrap-around, call ranges that split runs) is run through both forms and compared
// byte for byte. Exit status 0 when all agree.
#include <trickle/core/dtype.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/exec/host.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/sparse_exchange.hpp>
#include <trickle/sampler/block.hpp>
#include <trickle/sampler/feistel.hpp>
#include <trickle/sampler/layerwise.hpp>
#include <trickle/sampler/permutation.hpp>
#include <trickle/sampler/random_batch.hpp>
#include <trickle/sampler/uniform.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace trickle;

int failures = 0;
int checks = 0;

bool same_floats(const std::vector<float>& a, const std::vector<float>& b, std::size_t n) {
    return n == 0 || std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0;
}

void expect(bool ok, const std::string& what) {
    ++checks;
    if (!ok) {
        ++failures;
        if (failures <= 20) std::printf("MISMATCH: %s\n", what.c_str());
    }
}

// A group of separately allocated tensors (not packed: addresses do not follow offsets).
template <class T>
struct group {
    std::vector<std::vector<T>> tensors;
    std::vector<segment<T>> segs;
    std::vector<std::size_t> offsets;
    std::size_t total = 0;

    explicit group(const std::vector<std::size_t>& sizes) {
        for (std::size_t s : sizes) {
            std::vector<T> t(s);
            for (std::size_t i = 0; i < s; ++i)
                t[i] = from_float<T>(static_cast<float>((total + i) % 977) * 0.01f - 3.0f);
            tensors.push_back(std::move(t));
            total += s;
        }
        std::size_t off = 0;
        for (auto& t : tensors) {
            segs.push_back(segment<T>{t.data(), off, t.size()});
            offsets.push_back(off);
            off += t.size();
        }
        offsets.push_back(total);
    }
    flat_view<T> view() { return flat_view<T>{segs.data(), static_cast<std::uint32_t>(segs.size()), total}; }
    layout_view layout() const {
        return layout_view{offsets.data(), static_cast<std::uint32_t>(segs.size()), total};
    }
    std::vector<unsigned char> bytes() const {
        std::vector<unsigned char> b;
        for (const auto& t : tensors) {
            const auto* p = reinterpret_cast<const unsigned char*>(t.data());
            b.insert(b.end(), p, p + t.size() * sizeof(T));
        }
        return b;
    }
};

// Positions from an array, with padding (>= total) mixed in, and no bulk shortcut.
struct padded_selection {
    const std::uint64_t* idx;
    std::size_t size;
    std::size_t count() const { return size; }
    std::size_t operator()(std::size_t k) const { return static_cast<std::size_t>(idx[k]); }
};

template <class T, class Sel>
void compare(const std::vector<std::size_t>& sizes, const Sel& sel, const std::string& what) {
    const std::size_t count = sel.count();
    for (std::size_t range : {std::size_t{1}, std::size_t{4}, std::size_t{7}, std::size_t{33}, std::size_t{4096}}) {
        const std::string tag = what + " range " + std::to_string(range);
        // gather
        group<T> g(sizes);
        std::vector<float> ref(count + 1, -1.0f), fast(count + 1, -1.0f);
        for_each_index(exec::host{}, count, gather_body<T, Sel>{g.view(), sel, ref.data()});
        const range_body<gather_range_body<T, Sel>> gb{{g.view(), sel, fast.data()}, count, range};
        for_each_index(exec::host{}, gb.calls(), gb);
        expect(same_floats(ref, fast, ref.size()), "gather " + tag);
        // scatter, with distinct values so an out-of-order duplicate would show
        std::vector<float> vals(count);
        for (std::size_t k = 0; k < count; ++k) vals[k] = static_cast<float>(k % 1013) * 0.37f - 11.0f;
        group<T> a(sizes), b(sizes);
        for_each_index(exec::host{}, count, scatter_body<T, Sel>{a.view(), sel, vals.data(), 0.3f});
        const range_body<scatter_range_body<T, Sel>> sb{{b.view(), sel, vals.data(), 0.3f}, count, range};
        for_each_index(exec::host{}, sb.calls(), sb);
        expect(a.bytes() == b.bytes(), "scatter " + tag);
    }
    // The bodies exchange() picks for host memory.
    group<T> g(sizes);
    std::vector<float> ref(count), fast(count);
    for_each_index(exec::host{}, count, gather_body<T, Sel>{g.view(), sel, ref.data()});
    const auto mg = make_gather(g.view(), sel, fast.data());
    for_each_index(exec::host{}, mg.calls(), mg);
    expect(same_floats(ref, fast, count), "make_gather " + what);
}

template <class S>
void check_positions(const S& sel, std::size_t total, const std::string& what) {
    if constexpr (requires(std::uint64_t* o) { sel.positions(0, 0, o); }) {
        const std::size_t count = sel.count();
        std::vector<std::uint64_t> bulk(count + 3, 7);
        for (std::size_t k0 : {std::size_t{0}, std::size_t{1}, count / 3}) {
            if (k0 > count) continue;
            for (std::size_t m : {count - k0, std::size_t{0}, std::size_t{1}, std::size_t{31}}) {
                if (k0 + m > count) continue;
                sel.positions(k0, m, bulk.data());
                bool same = true;
                for (std::size_t j = 0; j < m; ++j) same = same && bulk[j] == sel(k0 + j);
                expect(same, "positions " + what + " k0 " + std::to_string(k0) + " m " + std::to_string(m));
            }
        }
    }
    if constexpr (detail::run_selection<S>) {
        if (sel.runs()) {
            // Every run starts at sel(k) and continues position by position, or is all padding.
            bool same = true;
            for (std::size_t k = 0; k < sel.count() && same;) {
                const auto r = sel.run_at(k);
                same = r.len >= 1 && k + r.len <= sel.count();
                for (std::size_t j = 0; j < r.len && same; ++j)
                    same = r.pos >= total ? sel(k + j) >= total : sel(k + j) == r.pos + j;
                k += r.len;
            }
            expect(same, "runs " + what);
        }
    }
}

template <class T, class Sampler>
void check_sampler(Sampler s, const std::vector<std::size_t>& sizes, const std::string& name) {
    group<T> g(sizes);
    for (double p : {0.0007, 0.01, 0.2, 1.0})
        for (std::uint64_t t = 0; t < 3; ++t) {
            const auto sel = s.select(sampler_context{99, t, t, p, g.layout(), g.layout()});
            const std::string what = name + " p " + std::to_string(p) + " t " + std::to_string(t) + " n " +
                                     std::to_string(g.total) + " " + dtype_traits<T>::name;
            check_positions(sel, g.total, what);
            compare<T>(sizes, sel, what);
        }
}

template <class T>
void check_dtype(bool full) {
    std::vector<std::vector<std::size_t>> layouts = {
        {1},
        {5000},
        {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5},
        {1000, 1, 1, 2, 700, 33, 4096, 5, 1},
    };
    // The large layout (117k elements) is the long sweep's: its positions walk the same
    // segment boundaries and run lengths as the one below, ten times over.
    if (full)
        layouts.push_back({70000, 12, 12, 3000, 17, 25000, 1, 9000});
    else
        layouts.push_back({7000, 12, 12, 300, 17, 2500, 1, 900});
    for (const auto& sizes : layouts) {
        check_sampler<T>(sampler::uniform{}, sizes, "uniform");
        check_sampler<T>(sampler::permutation{}, sizes, "permutation");
        for (std::size_t b : {1, 3, 32, 256, 1000})
            check_sampler<T>(sampler::block{b}, sizes, "block" + std::to_string(b));
        check_sampler<T>(sampler::layerwise{sampler::layerwise::mode::per_tensor}, sizes, "layerwise");
        check_sampler<T>(sampler::layerwise{sampler::layerwise::mode::rotating, 0}, sizes, "rotating");
        // padding mixed into random positions
        group<T> g(sizes);
        std::vector<std::uint64_t> idx(997);
        for (std::size_t k = 0; k < idx.size(); ++k)
            idx[k] = k % 5 == 0 ? g.total + k : bounded(random_u64(3, 4, k), g.total);
        compare<T>(sizes, padded_selection{idx.data(), idx.size()}, "padded n " + std::to_string(g.total));
    }
}

void check_philox_lanes() {
    std::vector<std::uint64_t> out(300);
    for (std::uint64_t k0 : {std::uint64_t{0}, std::uint64_t{12345}, (std::uint64_t{1} << 32) - 5,
                             ~std::uint64_t{0} - 400})
        for (std::size_t m : {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 64, 299}) {
            detail::random_u64_run(0x1234567890abcdefull, 0xfedcba0987654321ull, k0, m, out.data());
            bool same = true;
            for (std::size_t j = 0; j < m; ++j)
                same = same && out[j] == random_u64(0x1234567890abcdefull, 0xfedcba0987654321ull, k0 + j);
            expect(same, "random_u64_run k0 " + std::to_string(k0) + " m " + std::to_string(m));
        }
#if TRICKLE_PHILOX_SIMD
    // Every lane width this CPU can run, not only the one random_u64_run picks.
    const std::uint64_t k0 = (std::uint64_t{1} << 32) - 21;
    auto same_as_scalar = [&](std::size_t n, const char* what) {
        bool same = true;
        for (std::size_t j = 0; j < n; ++j) same = same && out[j] == random_u64(5, 6, k0 + j);
        expect(same, what);
    };
    detail::random_u64_steps<detail::sse2_lanes>(5, 6, k0, 16, out.data());
    same_as_scalar(16 * 4, "sse2 lanes");
    if (detail::philox_simd_level() >= 1) {
        detail::random_u64_avx2(5, 6, k0, 8, out.data());
        same_as_scalar(8 * 8, "avx2 lanes");
    }
    if (detail::philox_simd_level() >= 2) {
        detail::random_u64_avx512(5, 6, k0, 4, out.data());
        same_as_scalar(4 * 32, "avx512 lanes");
    }
#endif
}

// Bulk Feistel images against one at a time, for sizes that walk rarely and often.
void check_feistel() {
    std::vector<std::uint64_t> out(1000);
    for (std::uint64_t n : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{5}, std::uint64_t{1000},
                            (std::uint64_t{1} << 20) + 1, std::uint64_t{66823168}, (std::uint64_t{1} << 34) - 3})
        for (std::uint64_t key : {std::uint64_t{0}, std::uint64_t{0x9e3779b97f4a7c15ull}}) {
            const feistel_permutation f(n, key);
            for (std::uint64_t x0 : {std::uint64_t{0}, n / 2}) {
                const std::size_t m = static_cast<std::size_t>(std::min<std::uint64_t>(n - x0, out.size()));
                f.images(x0, m, out.data());
                bool same = true;
                for (std::size_t j = 0; j < m; ++j) same = same && out[j] == f(x0 + j);
                expect(same, "feistel images n " + std::to_string(n) + " x0 " + std::to_string(x0));
            }
        }
}

// The same for the 32-bit network of the layerwise sampler's tensor permutations, up to n = 2^32.
void check_feistel32() {
    std::vector<std::uint64_t> out(1000);
    for (std::uint64_t n : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{5}, std::uint64_t{1000},
                            (std::uint64_t{1} << 20) + 1, std::uint64_t{786432}, (std::uint64_t{1} << 32) - 3,
                            std::uint64_t{1} << 32})
        for (std::uint64_t key : {std::uint64_t{0}, std::uint64_t{0x9e3779b97f4a7c15ull}}) {
            const feistel32_permutation f(n, key);
            for (std::uint64_t x0 : {std::uint64_t{0}, n / 2, n - std::min<std::uint64_t>(n, 37)}) {
                const std::size_t m = static_cast<std::size_t>(std::min<std::uint64_t>(n - x0, out.size()));
                f.images(x0, m, out.data());
                bool same = true;
                for (std::size_t j = 0; j < m; ++j) same = same && out[j] == f(x0 + j) && out[j] < n;
                expect(same, "feistel32 images n " + std::to_string(n) + " x0 " + std::to_string(x0));
            }
        }
}

// The bf16 store of the scatter runs (vectorized, and on x86-64 the version picked for
// this CPU) against the scalar conversion, for every sign, exponent and high mantissa,
// with low halves at the rounding edges.
void check_bf16_rounding() {
    std::vector<float> in;
    for (std::uint32_t hi = 0; hi <= 0xffffu; ++hi)
        for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
            in.push_back(detail::bits_float((hi << 16) | lo));
    std::vector<bfloat16> out(in.size());
    detail::store_run(out.data(), in.data(), 1.0f, in.size());
    bool same = true;
    for (std::size_t j = 0; j < in.size(); ++j) same = same && out[j].bits == detail::float_to_bf16_bits(in[j]);
    expect(same, "bf16 rounding of scatter runs (NaN, inf, ties, subnormals)");
}

} // namespace

// Under AddressSanitizer (the Debug test build) the sweep is sized to finish well inside
// its ctest limit on a loaded two-core machine; --full (or a build without sanitizers)
// runs the long one.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

int main(int argc, char** argv) {
    bool full = !sanitized;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--full") {
            full = true;
        } else if (a == "--quick") {
            full = false;
        } else {
            std::fprintf(stderr, "bench_check: unknown option '%s' (use --full for the long sweep, --quick for the short one)\n",
                         argv[i]);
            return 2;
        }
    }
    const auto t0 = std::chrono::steady_clock::now();
    check_bf16_rounding();
    check_philox_lanes();
    check_feistel();
    check_feistel32();
    check_dtype<float>(full);
    check_dtype<half>(full);
    check_dtype<bfloat16>(full);
#if TRICKLE_PHILOX_SIMD
    const char* lanes = detail::philox_simd_name();
#else
    const char* lanes = "scalar";
#endif
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%d checks, %d mismatches (Philox lanes: %s; %s sweep, %.1f s)\n", checks, failures, lanes,
                full ? "full" : "quick", secs);
    return failures == 0 ? 0 : 1;
}
