// trickle/comm/async.hpp: non-blocking collectives for any host communicator, on a progress thread.
//
// comm::async<Comm> wraps a host communicator (comm::local, comm::mpi, comm::process_group)
// and runs every one of its operations on a progress thread of its own, in the order they
// were started. start_all_reduce_sum (and start_send_recv, start_all_gather,
// start_all_to_all, start_broadcast, and start_with for a whole exchange of several
// collectives) return at once with a request; the caller computes, then wait()s (or test()s). The blocking operations of the communicator concept are a
// start followed by a wait, so the wrapper is itself a trickle::communicator: pass it to an
// algorithm and use it for nothing else while it lives.
//
// Why a progress thread. The collectives of the wrapped communicator are themselves
// blocking and collective (every rank calls them in the same order); running them in order
// on one thread per rank keeps that contract while the rank's own thread computes, whatever
// the communicator. The results are the wrapped communicator's, bit for bit: the same
// operation runs, only on another thread.
//
// Rules:
//   - The memory an operation reads or writes must stay valid and untouched until its
//     request completes (wait() returned or test() returned true).
//   - Every rank must start the same operations in the same order (as for the blocking ones).
//   - Bytes are counted when an operation completes: traffic() is the wrapped
//     communicator's count after the last completed operation, and a request's wait()
//     returns what its own operation sent and received.
//   - An operation that throws (a bad argument, a peer that failed: comm::local's
//     comm_error after its world is aborted) completes its request with that exception,
//     which wait() rethrows; later operations still run.
//   - A request destroyed before completion waits for it (never a dangling write); the
//     wrapper's destructor waits for every started operation, then stops its thread. A
//     peer that never starts a matching operation blocks those waits exactly as it would
//     block the blocking call: give comm::local_world a timeout, or abort it.
//   - Over comm::mpi the progress thread calls MPI, so MPI must provide at least
//     MPI_THREAD_SERIALIZED (comm::mpi::thread_level_ok(), checked at construction).
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/comm/request.hpp>
#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

template <class Comm>
class async {
    static_assert(communicator<Comm>, "comm::async<Comm>: Comm must be a trickle::communicator");
    static_assert(std::is_same_v<typename Comm::memory_space, host_space>,
                  "comm::async wraps host communicators (comm::nccl is asynchronous on its stream already)");

public:
    using memory_space = host_space;
    using wrapped_type = Comm;

    // Starts the progress thread. The wrapped communicator must outlive the wrapper, and
    // nothing else may use it while the wrapper lives.
    explicit async(Comm& comm) : comm_(comm), rank_(comm.rank()), size_(comm.size()), traffic_(comm.traffic()) {
        if constexpr (requires { comm.thread_level_ok(); })
            require(comm.thread_level_ok(),
                    "comm::async: the wrapped communicator cannot be called from a progress thread (comm::mpi needs "
                    "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE from MPI_Init_thread)");
        thread_ = std::thread([this] { run(); });
    }

    async(const async&) = delete;
    async& operator=(const async&) = delete;

    // Waits for every started operation, then stops the progress thread.
    ~async() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

    int rank() const { return rank_; }
    int size() const { return size_; }
    traffic_counters traffic() const {
        std::lock_guard lock(mutex_);
        return traffic_;
    }
    // Operations started and not yet completed.
    std::size_t in_flight() const {
        std::lock_guard lock(mutex_);
        return queued_;
    }

    // ---- non-blocking
    request start_all_reduce_sum(float* data, std::size_t n) {
        return start([=](Comm& c) { c.all_reduce_sum(data, n); });
    }
    request start_send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        return start([=](Comm& c) { c.send_recv(send, n, dst, recv, m, src); });
    }
    request start_broadcast(float* data, std::size_t n, int root) {
        return start([=](Comm& c) { c.broadcast(data, n, root); });
    }
    request start_all_gather(const void* send, void* recv, std::size_t bytes)
        requires byte_communicator<Comm>
    {
        return start([=](Comm& c) { c.all_gather(send, recv, bytes); });
    }
    request start_all_to_all(const void* send, void* recv, std::size_t bytes)
        requires byte_communicator<Comm>
    {
        return start([=](Comm& c) { c.all_to_all(send, recv, bytes); });
    }

    // Starts fn(wrapped communicator) on the progress thread, after every operation
    // started before it: a whole exchange made of several collectives and the computation
    // between them (an encoded all-reduce: encode, all_to_all, reduce, all_gather, decode)
    // runs while the caller computes. Its request's wait() returns what fn sent and
    // received, and rethrows what fn threw. The same rules as the other starts: every rank
    // starts the same work in the same order, and fn's memory stays untouched until then.
    template <class Fn>
        requires std::is_invocable_v<Fn&, Comm&>
    request start_with(Fn fn) {
        return start([fn = std::move(fn)](Comm& c) mutable { fn(c); });
    }

    // ---- blocking (the communicator concept): start, then wait
    void all_reduce_sum(float* data, std::size_t n) { start_all_reduce_sum(data, n).wait(); }
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        start_send_recv(send, n, dst, recv, m, src).wait();
    }
    void broadcast(float* data, std::size_t n, int root) { start_broadcast(data, n, root).wait(); }
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        start([=](Comm& c) { c.all_gather_bytes(send, recv, bytes); }).wait();
    }
    void all_gather(const void* send, void* recv, std::size_t bytes)
        requires byte_communicator<Comm>
    {
        start_all_gather(send, recv, bytes).wait();
    }
    void all_to_all(const void* send, void* recv, std::size_t bytes)
        requires byte_communicator<Comm>
    {
        start_all_to_all(send, recv, bytes).wait();
    }
    void barrier() {
        start([](Comm& c) { c.barrier(); }).wait();
    }
    // Waits for every operation started so far.
    void synchronize() {
        start([](Comm& c) { c.synchronize(); }).wait();
    }

    // Runs fn(wrapped communicator) on the progress thread once every operation started
    // before it has run, and returns its result: how to read what the wrapped communicator
    // keeps (comm::process_group's collectives(), say) without racing an operation.
    template <class Fn>
    auto inspect(Fn fn) -> std::invoke_result_t<Fn&, Comm&> {
        using result = std::invoke_result_t<Fn&, Comm&>;
        if constexpr (std::is_void_v<result>) {
            start([fn](Comm& c) mutable { fn(c); }).wait();
        } else {
            std::optional<result> out;
            start([&out, fn](Comm& c) mutable { out.emplace(fn(c)); }).wait();
            return std::move(*out);
        }
    }

private:
    struct job {
        std::function<void(Comm&)> run;
        std::shared_ptr<request::state> done;
    };

    request start(std::function<void(Comm&)> fn) {
        auto s = std::make_shared<request::state>();
        {
            std::lock_guard lock(mutex_);
            require(!stopping_, "comm::async: the wrapper is shutting down");
            jobs_.push_back(job{std::move(fn), s});
            ++queued_;
        }
        cv_.notify_all();
        return request(std::move(s));
    }

    void run() {
        for (;;) {
            job j;
            {
                std::unique_lock lock(mutex_);
                cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
                if (jobs_.empty()) return; // stopping, and every started operation has run
                j = std::move(jobs_.front());
                jobs_.pop_front();
            }
            std::exception_ptr error;
            const traffic_counters before = comm_.traffic();
            try {
                j.run(comm_);
            } catch (...) {
                error = std::current_exception();
            }
            const traffic_counters after = comm_.traffic();
            {
                std::lock_guard lock(mutex_);
                traffic_ = after;
                --queued_;
            }
            {
                // Moved, so this thread keeps no reference to the exception the caller
                // rethrows and destroys.
                std::lock_guard lock(j.done->mutex);
                j.done->done = true;
                j.done->error = std::move(error);
                j.done->traffic = after - before;
            }
            j.done->cv.notify_all();
        }
    }

    Comm& comm_;
    const int rank_;
    const int size_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<job> jobs_;
    std::size_t queued_ = 0;
    bool stopping_ = false;
    traffic_counters traffic_;
    std::thread thread_;
};

} // namespace comm

TRICKLE_NAMESPACE_END
