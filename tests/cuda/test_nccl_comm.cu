// comm::nccl on every visible GPU (one rank per device, one thread per rank): results, byte counts and argument checks.
#include <trickle/comm/local.hpp>
#include <trickle/comm/nccl.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>

#include <doctest/doctest.h>
#include <test_support.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

using namespace trickle;

namespace {

float wavy(int r, std::size_t i) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * r) * (1.0 + r) + 1e-3 * r);
}

const std::size_t reduce_sizes[] = {0, 1, 5, 1000, 4099};
constexpr std::size_t ring_n = 7, bcast_n = 9;

struct gathered_record {
    std::int32_t rank;
    char tag[4];
    double x;
};

// What one rank saw.
struct outcome {
    std::vector<std::vector<float>> sums;    // one per reduce_sizes entry
    std::vector<traffic_counters> sum_traffic;
    std::vector<float> from_left, broadcast;
    traffic_counters ring_traffic{}, bcast_traffic{}, gather_traffic{}, total{};
    std::vector<gathered_record> gathered;
    std::vector<std::string> errors;         // messages of the argument checks, in order
    int device_after = -1;
    std::string failure;                     // an unexpected exception
};

std::vector<float> to_host(const buffer<float, cuda_space>& b) {
    std::vector<float> h(b.size());
    copy_elements<host_space, cuda_space>(h.data(), b.data(), b.size());
    return h;
}

buffer<float, cuda_space> to_device(const std::vector<float>& h) {
    buffer<float, cuda_space> b(h.size());
    copy_elements<cuda_space, host_space>(b.data(), h.data(), h.size());
    return b;
}

template <class E, class Fn>
std::string thrown(Fn&& fn) {
    try {
        fn();
    } catch (const E& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("(other) ") + e.what();
    }
    return "(no exception)";
}

// The same sequence every rank runs; the data calls are enqueued and only made visible
// by synchronize() before each copy back.
void run_rank(ncclComm_t handle, int device, outcome& o) {
    TRICKLE_CUDA_CHECK(cudaSetDevice(device));
    cudaStream_t stream = nullptr;
    TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    try {
        comm::nccl c(handle, stream);
        const int N = c.size(), r = c.rank();
        for (std::size_t n : reduce_sizes) {
            std::vector<float> h(n);
            for (std::size_t i = 0; i < n; ++i) h[i] = wavy(r, i);
            auto d = to_device(h);
            const traffic_counters before = c.traffic();
            c.all_reduce_sum(d.data(), n);
            c.synchronize();
            o.sums.push_back(to_host(d));
            o.sum_traffic.push_back(c.traffic() - before);
        }

        std::vector<float> mine(ring_n);
        for (std::size_t i = 0; i < ring_n; ++i) mine[i] = wavy(r, i) + 100.0f;
        auto send = to_device(mine);
        buffer<float, cuda_space> recv(ring_n);
        traffic_counters before = c.traffic();
        c.send_recv(send.data(), ring_n, (r + 1) % N, recv.data(), ring_n, (r + N - 1) % N);
        c.synchronize();
        o.from_left = to_host(recv);
        o.ring_traffic = c.traffic() - before;

        std::vector<float> b(bcast_n);
        for (std::size_t i = 0; i < bcast_n; ++i) b[i] = wavy(r, i) - 7.0f;
        auto db = to_device(b);
        before = c.traffic();
        c.broadcast(db.data(), bcast_n, N - 1);
        c.synchronize();
        o.broadcast = to_host(db);
        o.bcast_traffic = c.traffic() - before;

        const gathered_record rec{r, {'n', 'c', static_cast<char>('0' + r % 10), 0}, 0.25 * r};
        o.gathered.resize(static_cast<std::size_t>(N));
        before = c.traffic();
        c.all_gather_bytes(&rec, o.gathered.data(), sizeof rec);
        o.gather_traffic = c.traffic() - before;
        c.barrier();
        o.total = c.traffic();

        // Bad arguments: local checks first, then the control-plane ones that every rank sees.
        std::vector<float> host(4, 1.0f);
        buffer<float, cuda_space> dev(4);
        o.errors.push_back(thrown<invalid_argument>([&] { c.all_reduce_sum(nullptr, 4); }));
        o.errors.push_back(thrown<invalid_argument>([&] { c.all_reduce_sum(host.data(), 4); }));
        o.errors.push_back(thrown<invalid_argument>([&] { c.broadcast(dev.data(), 4, N); }));
        o.errors.push_back(thrown<invalid_argument>([&] { c.send_recv(dev.data(), 4, N, dev.data(), 4, 0); }));
        o.errors.push_back(thrown<invalid_argument>([&] { c.send_recv(host.data(), 4, r, dev.data(), 4, r); }));
        o.errors.push_back(thrown<invalid_argument>([&] { c.all_gather_bytes(dev.data(), host.data(), 4); }));
        const traffic_counters after_errors = c.traffic();
        o.errors.push_back(after_errors == o.total ? "counters unchanged" : "counters changed");
        c.barrier();
        int now = -1;
        TRICKLE_CUDA_CHECK(cudaGetDevice(&now));
        o.device_after = now;
    } catch (const std::exception& e) {
        o.failure = e.what();
    }
    cudaStreamDestroy(stream);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs fn(d, handle, stream) for one rank per visible GPU, one thread each, over
// ncclCommInitAll's communicators and a fresh non-blocking stream per rank; returns each
// rank's failure message ("" when it passed).
template <class Fn>
std::vector<std::string> on_every_gpu(Fn&& fn) {
    int N = 0;
    TRICKLE_CUDA_CHECK(cudaGetDeviceCount(&N));
    std::vector<ncclComm_t> handles(static_cast<std::size_t>(N));
    TRICKLE_NCCL_CHECK(ncclCommInitAll(handles.data(), N, nullptr));
    std::vector<std::string> failures(static_cast<std::size_t>(N));
    std::vector<std::thread> threads;
    for (int d = 0; d < N; ++d)
        threads.emplace_back([&, d] {
            try {
                TRICKLE_CUDA_CHECK(cudaSetDevice(d));
                cudaStream_t stream = nullptr;
                TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
                try {
                    fn(d, handles[static_cast<std::size_t>(d)], stream);
                } catch (...) {
                    cudaStreamDestroy(stream);
                    throw;
                }
                TRICKLE_CUDA_CHECK(cudaStreamDestroy(stream));
            } catch (const std::exception& e) {
                failures[static_cast<std::size_t>(d)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (auto h : handles) ncclCommDestroy(h);
    return failures;
}

// Work for the compute stream while a collective runs on the side stream.
struct scale_body {
    float* p;
    float k;
    TRICKLE_HOST_DEVICE void operator()(std::size_t i) const { p[i] *= k; }
};

} // namespace

TEST_CASE("nccl: a null communicator and NCCL error codes give clear errors") {
    CHECK(contains(thrown<invalid_argument>([] { comm::nccl c(nullptr, nullptr); }), "communicator is null"));
    const std::string msg = thrown<comm_error>(
        [] { detail::check_nccl(ncclInvalidArgument, "ncclAllReduce(a, b)", "f.cu", 3); });
    CHECK(contains(msg, "NCCL call 'ncclAllReduce(a, b)' failed at f.cu:3"));
    CHECK(contains(msg, ncclGetErrorString(ncclInvalidArgument)));
    CHECK_NOTHROW(detail::check_nccl(ncclSuccess, "ncclGroupEnd()", "f.cu", 4));
}

TEST_CASE("nccl: one rank per GPU: sums, shifts, broadcasts, gathers and the byte counts of comm::local") {
    int N = 0;
    TRICKLE_CUDA_CHECK(cudaGetDeviceCount(&N));
    REQUIRE(N >= 1);
    MESSAGE("comm::nccl over ", N, " GPU(s)");
    std::vector<ncclComm_t> handles(static_cast<std::size_t>(N));
    TRICKLE_NCCL_CHECK(ncclCommInitAll(handles.data(), N, nullptr));

    std::vector<outcome> out(static_cast<std::size_t>(N));
    std::vector<std::thread> threads;
    for (int d = 0; d < N; ++d)
        threads.emplace_back([&, d] { run_rank(handles[static_cast<std::size_t>(d)], d, out[static_cast<std::size_t>(d)]); });
    for (auto& t : threads) t.join();
    for (auto h : handles) ncclCommDestroy(h);

    // The byte counts comm::local reports for the same sequence.
    std::vector<traffic_counters> local_total(static_cast<std::size_t>(N));
    std::vector<std::vector<gathered_record>> local_gathered(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& l) {
        const int r = l.rank();
        for (std::size_t n : reduce_sizes) {
            std::vector<float> v(n, 1.0f);
            l.all_reduce_sum(v.data(), n);
        }
        std::vector<float> s(ring_n), g(ring_n), b(bcast_n);
        l.send_recv(s.data(), ring_n, (r + 1) % N, g.data(), ring_n, (r + N - 1) % N);
        l.broadcast(b.data(), bcast_n, N - 1);
        const gathered_record rec{};
        auto& all = local_gathered[static_cast<std::size_t>(r)];
        all.resize(static_cast<std::size_t>(N));
        l.all_gather_bytes(&rec, all.data(), sizeof rec);
        l.barrier();
        local_total[static_cast<std::size_t>(r)] = l.traffic();
    });

    for (int r = 0; r < N; ++r) {
        INFO("rank ", r);
        const outcome& o = out[static_cast<std::size_t>(r)];
        REQUIRE(o.failure == "");
        REQUIRE(o.sums.size() == std::size(reduce_sizes));
        for (std::size_t k = 0; k < std::size(reduce_sizes); ++k) {
            const std::size_t n = reduce_sizes[k];
            INFO("n = ", n);
            REQUIRE(o.sums[k].size() == n);
            // The same bits as rank 0.
            CHECK((n == 0 || std::memcmp(o.sums[k].data(), out[0].sums[k].data(), n * sizeof(float)) == 0));
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < n; ++i) {
                double exact = 0, magnitude = 0;
                for (int q = 0; q < N; ++q) {
                    exact += wavy(q, i);
                    magnitude += std::fabs(wavy(q, i));
                }
                wrong += std::fabs(o.sums[k][i] - exact) > 2e-7 * N * magnitude;
            }
            CHECK(wrong == 0);
            const std::uint64_t bytes = detail::all_reduce_bytes(n, sizeof(float), N, r);
            CHECK(o.sum_traffic[k] == traffic_counters{bytes, bytes, 1});
        }
        const int left = (r + N - 1) % N;
        for (std::size_t i = 0; i < ring_n; ++i) CHECK(o.from_left[i] == wavy(left, i) + 100.0f);
        CHECK(o.ring_traffic == traffic_counters{ring_n * 4, ring_n * 4, 1});
        for (std::size_t i = 0; i < bcast_n; ++i) CHECK(o.broadcast[i] == wavy(N - 1, i) - 7.0f);
        if (r == N - 1)
            CHECK(o.bcast_traffic == traffic_counters{static_cast<std::uint64_t>(N - 1) * bcast_n * 4, 0, 1});
        else
            CHECK(o.bcast_traffic == traffic_counters{0, bcast_n * 4, 1});
        for (int q = 0; q < N; ++q) {
            CHECK(o.gathered[static_cast<std::size_t>(q)].rank == q);
            CHECK(o.gathered[static_cast<std::size_t>(q)].tag[2] == '0' + q % 10);
            CHECK(o.gathered[static_cast<std::size_t>(q)].x == 0.25 * q);
        }
        const std::uint64_t gb = static_cast<std::uint64_t>(N - 1) * sizeof(gathered_record);
        CHECK(o.gather_traffic == traffic_counters{gb, gb, 1});
        CHECK(o.total == local_total[static_cast<std::size_t>(r)]);

        REQUIRE(o.errors.size() == 7);
        CHECK(contains(o.errors[0], "all_reduce_sum: null pointer with 4 elements"));
        CHECK(contains(o.errors[1], "all_reduce_sum: data is declared as CUDA memory but points to host memory"));
        CHECK(contains(o.errors[2], detail::concat("broadcast: root ", N, " out of range")));
        CHECK(contains(o.errors[3], detail::concat("send_recv: peer out of range (dst ", N, ", src 0")));
        CHECK(contains(o.errors[4], "send_recv: send is declared as CUDA memory but points to host memory"));
        CHECK(contains(o.errors[5], "all_gather_bytes: send is declared as host memory but points to CUDA device memory"));
        CHECK(o.errors[6] == "counters unchanged");
        CHECK(o.device_after == r);
    }
}

TEST_CASE("nccl all_gather and all_to_all: device blocks where their definition puts them, bytes of the cost model") {
    const auto failures = on_every_gpu([](int, ncclComm_t handle, cudaStream_t stream) {
        comm::nccl c(handle, stream);
        // The host helper's check, through device copies of its buffers.
        struct device_view {
            comm::nccl& c;
            int rank() const { return c.rank(); }
            int size() const { return c.size(); }
            traffic_counters traffic() const { return c.traffic(); }
            void through(const void* send, void* recv, std::size_t b, bool to_all) {
                const std::size_t in = to_all ? b * static_cast<std::size_t>(size()) : b;
                const std::size_t out = b * static_cast<std::size_t>(size());
                buffer<unsigned char, cuda_space> ds(in + 1), dr(out + 1);
                copy_elements<cuda_space, host_space>(ds.data(), static_cast<const unsigned char*>(send), in);
                if (to_all)
                    c.all_to_all(ds.data(), dr.data(), b);
                else
                    c.all_gather(ds.data(), dr.data(), b);
                c.synchronize();
                copy_elements<host_space, cuda_space>(static_cast<unsigned char*>(recv), dr.data(), out);
            }
            void all_to_all(const void* s, void* r, std::size_t b) { through(s, r, b, true); }
            void all_gather(const void* s, void* r, std::size_t b) { through(s, r, b, false); }
        } view{c};
        for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{65536}}) {
            const std::string bad = trickle_test::check_byte_collectives(view, bytes);
            if (!bad.empty()) throw std::logic_error(bad + " (" + std::to_string(bytes) + " bytes)");
        }
    });
    REQUIRE(!failures.empty());
    for (std::size_t r = 0; r < failures.size(); ++r) {
        INFO("rank ", r);
        CHECK(failures[r] == std::string());
    }
}

TEST_CASE("nccl side stream: a started all-reduce overlaps the compute stream's kernels and gives the blocking bits") {
    const auto failures = on_every_gpu([](int d, ncclComm_t handle, cudaStream_t stream) {
        cudaStream_t side = nullptr;
        TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        struct owned {
            cudaStream_t s;
            ~owned() { cudaStreamDestroy(s); }
        } keep{side};
        comm::nccl c(handle, stream);
        const int r = c.rank();
        if (thrown<invalid_argument>([&] { (void)c.start_all_reduce_sum(nullptr, 0); }).find("no side stream") ==
            std::string::npos)
            throw std::logic_error("a start without a side stream was not refused");
        c.set_side_stream(side);
        const std::size_t n = 100003;
        std::vector<float> h(n);
        for (std::size_t i = 0; i < n; ++i) h[i] = wavy(r, i);
        auto a = to_device(h), b = to_device(h), busy = to_device(std::vector<float>(1 << 20, 1.0f));
        c.all_reduce_sum(a.data(), n);
        const traffic_counters before = c.traffic();
        comm::nccl_request q = c.start_all_reduce_sum(b.data(), n);
        for_each_index(exec::cuda{stream, d}, std::size_t{1} << 20, scale_body{busy.data(), 1.5f});
        q.wait();
        c.synchronize();
        if (!q.test()) throw std::logic_error("test() after wait and synchronize");
        if (to_host(a) != to_host(b)) throw std::logic_error("the started all-reduce differs from the blocking one");
        if ((c.traffic() - before).bytes_sent != detail::all_reduce_bytes(n, 4, c.size(), r))
            throw std::logic_error("bytes of the started all-reduce");
    });
    REQUIRE(!failures.empty());
    for (std::size_t r = 0; r < failures.size(); ++r) {
        INFO("rank ", r);
        CHECK(failures[r] == std::string());
    }
}

#if TRICKLE_NCCL_HAS_SHRINK
TEST_CASE("nccl revoke and shrink: a new owned communicator over the survivors; the revoked one refuses work") {
    int N = 0;
    TRICKLE_CUDA_CHECK(cudaGetDeviceCount(&N));
    REQUIRE(N >= 1);

    // One GPU (whatever the machine has): nobody can be excluded, so shrink({}) gives a
    // new communicator over the same rank (ncclCommSplit), first beside a healthy parent,
    // then after the parent is revoked.
    {
        const int dev0 = 0;
        ncclComm_t handle = nullptr;
        TRICKLE_NCCL_CHECK(ncclCommInitAll(&handle, 1, &dev0));
        TRICKLE_CUDA_CHECK(cudaSetDevice(0));
        cudaStream_t stream = nullptr;
        TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        const std::size_t n = 4099;
        std::vector<float> h(n);
        for (std::size_t i = 0; i < n; ++i) h[i] = wavy(0, i);
        std::string failure;
        try {
            comm::nccl parent(handle, stream);
            CHECK(!parent.owns_communicator());
            CHECK(parent.native_handle() == handle);
            CHECK(contains(thrown<invalid_argument>([&] { (void)parent.shrink({0}); }),
                           "excluded ranks must not call shrink"));
            CHECK(contains(thrown<invalid_argument>([&] { (void)parent.shrink({1}); }), "out of range"));
            CHECK(contains(thrown<invalid_argument>([&] { (void)parent.shrink({-1}); }), "out of range"));
            CHECK(!parent.revoked());

            {
                comm::nccl copy = parent.shrink({}, comm::nccl::shrink_mode::quiescent);
                CHECK(copy.owns_communicator());
                CHECK(copy.native_handle() != handle);
                CHECK(copy.rank() == 0);
                CHECK(copy.size() == 1);
                CHECK(copy.device() == 0);
                CHECK(copy.stream() == stream);
                auto d = to_device(h);
                copy.all_reduce_sum(d.data(), n);
                copy.synchronize();
                CHECK(to_host(d) == h); // one rank: the sum is the input
                CHECK(copy.traffic().calls == 1);
                auto e = to_device(h);
                parent.all_reduce_sum(e.data(), n); // the parent still works beside it
                parent.synchronize();
                CHECK(to_host(e) == h);
            } // copy destroys its communicator (ncclCommDestroy)

#if TRICKLE_NCCL_HAS_REVOKE
            parent.revoke();
            CHECK(parent.revoked());
            auto d = to_device(h);
            CHECK(contains(thrown<comm_error>([&] { parent.all_reduce_sum(d.data(), n); }), "was revoked"));
            CHECK(contains(thrown<comm_error>([&] { parent.barrier(); }), "was revoked"));
            parent.synchronize(); // still allowed: drains the stream

            comm::nccl survivor = parent.shrink({}); // abort_in_flight; already quiescent
            CHECK(survivor.owns_communicator());
            CHECK(!survivor.revoked());
            CHECK(survivor.rank() == 0);
            CHECK(survivor.size() == 1);
            comm::nccl moved(std::move(survivor)); // ownership moves along
            CHECK(moved.owns_communicator());
            CHECK(!survivor.owns_communicator());
            CHECK(survivor.native_handle() == nullptr);
            moved.all_reduce_sum(d.data(), n);
            moved.barrier();
            CHECK(to_host(d) == h);
            const gathered_record rec{0, {'s', 'h', 'r', 0}, 0.5};
            gathered_record back{};
            moved.all_gather_bytes(&rec, &back, sizeof rec);
            CHECK(back.rank == 0);
            CHECK(back.x == 0.5);
#else
            MESSAGE("revoke: not in this NCCL (", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH, ")");
            CHECK(contains(thrown<invalid_argument>([&] { (void)parent.shrink({}); }), "shrink_mode::quiescent"));
#endif
        } catch (const std::exception& e) {
            failure = e.what();
        }
        cudaStreamDestroy(stream);
        (void)ncclCommAbort(handle); // abort: a revoked communicator is never finalized
        CHECK(failure == std::string());
    }

    // Two GPUs or more: ranks 0 .. N-2 drop rank N-1 as after its failure (revoke, then
    // shrink; without ncclCommRevoke, a planned departure: shrink with nothing in flight),
    // each on its own thread; rank N-1 does nothing.
    if (N < 2) {
        MESSAGE("shrink excluding a rank: skipped (needs 2 GPUs, found ", N, ")");
        return;
    }
    std::vector<ncclComm_t> handles(static_cast<std::size_t>(N));
    TRICKLE_NCCL_CHECK(ncclCommInitAll(handles.data(), N, nullptr));
    std::vector<std::string> failures(static_cast<std::size_t>(N - 1));
    std::vector<std::thread> threads;
    for (int d = 0; d + 1 < N; ++d)
        threads.emplace_back([&, d] {
            std::string& failure = failures[static_cast<std::size_t>(d)];
            cudaStream_t stream = nullptr;
            try {
                TRICKLE_CUDA_CHECK(cudaSetDevice(d));
                TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
                comm::nccl c(handles[static_cast<std::size_t>(d)], stream);
                if (!contains(thrown<invalid_argument>([&] { (void)c.shrink({N - 1, N - 1}); }), "excluded twice"))
                    failure = "a duplicate excluded rank was not refused";
#if TRICKLE_NCCL_HAS_REVOKE
                c.revoke();
                comm::nccl s = c.shrink({N - 1});
#else
                comm::nccl s = c.shrink({N - 1}, comm::nccl::shrink_mode::quiescent);
#endif
                if (s.size() != N - 1 || s.rank() != d || !s.owns_communicator())
                    failure = "rank " + std::to_string(s.rank()) + " of " + std::to_string(s.size()) + " after shrink";
                std::vector<float> mine(1000);
                for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(d * 1000 + i % 97);
                auto buf = to_device(mine);
                s.all_reduce_sum(buf.data(), mine.size());
                s.synchronize();
                const auto got = to_host(buf);
                for (std::size_t i = 0; i < got.size() && failure.empty(); ++i) {
                    float want = 0;
                    for (int q = 0; q + 1 < N; ++q) want += static_cast<float>(q * 1000 + i % 97);
                    if (got[i] != want) failure = "wrong sum at " + std::to_string(i);
                }
            } catch (const std::exception& e) {
                failure = e.what();
            }
            if (stream != nullptr) cudaStreamDestroy(stream);
        });
    for (auto& t : threads) t.join();
    for (auto h : handles) (void)ncclCommAbort(h);
    for (std::size_t r = 0; r < failures.size(); ++r) {
        INFO("rank ", r);
        CHECK(failures[r] == std::string());
    }
}
#endif
