// trickle/comm/thread_barrier.hpp: the host barrier where the threads of an in-process world meet (comm::local, comm::local_cuda).
#pragma once

#include <trickle/config.hpp>
#include <trickle/error.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// `size` threads meet in arrive_and_wait(); the last to arrive releases the others. A
// thread that waits longer than `timeout` (zero: for ever) aborts the barrier; after an
// abort every waiting and every later arrival throws trickle::comm_error naming the
// communicator (`who`), the operation and the reason. Irreversible.
class thread_barrier {
public:
    thread_barrier(const char* who, int size, std::chrono::milliseconds timeout)
        : who_(who), size_(size), timeout_(timeout) {}

    thread_barrier(const thread_barrier&) = delete;
    thread_barrier& operator=(const thread_barrier&) = delete;

    void arrive_and_wait(const char* op) {
        std::unique_lock lock(mutex_);
        if (aborted_) throw comm_error(std::string(who_) + " " + op + ": " + abort_reason_);
        const std::uint64_t gen = generation_;
        if (++arrived_ == size_) {
            arrived_ = 0;
            ++generation_;
            cv_.notify_all();
            return;
        }
        auto released = [&] { return generation_ != gen || aborted_; };
        if (timeout_.count() > 0) {
            if (!cv_.wait_for(lock, timeout_, released)) {
                aborted_ = true;
                abort_reason_ = std::string("timed out in ") + op + " waiting for peers";
                cv_.notify_all();
            }
        } else {
            cv_.wait(lock, released);
        }
        if (generation_ == gen) // released by abort, not by the last arrival
            throw comm_error(std::string(who_) + " " + op + ": " + abort_reason_);
    }

    void abort(std::string why) {
        std::lock_guard lock(mutex_);
        if (!aborted_) {
            aborted_ = true;
            abort_reason_ = std::move(why);
        }
        cv_.notify_all();
    }

    bool aborted() const {
        std::lock_guard lock(mutex_);
        return aborted_;
    }

private:
    const char* who_;
    int size_;
    std::chrono::milliseconds timeout_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    int arrived_ = 0;
    std::uint64_t generation_ = 0;
    bool aborted_ = false;
    std::string abort_reason_;
};

} // namespace detail

TRICKLE_NAMESPACE_END
