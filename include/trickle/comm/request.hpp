// trickle/comm/request.hpp: the completion of a started operation, and the concept of a
// communicator that starts operations (comm::async, comm/async.hpp, implements both).
//
// Apart from the progress thread that runs them, so that an algorithm that may start
// operations (streaming fragments, overlapped SPARTA) compiles without it.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>

#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

template <class Comm>
class async;

// The completion of one started operation.
class request {
public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&& o) noexcept {
        if (this != &o) {
            finish_quietly();
            state_ = std::move(o.state_);
        }
        return *this;
    }
    request(const request&) = delete;
    request& operator=(const request&) = delete;
    ~request() { finish_quietly(); }

    // Whether this request names an operation (a default-constructed one does not).
    bool valid() const { return state_ != nullptr; }

    // Blocks until the operation has completed; rethrows its exception, once. Returns what
    // the operation itself sent and received (the wrapped communicator's count across it),
    // so a caller counts exactly the bytes of the algorithm the communicator chose.
    traffic_counters wait() {
        if (!state_) return {};
        std::unique_lock lock(state_->mutex);
        state_->cv.wait(lock, [&] { return state_->done; });
        std::exception_ptr error = std::exchange(state_->error, nullptr);
        const traffic_counters traffic = state_->traffic;
        lock.unlock();
        state_.reset();
        if (error) std::rethrow_exception(error);
        return traffic;
    }

    // Whether the operation has completed (then wait() returns at once).
    bool test() const {
        if (!state_) return true;
        std::lock_guard lock(state_->mutex);
        return state_->done;
    }

private:
    template <class>
    friend class async;

    struct state {
        std::mutex mutex;
        std::condition_variable cv;
        bool done = false;
        std::exception_ptr error;
        traffic_counters traffic{};
    };

    explicit request(std::shared_ptr<state> s) : state_(std::move(s)) {}

    // A request dropped unwaited: wait for the operation (its memory may still be in use),
    // and drop its error (a destructor must not throw; the peers see the same failure).
    void finish_quietly() noexcept {
        if (!state_) return;
        std::unique_lock lock(state_->mutex);
        state_->cv.wait(lock, [&] { return state_->done; });
        lock.unlock();
        state_.reset();
    }

    std::shared_ptr<state> state_;
};

// Whether a communicator can start operations without blocking (comm::async).
template <class C>
concept async_communicator = communicator<C> && requires(C& c, float* f, std::size_t n) {
    { c.start_all_reduce_sum(f, n) } -> std::same_as<request>;
};

// Whether a communicator can also run a whole exchange of the communicator it wraps on
// its progress thread (comm::async::start_with): what lets an encoded exchange overlap.
template <class C>
concept job_communicator = async_communicator<C> && requires(C& c) {
    typename C::wrapped_type;
    { c.start_with([](typename C::wrapped_type&) {}) } -> std::same_as<request>;
};

} // namespace comm

TRICKLE_NAMESPACE_END
