// comm::local_cuda: N workers as threads over one GPU give comm::local's bits, byte counts
// and argument errors (all-reduce, send_recv, broadcast, and the byte collectives). (The algorithms over it, against the host: test_device_sparta.cu and
// test_device_diloco.cu.)
#include <trickle/comm/local.hpp>
#include <trickle/comm/local_cuda.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/host.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

using namespace trickle;

namespace {

using trickle_test::mixed;

constexpr int device = 0;

std::vector<float> values(int r, std::size_t n, int salt = 0) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = mixed(r + 7 * salt, i);
    return v;
}

// A worker's "training" between exchanges: x = c - x, one rounding, the same on both
// backends. Run on the worker's stream, it also checks that the peers' kernels and copies
// that read or write this buffer are ordered before and after it.
struct flip_body {
    float* v;
    float c;
    TRICKLE_HOST_DEVICE void operator()(std::size_t i) const { v[i] = c - v[i]; }
};

// Host vectors for comm::local.
struct host_side {
    std::vector<std::vector<float>> keep;
    float* make(const std::vector<float>& h) {
        keep.push_back(h);
        return keep.back().data(); // moving a vector keeps its elements where they are
    }
    std::vector<float> read(const float* p, std::size_t n) { return std::vector<float>(p, p + n); }
    exec::host exec() const { return {}; }
};

// Device buffers for comm::local_cuda: stream-ordered allocations on the worker's stream
// (cudaMallocAsync), filled by copies on that stream, which the peers' kernels and copies
// then read and write from their own streams. Nothing waits for the device until read(),
// which is called after synchronize().
struct device_side {
    exec::cuda ex;
    std::vector<std::vector<float>> staged; // host sources of copies that may still be in flight
    std::vector<buffer<float, cuda_space>> keep;
    float* make(const std::vector<float>& h) {
        buffer<float, cuda_space> b(h.size(), ex);
        staged.push_back(h);
        if (!h.empty())
            TRICKLE_CUDA_CHECK(cudaMemcpyAsync(b.data(), staged.back().data(), h.size() * sizeof(float),
                                               cudaMemcpyHostToDevice, ex.stream));
        keep.push_back(std::move(b));
        return keep.back().data();
    }
    std::vector<float> read(const float* p, std::size_t n) {
        std::vector<float> h(n);
        copy_elements<host_space, cuda_space>(h.data(), p, n, ex);
        return h;
    }
    exec::cuda exec() const { return ex; }
};

struct record {
    std::int32_t rank;
    char tag[4];
    double x;
};

// What one rank saw.
struct outcome {
    std::vector<std::vector<float>> arrays; // every result buffer, in script order
    std::vector<std::string> errors;        // the exception type of each deliberate mismatch
    std::vector<record> gathered;
    std::vector<traffic_counters> traffic;  // after each part of the script
    std::string failure;                    // an unexpected exception
};

template <class Fn>
std::string error_kind(Fn&& fn) {
    try {
        fn();
    } catch (const invalid_argument&) {
        return "invalid_argument";
    } catch (const comm_error&) {
        return "comm_error";
    } catch (const std::exception& e) {
        return std::string("other: ") + e.what();
    }
    return "none";
}

const std::size_t reduce_sizes[] = {0, 1, 3, 5, 1000, 4099, (std::size_t{1} << 20) + 3};
constexpr std::size_t big = std::size_t{1} << 22; // 16 MiB: copies long enough to overlap later work

// The same sequence on every rank, written once for both communicators. Data calls are
// enqueued back to back (on the device nothing waits between them); the results are read
// only at the end, after synchronize().
template <class Comm, class Side>
void script(Comm& c, Side& side, outcome& o) {
    const int N = c.size(), r = c.rank();
    const int right = (r + 1) % N, left = (r + N - 1) % N;
    const auto ex = side.exec();
    struct pending {
        const float* p;
        std::size_t n;
    };
    std::vector<pending> results;

    // All-reduce rounds with local work in between: every round's inputs differ by rank.
    for (std::size_t n : reduce_sizes) {
        float* p = side.make(values(r, n));
        for (int round = 0; round < 3; ++round) {
            c.all_reduce_sum(p, n);
            for_each_index(ex, n, flip_body{p, static_cast<float>(r + 1)});
        }
        c.all_reduce_sum(p, n);
        results.push_back({p, n});
    }
    o.traffic.push_back(c.traffic());

    // Ring shifts of uneven sizes, in both directions and to itself; the sender overwrites
    // its send buffer right after each call.
    for (std::size_t base : {std::size_t{1000}, big}) {
        const auto size_of = [&](int q) { return base + 17 * static_cast<std::size_t>(q); };
        float* send = side.make(values(r, size_of(r), 1));
        float* from_left = side.make(std::vector<float>(size_of(left)));
        float* from_right = side.make(std::vector<float>(size_of(right)));
        float* from_self = side.make(std::vector<float>(size_of(r)));
        c.send_recv(send, size_of(r), right, from_left, size_of(left), left);
        for_each_index(ex, size_of(r), flip_body{send, 3.0f});
        c.send_recv(send, size_of(r), left, from_right, size_of(right), right);
        for_each_index(ex, size_of(r), flip_body{send, 5.0f});
        c.send_recv(send, size_of(r), r, from_self, size_of(r), r);
        for_each_index(ex, size_of(r), flip_body{send, 7.0f});
        results.push_back({from_left, size_of(left)});
        results.push_back({from_right, size_of(right)});
        results.push_back({from_self, size_of(r)});
        results.push_back({send, size_of(r)});
    }
    o.traffic.push_back(c.traffic());

    // Broadcasts from the last and the first rank; the root overwrites its data after.
    for (const auto& [n, root] : {std::pair<std::size_t, int>{9, N - 1}, std::pair<std::size_t, int>{big, 0}}) {
        float* data = side.make(values(r, n, 2));
        c.broadcast(data, n, root);
        if (r == root) for_each_index(ex, n, flip_body{data, 11.0f});
        results.push_back({data, n});
    }
    o.traffic.push_back(c.traffic());

    // Byte collectives of uneven sizes; the sender overwrites its send buffer right after.
    for (std::size_t m : {std::size_t{1}, std::size_t{257}, big / 8}) {
        const auto M = static_cast<std::size_t>(N) * m;
        float* send = side.make(values(r, M, 4));
        float* gathered = side.make(std::vector<float>(M));
        float* exchanged = side.make(std::vector<float>(M));
        c.all_gather(send, gathered, m * sizeof(float));
        for_each_index(ex, M, flip_body{send, 13.0f});
        c.all_to_all(send, exchanged, m * sizeof(float));
        for_each_index(ex, M, flip_body{send, 17.0f});
        results.push_back({gathered, M});
        results.push_back({exchanged, M});
        results.push_back({send, M});
    }
    o.traffic.push_back(c.traffic());

    // Control plane and barrier.
    const record mine{r, {'l', 'c', static_cast<char>('0' + r % 10), 0}, 0.25 * r};
    o.gathered.resize(static_cast<std::size_t>(N));
    c.all_gather_bytes(&mine, o.gathered.data(), sizeof mine);
    c.barrier();
    o.traffic.push_back(c.traffic());

    // Mismatches both communicators detect on every rank; nothing moves, nothing is counted.
    if (N > 1) {
        float* p = side.make(values(r, 6, 3));
        o.errors.push_back(error_kind([&] { c.all_reduce_sum(p, r == 1 ? 6 : 5); }));
        o.errors.push_back(error_kind([&] { c.broadcast(p, 6, r == 0 ? 0 : 1); }));
        o.errors.push_back(error_kind([&] { c.broadcast(p, r == 0 ? 6 : 5, 0); }));
        o.errors.push_back(error_kind([&] { c.send_recv(p, 2, 0, p + 2, 2, 1); })); // all send to 0, receive from 1
        const std::uint64_t mine2[2] = {1, 2};
        std::vector<std::uint64_t> words(static_cast<std::size_t>(N) * 2);
        o.errors.push_back(error_kind([&] { c.all_gather_bytes(mine2, words.data(), r == 0 ? 8 : 16); }));
        float* wide = side.make(std::vector<float>(static_cast<std::size_t>(N) * 8));
        o.errors.push_back(error_kind([&] { c.all_gather(p, wide, r == 0 ? 8 : 12); }));
        o.errors.push_back(error_kind([&] { c.all_to_all(wide, wide + N * 4, r == N - 1 ? 4 : 8); }));
        results.push_back({p, 6});
        // Still usable afterwards.
        c.all_reduce_sum(p, 6);
        results.push_back({p, 6});
    }
    o.traffic.push_back(c.traffic());

    c.synchronize();
    for (const pending& q : results) o.arrays.push_back(side.read(q.p, q.n));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<outcome> run_host(int N) {
    std::vector<outcome> out(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& c) {
        host_side side;
        script(c, side, out[static_cast<std::size_t>(c.rank())]);
    });
    return out;
}

std::vector<outcome> run_device(int N) {
    std::vector<outcome> out(static_cast<std::size_t>(N));
    comm::run_local_cuda(N, device, [&](comm::local_cuda& c) {
        outcome& o = out[static_cast<std::size_t>(c.rank())];
        try {
            device_side side{exec::cuda{c.stream(), c.device()}, {}, {}};
            script(c, side, o);
        } catch (const std::exception& e) {
            o.failure = e.what();
            throw; // so that run_local_cuda aborts the peers instead of leaving them waiting
        }
    });
    return out;
}

template <class Fn>
std::vector<std::string> collect_errors(int N, Fn&& fn) {
    std::vector<std::string> errors(static_cast<std::size_t>(N));
    comm::run_local_cuda(N, device, [&](comm::local_cuda& c) {
        try {
            fn(c);
        } catch (const std::exception& e) {
            errors[static_cast<std::size_t>(c.rank())] = e.what();
        }
    });
    return errors;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

} // namespace

TEST_CASE("local_cuda: 1 to 4 workers on one GPU give comm::local's bits, byte counts and errors") {
    for (int N : {1, 2, 3, 4}) {
        INFO("N = ", N);
        const auto want = run_host(N);
        const auto got = run_device(N);
        for (int r = 0; r < N; ++r) {
            INFO("rank ", r);
            const outcome& h = want[static_cast<std::size_t>(r)];
            const outcome& d = got[static_cast<std::size_t>(r)];
            REQUIRE(d.failure == "");
            REQUIRE(h.failure == "");
            REQUIRE(d.arrays.size() == h.arrays.size());
            for (std::size_t k = 0; k < h.arrays.size(); ++k) {
                INFO("result #", k, " (", h.arrays[k].size(), " elements)");
                CHECK(same_bits(d.arrays[k], h.arrays[k]));
            }
            CHECK(d.errors == h.errors);
            for (const auto& e : d.errors) CHECK(e != "none");
            REQUIRE(d.traffic.size() == h.traffic.size());
            for (std::size_t k = 0; k < h.traffic.size(); ++k) CHECK(d.traffic[k] == h.traffic[k]);
            REQUIRE(d.gathered.size() == static_cast<std::size_t>(N));
            for (int q = 0; q < N; ++q) {
                CHECK(d.gathered[static_cast<std::size_t>(q)].rank == q);
                CHECK(d.gathered[static_cast<std::size_t>(q)].x == 0.25 * q);
            }
        }
        // The all-reduce results are the same on every rank.
        for (std::size_t k = 0; k < std::size(reduce_sizes); ++k)
            for (int r = 1; r < N; ++r) CHECK(same_bits(got[static_cast<std::size_t>(r)].arrays[k], got[0].arrays[k]));
    }
}

TEST_CASE("local_cuda: bad pointers, peers and roots throw invalid_argument on every rank, and nothing moves") {
    const int N = 3;
    std::vector<traffic_counters> before(N), after(N);
    std::vector<std::vector<std::string>> seen(N);
    std::vector<std::vector<float>> sums(N);
    comm::run_local_cuda(N, device, [&](comm::local_cuda& c) {
        const int r = c.rank();
        auto& e = seen[static_cast<std::size_t>(r)];
        std::vector<float> host(4, 1.0f);
        buffer<float, cuda_space> dev(4);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        before[static_cast<std::size_t>(r)] = c.traffic();
        const auto what = [&](auto&& fn) {
            try {
                fn();
            } catch (const invalid_argument& x) {
                return std::string("invalid_argument: ") + x.what();
            } catch (const std::exception& x) {
                return std::string("other: ") + x.what();
            }
            return std::string("none");
        };
        e.push_back(what([&] { c.all_reduce_sum(r == 1 ? nullptr : dev.data(), 4); }));
        e.push_back(what([&] { c.all_reduce_sum(r == 2 ? host.data() : dev.data(), 4); }));
        e.push_back(what([&] { c.broadcast(dev.data(), 4, N); }));
        e.push_back(what([&] { c.broadcast(r == 0 ? nullptr : dev.data(), 4, 1); }));
        const int to = r == 1 ? N : (r + 1) % N; // rank 1 names a peer that does not exist
        e.push_back(what([&] { c.send_recv(dev.data(), 4, to, dev.data(), 4, (r + N - 1) % N); }));
        e.push_back(what([&] { c.send_recv(dev.data(), 4, r, r == 0 ? host.data() : dev.data(), 4, r); }));
        e.push_back(what([&] { c.all_gather_bytes(dev.data(), host.data(), 4); }));
        buffer<float, cuda_space> wide(4 * N);
        e.push_back(what([&] { c.all_gather(dev.data(), r == 2 ? host.data() : wide.data(), 4); }));
        e.push_back(what([&] { c.all_to_all(r == 0 ? host.data() : wide.data(), wide.data(), 4); }));
        after[static_cast<std::size_t>(r)] = c.traffic();
        // Still usable: a sum of ones.
        buffer<float, cuda_space> ones(5);
        const std::vector<float> h1(5, 1.0f);
        copy_elements<cuda_space, host_space>(ones.data(), h1.data(), 5);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        c.all_reduce_sum(ones.data(), 5);
        c.synchronize();
        sums[static_cast<std::size_t>(r)].resize(5);
        copy_elements<host_space, cuda_space>(sums[static_cast<std::size_t>(r)].data(), ones.data(), 5);
    });
    for (int r = 0; r < N; ++r) {
        INFO("rank ", r);
        const auto& e = seen[static_cast<std::size_t>(r)];
        REQUIRE(e.size() == 9);
        for (const auto& s : e) CHECK(contains(s, "invalid_argument: comm::local_cuda"));
        // The rank at fault names its own problem; the others name the rank.
        CHECK(contains(e[0], r == 1 ? "data is null with 4 elements" : "rank 1 passed an invalid argument"));
        CHECK(contains(e[1], r == 2 ? "host memory" : "rank 2 passed an invalid argument"));
        CHECK(contains(e[2], "out of range"));
        CHECK(contains(e[3], r == 0 ? "null" : "rank 0 passed an invalid argument"));
        CHECK(contains(e[4], "rank 1 passed a peer out of range"));
        CHECK(contains(e[5], r == 0 ? "recv points to host memory" : "rank 0 passed an invalid argument"));
        CHECK(contains(e[6], "all_gather_bytes"));
        CHECK(contains(e[7], r == 2 ? "recv points to host memory" : "rank 2 passed an invalid argument"));
        CHECK(contains(e[8], r == 0 ? "send points to host memory" : "rank 0 passed an invalid argument"));
        CHECK(after[static_cast<std::size_t>(r)] == before[static_cast<std::size_t>(r)]);
        CHECK(sums[static_cast<std::size_t>(r)] == std::vector<float>(5, 3.0f));
    }
}

TEST_CASE("local_cuda: a mismatched count throws comm_error on every rank and leaves the buffers alone") {
    std::vector<std::vector<float>> kept(3);
    const auto errors = collect_errors(3, [&](comm::local_cuda& c) {
        const int r = c.rank();
        const std::vector<float> h(5, static_cast<float>(r + 1));
        buffer<float, cuda_space> d(5);
        copy_elements<cuda_space, host_space>(d.data(), h.data(), 5);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        try {
            c.all_reduce_sum(d.data(), r == 2 ? 5 : 4);
        } catch (...) {
            c.synchronize();
            kept[static_cast<std::size_t>(r)].resize(5);
            copy_elements<host_space, cuda_space>(kept[static_cast<std::size_t>(r)].data(), d.data(), 5);
            throw;
        }
    });
    for (int r = 0; r < 3; ++r) {
        CHECK(contains(errors[static_cast<std::size_t>(r)], "different element counts"));
        CHECK(contains(errors[static_cast<std::size_t>(r)], r == 2 ? "rank 0 passed 4" : "rank 2 passed 5"));
        CHECK(kept[static_cast<std::size_t>(r)] == std::vector<float>(5, static_cast<float>(r + 1)));
    }
}

TEST_CASE("local_cuda: a stream under graph capture is refused on every rank, and the capture stays empty") {
    const int N = 2;
    std::vector<std::vector<std::string>> seen(N);
    std::vector<std::size_t> nodes(N, 99);
    comm::run_local_cuda(N, device, [&](comm::local_cuda& c) {
        const int r = c.rank();
        buffer<float, cuda_space> d(4);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        auto& e = seen[static_cast<std::size_t>(r)];
        const bool capture = r == 1;
        if (capture) TRICKLE_CUDA_CHECK(cudaStreamBeginCapture(c.stream(), cudaStreamCaptureModeThreadLocal));
        e.push_back(error_kind([&] { c.all_reduce_sum(d.data(), 4); }));
        e.push_back(error_kind([&] { c.broadcast(d.data(), 4, 0); }));
        e.push_back(error_kind([&] { c.send_recv(d.data(), 4, 1 - r, d.data(), 4, 1 - r); }));
        e.push_back(error_kind([&] { c.barrier(); }));
        if (capture) {
            cudaGraph_t graph = nullptr;
            TRICKLE_CUDA_CHECK(cudaStreamEndCapture(c.stream(), &graph));
            std::size_t count = 0;
            TRICKLE_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
            nodes[1] = count;
            TRICKLE_CUDA_CHECK(cudaGraphDestroy(graph));
        }
        c.barrier(); // usable again once the capture has ended
    });
    for (int r = 0; r < N; ++r)
        CHECK(seen[static_cast<std::size_t>(r)] == std::vector<std::string>(4, "invalid_argument"));
    CHECK(nodes[1] == 0);
}

TEST_CASE("local_cuda_world: sizes, devices, ranks and streams are checked") {
    CHECK_THROWS_AS(comm::local_cuda_world(0, device), invalid_argument);
    CHECK_THROWS_AS(comm::local_cuda_world(comm::local_cuda_world::max_size + 1, device), invalid_argument);
    int devices = 0;
    TRICKLE_CUDA_CHECK(cudaGetDeviceCount(&devices));
    CHECK_THROWS_AS(comm::local_cuda_world(2, -1), invalid_argument);
    CHECK_THROWS_AS(comm::local_cuda_world(2, devices), invalid_argument);
    comm::local_cuda_world w(2, device);
    CHECK(w.size() == 2);
    CHECK(w.device() == device);
    cudaStream_t s = nullptr;
    TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_THROWS_AS(w.rank(2, s), invalid_argument);
    CHECK_THROWS_AS(w.rank(-1, s), invalid_argument);
    CHECK_THROWS_WITH_AS(w.rank(0, nullptr), doctest::Contains("legacy default stream"), invalid_argument);
    const comm::local_cuda c = w.rank(1, s);
    CHECK(c.rank() == 1);
    CHECK(c.size() == 2);
    CHECK(c.device() == device);
    CHECK(c.stream() == s);
    TRICKLE_CUDA_CHECK(cudaStreamDestroy(s));
    // The largest world works.
    comm::run_local_cuda(comm::local_cuda_world::max_size, device, [](comm::local_cuda& c) {
        buffer<float, cuda_space> d(3);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        c.all_reduce_sum(d.data(), 3);
        c.barrier();
    });
}

TEST_CASE("local_cuda: a failing worker aborts its peers, and a time-out ends a wait") {
    std::atomic<int> comm_errors{0};
    CHECK_THROWS_WITH_AS(comm::run_local_cuda(4, device,
                                              [&](comm::local_cuda& c) {
                                                  if (c.rank() == 3) throw std::runtime_error("worker 3 exploded");
                                                  try {
                                                      c.barrier();
                                                  } catch (const comm_error&) {
                                                      ++comm_errors;
                                                      throw;
                                                  }
                                              }),
                         "worker 3 exploded", std::runtime_error);
    CHECK(comm_errors == 3);

    comm::local_cuda_world world(2, device, std::chrono::milliseconds(50));
    cudaStream_t s = nullptr;
    TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto c0 = world.rank(0, s);
    CHECK_THROWS_WITH_AS(c0.barrier(), doctest::Contains("timed out"), comm_error);
    CHECK(world.aborted());
    TRICKLE_CUDA_CHECK(cudaStreamSynchronize(s));
    TRICKLE_CUDA_CHECK(cudaStreamDestroy(s));
}
