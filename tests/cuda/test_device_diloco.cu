// The device path end to end, DiLoCo and SPARTA + DiLoCo: N workers on one GPU give exactly
// the host's replicas; a SPARTA step captured in a CUDA graph and replayed gives the bits
// of uncaptured steps; configurations that cannot run on the device are refused.
#include "device_path.hpp"

using namespace device_path;

TEST_CASE_TEMPLATE("N workers on one GPU give the host's replicas: DiLoCo and SPARTA + DiLoCo", T, float,
                   trickle::bfloat16) {
    for (const auto& layout : {odd_layout, aligned_layout})
        for (int workers : {1, 2, 3}) {
            compare<T>(workers, layout, 6, make_diloco<outer::nesterov>({.interval = 3}), "diloco nesterov");
            compare<T>(workers, layout, 6, make_diloco<outer::adam, topology::ring>({.interval = 2}), "diloco adam ring");
            compare<T>(workers, layout, 6, make_diloco<outer::any>({.interval = 2}, outer::any(outer::momentum{.lr = 0.5})),
                       "diloco any(momentum)");
            compare<T>(workers, layout, 6,
                       make_diloco<outer::momentum>({.interval = 2, .seed = 2, .drop_probability = 0.3,
                                                     .prune_fraction = 0.25}),
                       "diloco momentum, drops, pruning");
            compare<T>(workers, layout, 6,
                       [](const auto& g, auto& c) {
                           return sparta_diloco<sampler::block>(g, c, {.fraction = 0.05, .seed = 1}, {.interval = 3},
                                                                sampler::block{.block_size = 128});
                       },
                       "sparta + diloco");
        }
}

namespace {

// A one-worker communicator over device memory whose "all-reduce" is an affine map done
// by a kernel on its stream (as if a second worker held 2x + 1): deterministic, stream
// ordered and capturable, so a graph replay can be checked value by value.
struct affine_body {
    float* data;
    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const { data[k] = data[k] + (data[k] + 1.0f); }
};

template <class Space>
struct affine_comm {
    using memory_space = Space;
    cudaStream_t stream_ = nullptr;
    int device_ = 0;
    traffic_counters t{};
    int rank() const { return 0; }
    int size() const { return 2; }
    cudaStream_t stream() const { return stream_; }
    int device() const { return device_; }
    void all_reduce_sum(float* d, std::size_t n) {
        if constexpr (std::is_same_v<Space, cuda_space>)
            for_each_index(exec::cuda{stream_, device_}, n, affine_body{d});
        else
            for_each_index(exec::host{}, n, affine_body{d});
        t.bytes_sent += n * 4;
        ++t.calls;
    }
    void all_gather_bytes(const void* s, void* r, std::size_t b) {
        std::memcpy(r, s, b);
        std::memcpy(static_cast<char*>(r) + b, s, b);
    }
    void send_recv(const float*, std::size_t, int, float*, std::size_t, int) {}
    void broadcast(float*, std::size_t, int) {}
    void barrier() {}
    void synchronize() {
        if constexpr (std::is_same_v<Space, cuda_space>) TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    traffic_counters traffic() const { return t; }
};

} // namespace

TEST_CASE("a SPARTA step captured in a CUDA graph replays with the bits of uncaptured steps") {
    const std::size_t n = 100003;
    std::vector<float> init(n);
    for (std::size_t i = 0; i < n; ++i) init[i] = static_cast<float>(i % 1000) * 0.001f;
    const int replays = 6;
    for (int which = 0; which < 2; ++which) {
        INFO((which == 0 ? "uniform" : "block 256"));
        // Host reference: 1 + replays steps.
        std::vector<float> host = init;
        affine_comm<host_space> hc;
        param_group<float> hg{{"w", host.data(), n}};
        auto run_host = [&](auto sampler) {
            sparta_engine<decltype(sampler), schedule::constant, topology::all_reduce, float, host_space,
                          affine_comm<host_space>>
                s(hg, hc, {.fraction = 0.01, .seed = 21}, sampler);
            for (int t = 0; t < 1 + replays; ++t) s.step(exec::host{});
        };
        // Device: one uncaptured step, then one captured and replayed `replays` times.
        cudaStream_t stream;
        TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        buffer<float, cuda_space> d(n);
        copy_elements<cuda_space, host_space>(d.data(), init.data(), n);
        affine_comm<cuda_space> dc;
        dc.stream_ = stream;
        param_group<float, cuda_space> dg{{"w", d.data(), n}};
        auto run_device = [&](auto sampler) {
            sparta_engine<decltype(sampler), schedule::constant, topology::all_reduce, float, cuda_space,
                          affine_comm<cuda_space>>
                s(dg, dc, {.fraction = 0.01, .seed = 21}, sampler);
            REQUIRE(s.replayable());
            s.step(exec::cuda{stream});
            cudaGraph_t graph;
            TRICKLE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            s.step(exec::cuda{stream});
            TRICKLE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            cudaGraphExec_t exec_graph;
            TRICKLE_CUDA_CHECK(cudaGraphInstantiate(&exec_graph, graph, 0));
            // The captured step ran nothing: replays do it all, each advancing the device step.
            for (int r = 0; r < replays; ++r) TRICKLE_CUDA_CHECK(cudaGraphLaunch(exec_graph, stream));
            TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
            s.replayed(replays - 1); // step() counted the captured call once
            CHECK(s.stats().steps == static_cast<std::uint64_t>(1 + replays));
            cudaGraphExecDestroy(exec_graph);
            cudaGraphDestroy(graph);
        };
        if (which == 0) {
            run_host(sampler::uniform{});
            run_device(sampler::uniform{});
        } else {
            run_host(sampler::block{.block_size = 256});
            run_device(sampler::block{.block_size = 256});
        }
        std::vector<float> back(n);
        copy_elements<host_space, cuda_space>(back.data(), d.data(), n);
        CHECK(std::memcmp(back.data(), host.data(), n * sizeof(float)) == 0);
        cudaStreamDestroy(stream);
    }
}

namespace {

// Calls step() inside a capture on `stream`, checks that it throws invalid_argument, and
// ends the capture whatever happened (the graph handle stays unset when it cannot end).
template <class Step>
void check_capture_refused(cudaStream_t stream, const Step& step) {
    TRICKLE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CHECK_THROWS_AS(step(), invalid_argument);
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
}

} // namespace

TEST_CASE("a configuration that cannot replay refuses to be captured") {
    cudaStream_t stream;
    TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
        buffer<float, cuda_space> d(4096);
        affine_comm<cuda_space> dc;
        dc.stream_ = stream;
        param_group<float, cuda_space> dg{{"w", d.data(), 4096}};
        sparta_engine<sampler::permutation, schedule::constant, topology::all_reduce, float, cuda_space,
                      affine_comm<cuda_space>>
            s(dg, dc, {.fraction = 0.01});
        CHECK(!s.replayable());
        check_capture_refused(stream, [&] { s.step(exec::cuda{stream}); });
    }
    cudaStreamDestroy(stream);
}

TEST_CASE("the legacy default stream and a foreign device are refused at construction") {
    buffer<float, cuda_space> d(1024);
    affine_comm<cuda_space> dc; // stream nullptr
    param_group<float, cuda_space> dg{{"w", d.data(), 1024}};
    using engine = sparta_engine<sampler::block, schedule::constant, topology::all_reduce, float, cuda_space,
                                 affine_comm<cuda_space>>;
    CHECK_THROWS_AS(engine(dg, dc, {.fraction = 0.01}), invalid_argument);
    int devices = 0;
    TRICKLE_CUDA_CHECK(cudaGetDeviceCount(&devices));
    cudaStream_t stream;
    TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    dc.stream_ = stream;
    {
        // A step that names another device than the parameters' is refused.
        engine e(dg, dc, {.fraction = 0.01});
        CHECK_THROWS_AS(e.step(exec::cuda{stream, devices}), invalid_argument);
        CHECK(e.stats().steps == 0);
    }
    dc.device_ = devices; // no such device
    CHECK_THROWS_AS(engine(dg, dc, {.fraction = 0.01}), invalid_argument);
    cudaStreamDestroy(stream);
}

TEST_CASE("a user's memory pool serves every buffer of the algorithms, stream-ordered") {
    cudaStream_t stream;
    TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    TRICKLE_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
    auto used = [&] {
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::uint64_t bytes = 0; // the attribute is a cuuint64_t
        TRICKLE_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &bytes));
        return bytes;
    };
    {
        const std::size_t n = 1 << 16;
        buffer<float, cuda_space> d(n);
        affine_comm<cuda_space> dc;
        dc.stream_ = stream;
        param_group<float, cuda_space> dg{{"w", d.data(), n}};
        CHECK(used() == 0);
        {
            sparta_engine<sampler::block, schedule::constant, topology::ring, float, cuda_space, affine_comm<cuda_space>> s(
                dg, dc, {.fraction = 0.01, .device_pool = pool});
            CHECK(used() > 0);
        }
        CHECK(used() == 0); // freed on the stream, into the pool
        {
            diloco_engine<outer::adam, topology::all_reduce, float, cuda_space, affine_comm<cuda_space>> dl(
                dg, dc, {.interval = 2, .prune_fraction = 0.1, .device_pool = pool});
            // snapshot, two state slots, the n + 1 send buffer, pruning keys: at least 4 + 8 + 4 + 16 bytes an element
            CHECK(used() >= n * 32);
            for (int t = 0; t < 4; ++t) dl.step(exec::cuda{stream});
            CHECK(used() >= n * 32);
        }
        CHECK(used() == 0);
    }
    TRICKLE_CUDA_CHECK(cudaMemPoolDestroy(pool));
    cudaStreamDestroy(stream);
}

TEST_CASE("DiLoCo with its state in pinned host memory gives the bits of device-resident state") {
    const std::size_t n = 30011;
    comm::run_local_cuda(2, 0, [&](comm::local_cuda& c) {
        const exec::cuda ex{c.stream(), c.device()};
        std::vector<float> init(n);
        for (std::size_t i = 0; i < n; ++i) init[i] = static_cast<float>((i * 37 + 11 * c.rank()) % 997) * 1e-3f;
        buffer<float, cuda_space> a(n, ex), b(n, ex);
        copy_elements<cuda_space, host_space>(a.data(), init.data(), n, ex);
        copy_elements<cuda_space, host_space>(b.data(), init.data(), n, ex);
        param_group<float, cuda_space> ga{{"w", a.data(), n}}, gb{{"w", b.data(), n}};
        diloco_engine<outer::nesterov, topology::all_reduce, float, cuda_space, comm::local_cuda> pinned(
            ga, c, {.interval = 2, .state_in_pinned_host = true});
        diloco_engine<outer::nesterov, topology::all_reduce, float, cuda_space, comm::local_cuda> resident(
            gb, c, {.interval = 2});
        flat_params<float, cuda_space> fa(ga, ex), fb(gb, ex);
        for (int s = 0; s < 6; ++s) {
            for_each_index(ex, n, perturb_body<float>{fa.view(), static_cast<std::uint64_t>(c.rank()), static_cast<std::uint64_t>(s)});
            for_each_index(ex, n, perturb_body<float>{fb.view(), static_cast<std::uint64_t>(c.rank()), static_cast<std::uint64_t>(s)});
            pinned.step(ex);
            resident.step(ex);
        }
        std::vector<float> ha(n), hb(n);
        copy_elements<host_space, cuda_space>(ha.data(), a.data(), n, ex);
        copy_elements<host_space, cuda_space>(hb.data(), b.data(), n, ex);
        CHECK(std::memcmp(ha.data(), hb.data(), n * sizeof(float)) == 0);
        CHECK(pinned.snapshot() == resident.snapshot());
    });
}

TEST_CASE("a DiLoCo step refuses to be captured") {
    cudaStream_t stream;
    TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
        buffer<float, cuda_space> d(4096);
        affine_comm<cuda_space> dc;
        dc.stream_ = stream;
        param_group<float, cuda_space> dg{{"w", d.data(), 4096}};
        diloco_engine<outer::nesterov, topology::all_reduce, float, cuda_space, affine_comm<cuda_space>> dl(
            dg, dc, {.interval = 3});
        check_capture_refused(stream, [&] { dl.step(exec::cuda{stream}); }); // not even a step without an outer step
        CHECK(dl.stats().steps == 0);
    }
    cudaStreamDestroy(stream);
}
