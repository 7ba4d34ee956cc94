// CUDA: the SPARTA and DiLoCo kernel bodies give the host backend's bits on the device, and
// the algorithm engines run on device parameters over comm::nccl (one rank per GPU).
#include <trickle/trickle.hpp>
#if TRICKLE_HAS_NCCL
#include <trickle/comm/nccl.hpp>
#endif

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace trickle;

namespace {

template <class T>
std::vector<T> host_values(std::size_t n, int salt) {
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = from_float<T>(static_cast<float>(std::sin(0.01 * i + salt)));
    return v;
}

template <class T>
buffer<T, cuda_space> to_device(const std::vector<T>& h) {
    buffer<T, cuda_space> b(h.size());
    copy_elements<cuda_space, host_space>(b.data(), h.data(), h.size());
    return b;
}

template <class T>
std::vector<T> to_host(const T* d, std::size_t n) {
    TRICKLE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n);
    copy_elements<host_space, cuda_space>(h.data(), d, n);
    return h;
}

// Gathers and scatters with one sampler's selection on both backends and compares bits.
template <class T, class Sampler>
void check_gather_scatter(Sampler s) {
    const std::size_t na = 100003, nb = 4099;
    auto ha = host_values<T>(na, 1), hb = host_values<T>(nb, 2);
    auto da = to_device(ha), db = to_device(hb);
    param_group<T> hg{{"a", ha.data(), na}, {"b", hb.data(), nb}};
    param_group<T, cuda_space> dg{{"a", da.data(), na}, {"b", db.data(), nb}};
    flat_params<T, host_space> hf(hg);
    flat_params<T, cuda_space> df(dg);
    for (std::uint64_t step = 0; step < 3; ++step) {
        Sampler hs = s, ds = s;
        const auto hsel = hs.select(sampler_context{7, step, step, 0.01, hf.layout(), hf.host_layout()});
        const auto dsel = ds.select(sampler_context{7, step, step, 0.01, df.layout(), df.host_layout()});
        REQUIRE(hsel.count() == dsel.count());
        const std::size_t count = hsel.count();
        std::vector<float> hbuf(count);
        buffer<float, cuda_space> dbuf(count);
        using hsel_t = std::remove_cvref_t<decltype(hsel)>;
        using dsel_t = std::remove_cvref_t<decltype(dsel)>;
        for_each_index(exec::host{}, count, gather_body<T, hsel_t>{hf.view(), hsel, hbuf.data()});
        for_each_index(exec::cuda{}, count, gather_body<T, dsel_t>{df.view(), dsel, dbuf.data()});
        const auto back = to_host(dbuf.data(), count);
        REQUIRE(std::memcmp(back.data(), hbuf.data(), count * sizeof(float)) == 0);
        for_each_index(exec::host{}, count, scatter_body<T, hsel_t>{hf.view(), hsel, hbuf.data(), 0.5f});
        for_each_index(exec::cuda{}, count, scatter_body<T, dsel_t>{df.view(), dsel, dbuf.data(), 0.5f});
        const auto a2 = to_host(da.data(), na);
        const auto b2 = to_host(db.data(), nb);
        REQUIRE(std::memcmp(a2.data(), ha.data(), na * sizeof(T)) == 0);
        REQUIRE(std::memcmp(b2.data(), hb.data(), nb * sizeof(T)) == 0);
    }
}

} // namespace

TEST_CASE_TEMPLATE("cuda gather/scatter bodies match the host bit for bit", T, float, trickle::half, trickle::bfloat16) {
    check_gather_scatter<T>(sampler::uniform{});
    check_gather_scatter<T>(sampler::permutation{});
    check_gather_scatter<T>(sampler::block{.block_size = 128});
    check_gather_scatter<T>(sampler::layerwise{});
    check_gather_scatter<T>(sampler::layerwise{.how = sampler::layerwise::mode::rotating});
}

TEST_CASE("cuda neighbour sums match the host") {
    const std::size_t n = 5000;
    auto a = host_values<float>(n, 3), l = host_values<float>(n, 4), r = host_values<float>(n, 5);
    auto da = to_device(a), dl = to_device(l), dr = to_device(r);
    for_each_index(exec::host{}, n, add_neighbours_body{a.data(), l.data(), r.data()});
    for_each_index(exec::cuda{}, n, add_neighbours_body{da.data(), dl.data(), dr.data()});
    const auto back = to_host(da.data(), n);
    CHECK(std::memcmp(back.data(), a.data(), n * sizeof(float)) == 0);
}

TEST_CASE("cuda pruning (CUB segmented sort) zeroes exactly the entries the host zeroes") {
    const std::vector<std::size_t> sizes{1000, 1, 37, 20000};
    std::vector<std::size_t> off{0};
    for (auto z : sizes) off.push_back(off.back() + z);
    const std::size_t n = off.back();
    std::vector<float> h(n);
    for (std::size_t i = 0; i < n; ++i) // many exact ties, both signs
        h[i] = static_cast<float>(static_cast<int>(random_u64(3, 0, i) % 50) - 25) * 0.125f;
    h[5] = NAN;
    auto d = to_device(h);
    auto doff = to_device(off);
    const layout_view host_lay{off.data(), static_cast<std::uint32_t>(sizes.size()), n};
    const layout_view dev_lay{doff.data(), static_cast<std::uint32_t>(sizes.size()), n};
    std::vector<std::uint64_t> keys;
    detail::prune_host(h.data(), host_lay, 0.4, keys);
    detail::prune_scratch scratch;
    detail::prune_reserve(exec::cuda{}, dev_lay, scratch);
    detail::prune_device(exec::cuda{}, d.data(), dev_lay, 0.4, scratch);
    const auto back = to_host(d.data(), n);
    CHECK(std::memcmp(back.data(), h.data(), n * sizeof(float)) == 0);
}

#if TRICKLE_HAS_NCCL
TEST_CASE("cuda sparta and diloco engines over comm::nccl on one GPU") {
    ncclComm_t nc;
    int dev = 0;
    REQUIRE(ncclCommInitAll(&nc, 1, &dev) == ncclSuccess);
    cudaStream_t stream;
    TRICKLE_CUDA_CHECK(cudaStreamCreate(&stream));
    {
        comm::nccl c(nc, stream);
        const std::size_t n = 65536;
        auto h = host_values<bfloat16>(n, 9);
        auto d = to_device(h);
        param_group<bfloat16, cuda_space> g{{"w", d.data(), n}};
        sparta_engine<sampler::block, schedule::constant, topology::all_reduce, bfloat16, cuda_space, comm::nccl> s(
            g, c, {.fraction = 0.05, .seed = 4}, sampler::block{.block_size = 256});
        for (int t = 0; t < 4; ++t) s.step(exec::cuda{stream});
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
        CHECK(s.stats().exchanges == 4);
        // One worker: the mean of one value is itself, so nothing changes.
        const auto back = to_host(d.data(), n);
        CHECK(std::memcmp(back.data(), h.data(), n * 2) == 0);

        diloco_engine<outer::average, topology::all_reduce, bfloat16, cuda_space, comm::nccl> dl(g, c, {.interval = 2});
        for (int t = 0; t < 4; ++t) dl.step(exec::cuda{stream});
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
        CHECK(dl.stats().exchanges == 2);
        const auto after = to_host(d.data(), n);
        CHECK(std::memcmp(after.data(), h.data(), n * 2) == 0);

        // A stream other than the communicator's is refused before anything is enqueued.
        CHECK_THROWS_AS(s.step(exec::cuda{nullptr}), invalid_argument);
    }
    ncclCommDestroy(nc);
    cudaStreamDestroy(stream);
}
#endif
