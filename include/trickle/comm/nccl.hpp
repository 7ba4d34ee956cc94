// trickle/comm/nccl.hpp: comm::nccl, one worker per GPU over the trainer's NCCL communicator and CUDA stream.
//
// Declares nothing unless TRICKLE_HAS_NCCL and TRICKLE_HAS_CUDA are 1 (link the
// trickle::nccl CMake target).
#pragma once

#include <trickle/config.hpp>

#if TRICKLE_HAS_NCCL && TRICKLE_HAS_CUDA

#include <trickle/comm/communicator.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// What this NCCL offers for dropping failed ranks, told by the macros its nccl.h defines
// with each function rather than by version numbers (NCCL 2.28.3 has ncclCommShrink but not
// yet ncclCommRevoke, 2.28.9 has both):
//   TRICKLE_NCCL_HAS_SHRINK   ncclCommShrink (NCCL_SHRINK_ABORT; 2.28.3 has it): comm::nccl::shrink()
//   TRICKLE_NCCL_HAS_REVOKE   ncclCommRevoke (NCCL_REVOKE_DEFAULT; 2.28.9 has it): comm::nccl::revoke()
#if defined(NCCL_SHRINK_ABORT) && defined(NCCL_SHRINK_DEFAULT)
#define TRICKLE_NCCL_HAS_SHRINK 1
#else
#define TRICKLE_NCCL_HAS_SHRINK 0
#endif
#if TRICKLE_NCCL_HAS_SHRINK && defined(NCCL_REVOKE_DEFAULT)
#define TRICKLE_NCCL_HAS_REVOKE 1
#else
#define TRICKLE_NCCL_HAS_REVOKE 0
#endif

TRICKLE_NAMESPACE_BEGIN

namespace detail {

inline void check_nccl(ncclResult_t code, const char* call, const char* file, int line) {
    if (code == ncclSuccess) return;
    std::string msg = concat("comm::nccl: NCCL call '", call, "' failed at ", file, ':', line, ": ",
                             ncclGetErrorString(code), " (", static_cast<int>(code), ")");
    // NCCL keeps a more specific description of the last failure of this thread.
    const char* last = ncclGetLastError(nullptr);
    if (last != nullptr && *last != '\0') msg += concat(": ", last);
    throw comm_error(msg);
}

} // namespace detail

// Checks an ncclResult_t and throws trickle::comm_error naming the call.
#define TRICKLE_NCCL_CHECK(call) ::trickle::detail::check_nccl((call), #call, __FILE__, __LINE__)

namespace comm {

// An operation started on comm::nccl's side stream. wait() orders the communicator's
// (compute) stream after it with an event, so later work on that stream sees the result;
// the host never waits. test() asks whether the device has finished it. A request
// destroyed unwaited still orders the compute stream after it (so no later kernel can
// race with the collective on its buffer), and its event is released once the device is
// done with it.
class nccl_request {
public:
    nccl_request() = default;
    nccl_request(nccl_request&& o) noexcept
        : done_(std::exchange(o.done_, nullptr)), compute_(o.compute_), device_(o.device_) {}
    nccl_request& operator=(nccl_request&& o) noexcept {
        if (this != &o) {
            finish();
            done_ = std::exchange(o.done_, nullptr);
            compute_ = o.compute_;
            device_ = o.device_;
        }
        return *this;
    }
    nccl_request(const nccl_request&) = delete;
    nccl_request& operator=(const nccl_request&) = delete;
    ~nccl_request() { finish(); }

    bool valid() const { return done_ != nullptr; }

    // The compute stream waits for the operation (enqueued; the host does not wait).
    void wait() {
        if (done_ == nullptr) return;
        detail::device_scope on(device_);
        const cudaError_t rc = cudaStreamWaitEvent(compute_, done_, 0);
        (void)cudaEventDestroy(std::exchange(done_, nullptr));
        detail::check_cuda(rc, "cudaStreamWaitEvent(compute, done)", __FILE__, __LINE__);
    }

    // Whether the device has finished the operation.
    bool test() const {
        if (done_ == nullptr) return true;
        detail::device_scope on(device_);
        const cudaError_t rc = cudaEventQuery(done_);
        if (rc == cudaErrorNotReady) return false;
        detail::check_cuda(rc, "cudaEventQuery(done)", __FILE__, __LINE__);
        return true;
    }

private:
    friend class nccl;
    nccl_request(cudaEvent_t done, cudaStream_t compute, int device) : done_(done), compute_(compute), device_(device) {}

    void finish() noexcept {
        if (done_ == nullptr) return;
        detail::device_scope on(device_);
        (void)cudaStreamWaitEvent(compute_, done_, 0);
        (void)cudaEventDestroy(std::exchange(done_, nullptr));
    }

    cudaEvent_t done_ = nullptr;
    cudaStream_t compute_ = nullptr;
    int device_ = 0;
};

// A trickle::communicator over the trainer's NCCL communicator and CUDA stream, neither
// of which it owns: both must outlive it, and the stream must belong to the
// communicator's device. Data pointers are device memory (cuda_space).
//
// Data operations (all_reduce_sum, send_recv, broadcast) are enqueued on the stream and
// return at once: the host never waits, and the data is ready for later work on the same
// stream. Their arguments are checked on this rank only (agreeing across ranks would
// make the host wait); every rank must pass the same counts and roots, which trickle's
// algorithms guarantee by agreeing on their layout at construction. all_gather_bytes
// and barrier are control-plane operations: they check arguments on every rank, and
// they wait for the stream.
//
// Waiting polls the stream and NCCL's asynchronous error state, so a failure NCCL
// detects (a peer that left, a network error) throws trickle::comm_error instead of
// blocking for ever. After a comm_error the NCCL communicator is unusable: the trainer
// should call ncclCommAbort on it.
//
// Dropping failed ranks (NCCL 2.28.9 has both; see TRICKLE_NCCL_HAS_REVOKE and _SHRINK):
// revoke() stops the communicator's work so that no survivor hangs on a lost peer, and
// shrink() makes a new communicator over the survivors, which the returned comm::nccl owns.
// Growing the world again takes a new communicator (docs/communicators.md, "Failures and
// timeouts").
class nccl {
public:
    using memory_space = cuda_space;

    // Over the trainer's communicator and stream, neither owned.
    nccl(ncclComm_t comm, cudaStream_t stream) : comm_(comm), stream_(stream) {
        require(comm != nullptr, "comm::nccl: the NCCL communicator is null");
        TRICKLE_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
        TRICKLE_NCCL_CHECK(ncclCommCount(comm_, &size_));
        TRICKLE_NCCL_CHECK(ncclCommCuDevice(comm_, &device_));
#if CUDART_VERSION >= 12080
        if (stream_ != nullptr) {
            int stream_device = -1;
            TRICKLE_CUDA_CHECK(cudaStreamGetDevice(stream_, &stream_device));
            require(stream_device == device_, "comm::nccl: the stream belongs to device ", stream_device,
                    " but the NCCL communicator to device ", device_);
        }
#endif
    }

    nccl(const nccl&) = delete;
    nccl& operator=(const nccl&) = delete;
    nccl(nccl&& o) noexcept
        : comm_(std::exchange(o.comm_, nullptr)), stream_(o.stream_), side_(o.side_), rank_(o.rank_), size_(o.size_),
          device_(o.device_), traffic_(o.traffic_), scratch_(std::move(o.scratch_)), token_(std::move(o.token_)),
          owned_(std::exchange(o.owned_, false)), revoked_(o.revoked_), failed_(o.failed_) {}
    nccl& operator=(nccl&& o) noexcept {
        if (this != &o) {
            release();
            comm_ = std::exchange(o.comm_, nullptr);
            stream_ = o.stream_;
            side_ = o.side_;
            rank_ = o.rank_;
            size_ = o.size_;
            device_ = o.device_;
            traffic_ = o.traffic_;
            scratch_ = std::move(o.scratch_);
            token_ = std::move(o.token_);
            owned_ = std::exchange(o.owned_, false);
            revoked_ = o.revoked_;
            failed_ = o.failed_;
        }
        return *this;
    }
    // Destroys the NCCL communicator only when this object owns it (one shrink() made):
    // ncclCommDestroy, or ncclCommAbort once it was revoked or reported a failure.
    ~nccl() { release(); }

    int rank() const { return rank_; }
    int size() const { return size_; }
    int device() const { return device_; }
    cudaStream_t stream() const { return stream_; }
    traffic_counters traffic() const { return traffic_; }

    // The NCCL communicator (the trainer's, or the one shrink() made, for the trainer's own
    // collectives over the survivors); null in a moved-from object.
    ncclComm_t native_handle() const { return comm_; }
    // Whether the destructor destroys that communicator (true for shrink()'s result only).
    bool owns_communicator() const { return owned_; }
    // Whether revoke() was called: every operation but synchronize() then throws.
    bool revoked() const { return revoked_; }

#if TRICKLE_NCCL_HAS_REVOKE
    // Stops this rank's work on the NCCL communicator (ncclCommRevoke): NCCL ends the
    // operations in flight (their buffers hold undefined data) and refuses new ones, so a
    // survivor whose peer failed does not hang. Local: each surviving rank calls it. Returns
    // once NCCL reports the communicator quiescent; it is then fit only for shrink() (and,
    // for its owner, ncclCommAbort or ncclCommDestroy; never ncclCommFinalize). Later
    // operations on this object throw comm_error, except synchronize(). The trainer's own
    // communicator is revoked as well when this object wraps it: it is the same one.
    void revoke() {
        require(comm_ != nullptr, "comm::nccl revoke: this communicator was moved from");
        if (revoked_) return;
        detail::device_scope on(device_);
        const ncclResult_t rc = ncclCommRevoke(comm_, NCCL_REVOKE_DEFAULT);
        if (rc != ncclInProgress) TRICKLE_NCCL_CHECK(rc);
        revoked_ = true;
        // ncclInProgress until quiescent. An error here is the failure that led to the
        // revoke (a peer lost): it is why the caller revokes, so it is not thrown again.
        if (settle(comm_) != ncclSuccess) failed_ = true;
    }
#endif

#if TRICKLE_NCCL_HAS_SHRINK
    // How shrink() treats operations still in flight on this communicator.
    enum class shrink_mode {
        // After a failure: NCCL first ends the operations in flight (NCCL_SHRINK_ABORT); the
        // new communicator shares no resources with this one.
        abort_in_flight,
        // Nothing is in flight (a planned departure, or after revoke()): NCCL_SHRINK_DEFAULT,
        // which may share this communicator's resources when its config set shrinkShare.
        quiescent,
    };

    // A new communicator without excluded_ranks (ncclCommShrink). Collective over the
    // survivors: every rank not in the list calls it, with the same list; the excluded ranks
    // (failed, or leaving) must not. The survivors keep their order and are renumbered from
    // 0 (a survivor's new rank is its old one less the excluded ranks below it). The result
    // uses this object's device, compute stream and side stream, starts its traffic counters
    // at zero, and owns its NCCL communicator (destroyed with it). This object is unchanged:
    // its communicator stays with its owner, who aborts it (ncclCommAbort) after a failure.
    //
    // The list may be in any order; a rank out of range, a duplicate or this rank itself
    // throws invalid_argument. After revoke() nothing is in flight and the mode does not
    // matter. An empty list (nobody lost, or a single GPU) gives a new communicator over the
    // same ranks, which every rank then calls (ncclCommSplit with one colour, since
    // ncclCommShrink refuses an empty list); under abort_in_flight it revokes this
    // communicator first, so that nothing is in flight (without ncclCommRevoke in this NCCL,
    // an empty list needs shrink_mode::quiescent).
    nccl shrink(std::span<const int> excluded_ranks, shrink_mode mode = shrink_mode::abort_in_flight) {
        require(comm_ != nullptr, "comm::nccl shrink: this communicator was moved from");
        std::vector<int> excluded(excluded_ranks.begin(), excluded_ranks.end());
        std::sort(excluded.begin(), excluded.end()); // ncclCommShrink would sort the caller's list in place
        for (std::size_t i = 0; i < excluded.size(); ++i) {
            require(excluded[i] >= 0 && excluded[i] < size_, "comm::nccl shrink: excluded rank ", excluded[i],
                    " out of range [0, ", size_, ")");
            require(i == 0 || excluded[i] != excluded[i - 1], "comm::nccl shrink: rank ", excluded[i],
                    " is excluded twice");
            require(excluded[i] != rank_, "comm::nccl shrink: rank ", rank_,
                    " is in the excluded list; excluded ranks must not call shrink");
        }
        detail::device_scope on(device_);
        ncclComm_t child = nullptr;
        ncclResult_t rc = ncclSuccess;
        const char* call = nullptr;
        if (excluded.empty()) {
#if TRICKLE_NCCL_HAS_REVOKE
            if (mode == shrink_mode::abort_in_flight) revoke();
#else
            require(mode == shrink_mode::quiescent, "comm::nccl shrink: with nobody excluded, this NCCL (",
                    NCCL_MAJOR, '.', NCCL_MINOR, '.', NCCL_PATCH, ", no ncclCommRevoke) cannot end the operations in ",
                    "flight; pass shrink_mode::quiescent once nothing is in flight");
#endif
            rc = ncclCommSplit(comm_, 0, rank_, &child, nullptr);
            call = "ncclCommSplit(comm_, 0, rank_, &child, nullptr)";
        } else {
            const int flags =
                revoked_ || mode == shrink_mode::quiescent ? NCCL_SHRINK_DEFAULT : NCCL_SHRINK_ABORT;
            rc = ncclCommShrink(comm_, excluded.data(), static_cast<int>(excluded.size()), &child, nullptr, flags);
            call = "ncclCommShrink(comm_, excluded, count, &child, nullptr, flags)";
        }
        // A non-blocking communicator (config.blocking = 0) answers ncclInProgress and
        // finishes the new one in the background.
        if (rc == ncclInProgress && child != nullptr) rc = settle(child);
        if (rc != ncclSuccess) {
            if (child != nullptr) (void)ncclCommAbort(child);
            detail::check_nccl(rc, call, __FILE__, __LINE__);
        }
        if (child == nullptr)
            throw comm_error("comm::nccl shrink: NCCL returned no communicator for this rank");
        try {
            nccl out(child, stream_);
            out.owned_ = true;
            out.side_ = side_;
            return out;
        } catch (...) {
            (void)ncclCommAbort(child);
            throw;
        }
    }
    nccl shrink(std::initializer_list<int> excluded_ranks, shrink_mode mode = shrink_mode::abort_in_flight) {
        return shrink(std::span<const int>(excluded_ranks.begin(), excluded_ranks.size()), mode);
    }
#endif

    // In place on the stream: data = elementwise sum over ranks. NCCL's algorithms (ring,
    // tree, NVLS, CollNet) each reduce an element in one place and copy the result to
    // every rank, so every rank gets the same bits.
    void all_reduce_sum(float* data, std::size_t n) {
        check_open("all_reduce_sum");
        require(n == 0 || data != nullptr, "comm::nccl all_reduce_sum: null pointer with ", n, " elements");
        if (n != 0) {
            detail::device_scope on(device_);
            detail::check_pointer_space<cuda_space>(data, "comm::nccl all_reduce_sum: data");
            TRICKLE_NCCL_CHECK(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, stream_));
        }
        const std::uint64_t bytes = detail::all_reduce_bytes(n, sizeof(float), size_, rank_);
        traffic_.count_all_reduce(bytes);
    }

    // ---- Overlap on a side stream (optional): the user names a stream of the same device
    // (its own, non-blocking; it must outlive this object). start_all_reduce_sum records an
    // event on the compute stream (the data is ready), makes the side stream wait for it,
    // enqueues the all-reduce there and returns a request whose wait() makes the compute
    // stream wait for the result: kernels enqueued on the compute stream in between run
    // alongside the collective. The data must not be touched by them. Bytes are counted
    // at the start (the operation is enqueued; NCCL reports failures on the next wait or
    // synchronize).
    void set_side_stream(cudaStream_t side) {
        require(side != nullptr && side != cudaStreamLegacy && side != stream_,
                "comm::nccl set_side_stream: name a non-blocking stream of your own, other than the compute stream");
#if CUDART_VERSION >= 12080
        int d = -1;
        TRICKLE_CUDA_CHECK(cudaStreamGetDevice(side, &d));
        require(d == device_, "comm::nccl set_side_stream: the stream belongs to device ", d, " but the communicator to ",
                device_);
#endif
        side_ = side;
    }
    cudaStream_t side_stream() const { return side_; }

    nccl_request start_all_reduce_sum(float* data, std::size_t n) {
        check_open("start_all_reduce_sum");
        require(side_ != nullptr, "comm::nccl start_all_reduce_sum: no side stream (call set_side_stream first)");
        require(n == 0 || data != nullptr, "comm::nccl start_all_reduce_sum: null pointer with ", n, " elements");
        detail::device_scope on(device_);
        if (n != 0) detail::check_pointer_space<cuda_space>(data, "comm::nccl start_all_reduce_sum: data");
        cudaEvent_t ready = nullptr, done = nullptr;
        TRICKLE_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
        const cudaError_t rc = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
        if (rc != cudaSuccess) (void)cudaEventDestroy(ready);
        detail::check_cuda(rc, "cudaEventCreateWithFlags(&done)", __FILE__, __LINE__);
        try {
            TRICKLE_CUDA_CHECK(cudaEventRecord(ready, stream_));
            TRICKLE_CUDA_CHECK(cudaStreamWaitEvent(side_, ready, 0));
            if (n != 0) TRICKLE_NCCL_CHECK(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, side_));
            TRICKLE_CUDA_CHECK(cudaEventRecord(done, side_));
        } catch (...) {
            (void)cudaEventDestroy(ready);
            (void)cudaEventDestroy(done);
            throw;
        }
        (void)cudaEventDestroy(ready); // released once the side stream has passed its wait
        traffic_.count_all_reduce(detail::all_reduce_bytes(n, sizeof(float), size_, rank_));
        return nccl_request(done, stream_, device_);
    }

    // On the stream: sends n floats to rank dst and receives m floats from rank src, in
    // one NCCL group so that ring shifts cannot deadlock. dst or src may be this rank.
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        check_open("send_recv");
        require(dst >= 0 && dst < size_ && src >= 0 && src < size_, "comm::nccl send_recv: peer out of range (dst ",
                dst, ", src ", src, ", size ", size_, ")");
        require(n == 0 || send != nullptr, "comm::nccl send_recv: null send pointer with ", n, " elements");
        require(m == 0 || recv != nullptr, "comm::nccl send_recv: null receive pointer with ", m, " elements");
        if (n != 0 || m != 0) {
            detail::device_scope on(device_);
            if (n != 0) detail::check_pointer_space<cuda_space>(send, "comm::nccl send_recv: send");
            if (m != 0) detail::check_pointer_space<cuda_space>(recv, "comm::nccl send_recv: recv");
            TRICKLE_NCCL_CHECK(ncclGroupStart());
            // The group must be closed even when a call inside it fails.
            ncclResult_t rc = ncclSuccess;
            const char* failed = nullptr;
            if (n != 0 && (rc = ncclSend(send, n, ncclFloat, dst, comm_, stream_)) != ncclSuccess)
                failed = "ncclSend(send, n, ncclFloat, dst, comm_, stream_)";
            if (failed == nullptr && m != 0 && (rc = ncclRecv(recv, m, ncclFloat, src, comm_, stream_)) != ncclSuccess)
                failed = "ncclRecv(recv, m, ncclFloat, src, comm_, stream_)";
            const ncclResult_t end = ncclGroupEnd();
            if (failed != nullptr) detail::check_nccl(rc, failed, __FILE__, __LINE__);
            TRICKLE_NCCL_CHECK(end);
        }
        traffic_.count_send_recv(n * sizeof(float), m * sizeof(float));
    }

    // On the stream: data on every rank = data on root.
    void broadcast(float* data, std::size_t n, int root) {
        check_open("broadcast");
        require(root >= 0 && root < size_, "comm::nccl broadcast: root ", root, " out of range [0, ", size_, ")");
        require(n == 0 || data != nullptr, "comm::nccl broadcast: null pointer with ", n, " elements");
        if (n != 0) {
            detail::device_scope on(device_);
            detail::check_pointer_space<cuda_space>(data, "comm::nccl broadcast: data");
            TRICKLE_NCCL_CHECK(ncclBroadcast(data, data, n, ncclFloat, root, comm_, stream_));
        }
        traffic_.count_broadcast(n * sizeof(float), size_, rank_ == root);
    }

    // Data plane, DEVICE pointers, on the stream (byte_communicator): recv[r*bytes ..
    // (r+1)*bytes) = rank r's send (ncclAllGather of ncclUint8). As for all_reduce_sum,
    // sizes are not compared between ranks (no host round trip on the data path).
    void all_gather(const void* send, void* recv, std::size_t bytes) {
        check_open("all_gather");
        require(bytes == 0 || (send != nullptr && recv != nullptr), "comm::nccl all_gather: null pointer with ", bytes,
                " bytes");
        if (bytes != 0) {
            detail::device_scope on(device_);
            detail::check_pointer_space<cuda_space>(send, "comm::nccl all_gather: send");
            detail::check_pointer_space<cuda_space>(recv, "comm::nccl all_gather: recv");
            TRICKLE_NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream_));
        }
        traffic_.count_all_gather(bytes, size_);
    }

    // Data plane, DEVICE pointers, on the stream: recv[q*bytes .. (q+1)*bytes) = rank q's
    // send[rank*bytes .. (rank+1)*bytes); one NCCL group of a send and a receive per peer,
    // this rank's own block copied on the stream.
    void all_to_all(const void* send, void* recv, std::size_t bytes) {
        check_open("all_to_all");
        require(bytes == 0 || (send != nullptr && recv != nullptr), "comm::nccl all_to_all: null pointer with ", bytes,
                " bytes");
        if (bytes != 0) {
            detail::device_scope on(device_);
            detail::check_pointer_space<cuda_space>(send, "comm::nccl all_to_all: send");
            detail::check_pointer_space<cuda_space>(recv, "comm::nccl all_to_all: recv");
            const auto* in = static_cast<const unsigned char*>(send);
            auto* out = static_cast<unsigned char*>(recv);
            const auto at = [&](int r) { return static_cast<std::size_t>(r) * bytes; };
            TRICKLE_CUDA_CHECK(cudaMemcpyAsync(out + at(rank_), in + at(rank_), bytes, cudaMemcpyDeviceToDevice, stream_));
            TRICKLE_NCCL_CHECK(ncclGroupStart());
            // The group must be closed even when a call inside it fails.
            ncclResult_t rc = ncclSuccess;
            const char* failed = nullptr;
            for (int r = 0; r < size_ && failed == nullptr; ++r) {
                if (r == rank_) continue;
                if ((rc = ncclSend(in + at(r), bytes, ncclUint8, r, comm_, stream_)) != ncclSuccess)
                    failed = "ncclSend(in + at(r), bytes, ncclUint8, r, comm_, stream_)";
                else if ((rc = ncclRecv(out + at(r), bytes, ncclUint8, r, comm_, stream_)) != ncclSuccess)
                    failed = "ncclRecv(out + at(r), bytes, ncclUint8, r, comm_, stream_)";
            }
            const ncclResult_t end = ncclGroupEnd();
            if (failed != nullptr) detail::check_nccl(rc, failed, __FILE__, __LINE__);
            TRICKLE_NCCL_CHECK(end);
        }
        traffic_.count_all_to_all(bytes, size_);
    }

    // Control plane, HOST pointers: recv[r*bytes .. (r+1)*bytes) = rank r's send. Staged
    // through device scratch and waits for the stream. Every rank first shares its size
    // and whether its pointers are usable, so a bad argument on any rank throws on all.
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        check_open("all_gather_bytes");
        detail::device_scope on(device_);
        std::string mine_bad;
        if (bytes != 0 && (send == nullptr || recv == nullptr))
            mine_bad = "comm::nccl all_gather_bytes: null pointer with a nonzero size";
        else
            try {
                detail::check_pointer_space<host_space>(send, "comm::nccl all_gather_bytes: send");
                detail::check_pointer_space<host_space>(recv, "comm::nccl all_gather_bytes: recv");
            } catch (const invalid_argument& e) {
                mine_bad = e.what();
            }
        const auto N = static_cast<std::size_t>(size_);
        const std::uint64_t header[2] = {bytes, mine_bad.empty() ? 0u : 1u};
        std::vector<std::uint64_t> headers(2 * N);
        gather_on_device(header, headers.data(), sizeof header);
        for (std::size_t r = 0; r < N; ++r)
            if (headers[2 * r + 1] != 0) {
                if (!mine_bad.empty()) throw invalid_argument(mine_bad);
                throw invalid_argument(detail::concat("comm::nccl all_gather_bytes: rank ", r, " passed an invalid buffer"));
            }
        for (std::size_t r = 0; r < N; ++r)
            if (headers[2 * r] != bytes)
                throw comm_error(detail::concat("comm::nccl all_gather_bytes: ranks passed different sizes: rank ", r,
                                                " passed ", headers[2 * r], " bytes, rank ", rank_, " passed ", bytes));
        if (bytes != 0) gather_on_device(send, recv, bytes);
        traffic_.count_all_gather(bytes, size_);
    }

    // Returns when every rank has reached the barrier and this rank's stream is drained.
    void barrier() {
        check_open("barrier");
        detail::device_scope on(device_);
        if (token_.empty()) token_ = buffer<float, cuda_space>(1);
        TRICKLE_NCCL_CHECK(ncclAllReduce(token_.data(), token_.data(), 1, ncclFloat, ncclSum, comm_, stream_));
        wait("barrier");
    }

    // Waits until the work queued on the stream (trickle's and the trainer's) is done.
    void synchronize() {
        detail::device_scope on(device_);
        wait("synchronize");
    }

private:
    // recv (host, size_ * bytes) = every rank's send (host, bytes), through device scratch;
    // waits. The current device must be device_.
    void gather_on_device(const void* send, void* recv, std::size_t bytes) {
        const std::size_t total = bytes * static_cast<std::size_t>(size_);
        if (scratch_.size() < total) scratch_ = buffer<unsigned char, cuda_space>(total);
        unsigned char* slot = scratch_.data() + static_cast<std::size_t>(rank_) * bytes;
        TRICKLE_CUDA_CHECK(cudaMemcpyAsync(slot, send, bytes, cudaMemcpyHostToDevice, stream_));
        TRICKLE_NCCL_CHECK(ncclAllGather(slot, scratch_.data(), bytes, ncclUint8, comm_, stream_));
        TRICKLE_CUDA_CHECK(cudaMemcpyAsync(recv, scratch_.data(), total, cudaMemcpyDeviceToHost, stream_));
        wait("all_gather_bytes");
    }

    // Polls rather than cudaStreamSynchronize: NCCL reports a failed peer through
    // ncclCommGetAsyncError while its kernels may keep the stream busy for ever.
    void wait(const char* op) {
        for (;;) {
            const cudaError_t q = cudaStreamQuery(stream_);
            if (q == cudaSuccess) break;
            if (q != cudaErrorNotReady) detail::check_cuda(q, "cudaStreamQuery(stream_)", __FILE__, __LINE__);
            check_async(op);
            std::this_thread::yield();
        }
        check_async(op);
    }

    void check_async(const char* op) {
        ncclResult_t state = ncclSuccess;
        TRICKLE_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
        if (state != ncclSuccess && state != ncclInProgress) {
            failed_ = true;
            throw comm_error(detail::concat("comm::nccl ", op, ": the NCCL communicator failed: ",
                                            ncclGetErrorString(state), " (", static_cast<int>(state),
                                            "); call ncclCommAbort on it"));
        }
    }

    void check_open(const char* op) const {
        if (comm_ == nullptr)
            throw invalid_argument(detail::concat("comm::nccl ", op, ": this communicator was moved from"));
        if (revoked_)
            throw comm_error(detail::concat("comm::nccl ", op,
                                            ": the communicator was revoked; carry on with the one shrink() returned"));
    }

    // Polls a communicator's state until it leaves ncclInProgress (a revoke, or a
    // non-blocking communicator being built); returns the state it reached.
    static ncclResult_t settle(ncclComm_t comm) {
        for (;;) {
            ncclResult_t state = ncclSuccess;
            const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
            if (rc != ncclSuccess) return rc;
            if (state != ncclInProgress) return state;
            std::this_thread::yield();
        }
    }

    void release() noexcept {
        if (!owned_ || comm_ == nullptr) return;
        int before = -1;
        const bool switched = cudaGetDevice(&before) == cudaSuccess && before != device_ &&
                              cudaSetDevice(device_) == cudaSuccess;
        // A revoked or failed communicator cannot be finalized (which ncclCommDestroy does).
        if (revoked_ || failed_)
            (void)ncclCommAbort(comm_);
        else
            (void)ncclCommDestroy(comm_);
        if (switched) (void)cudaSetDevice(before);
        comm_ = nullptr;
        owned_ = false;
    }

    ncclComm_t comm_;
    cudaStream_t stream_;
    cudaStream_t side_ = nullptr;
    int rank_ = 0;
    int size_ = 1;
    int device_ = 0;
    traffic_counters traffic_{};
    buffer<unsigned char, cuda_space> scratch_;
    buffer<float, cuda_space> token_;
    bool owned_ = false;   // made by shrink(): destroyed with this object
    bool revoked_ = false; // revoke() was called
    bool failed_ = false;  // NCCL reported an asynchronous error
};

static_assert(byte_communicator<nccl>);

} // namespace comm

TRICKLE_NAMESPACE_END

#endif // TRICKLE_HAS_NCCL && TRICKLE_HAS_CUDA
