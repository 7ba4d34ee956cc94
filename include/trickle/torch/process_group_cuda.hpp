// trickle/torch/process_group_cuda.hpp: comm::process_group_cuda, a communicator over a torch.distributed
// process group for parameters in CUDA memory, ordered on torch's current stream.
//
// Part of the trickle::torch component, for a torch built with CUDA (its c10/cuda headers)
// and trickle's CUDA support (TRICKLE_ENABLE_CUDA: link trickle::cuda, or compile with
// nvcc). The algorithms' kernels run on stream(), torch's current CUDA stream when each
// step starts (or a stream fixed at construction), so they are ordered with the trainer's
// own kernels without a host synchronization. Where torch's current stream is the legacy
// default stream (torch's default: a trainer that never picks a stream), stream() is a
// *blocking* stream of this object's own instead (cudaStreamCreateWithFlags with
// cudaStreamDefault): CUDA orders such a stream with the legacy default stream both ways,
// so trickle's kernels still come after the trainer's optimizer step and before its next
// forward pass, with no event and no host synchronization, while trickle itself never
// enqueues on the legacy stream (the algorithms refuse it: algorithm/detail/device.hpp).
// The first GPU run of the Python package (2026-12-04, one H200) found every CUDA object
// refused there before this.
//
// How the bytes move depends on the group's backend:
//   - NCCL (a backend that takes CUDA tensors): every collective is the group's own, on
//     CUDA tensors over trickle's buffers, issued under a stream guard on stream():
//     ProcessGroupNCCL orders its communication stream after that stream and wait() makes
//     that stream wait for the result, as for torch's own collectives. No host
//     synchronization and no staging. all_reduce_sum is the group's allreduce (NCCL's
//     algorithms add each element in one place and copy the result to every rank, so
//     every rank gets the same bits; not the bits of comm::local's rank order).
//   - Gloo, MPI and any backend of CPU tensors: each collective copies the device data
//     into pinned host buffers (torch's caching host allocator) on stream(), waits for
//     that copy, runs comm::process_group's collective on the host (its rank-order sums,
//     the same bits as the CPU path, and its argument checks), and copies the result back
//     on stream(). That is one host synchronization per collective, which the backend
//     needs: 4 ranks sharing one GPU over Gloo work, and match the CPU path bit for bit.
// Buffers grow to the largest message and are reused: after a model's first exchange no
// step allocates.
//
// Argument checks: on the host path, comm::process_group's (argument_checks). On the NCCL
// path sizes are not compared per call (that would need a host synchronization, as in
// torch.distributed itself): trickle's algorithms derive every size from the
// configuration and model layout they compared at construction.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>

// Declares nothing without trickle's CUDA support (TRICKLE_ENABLE_CUDA, or nvcc) and a
// torch whose c10/cuda headers are complete (a CUDA build: PyPI's; Debian's CPU-only
// libtorch-dev ships an incomplete c10/cuda), as comm/nccl.hpp declares nothing without NCCL.
#if TRICKLE_HAS_CUDA && __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#define TRICKLE_HAS_TORCH_CUDA 1

#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/torch/process_group.hpp>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

class process_group_cuda {
public:
    using memory_space = cuda_space;

    // Over `group`, for parameters on CUDA device `device` (-1: the current device).
    // `stream`: the stream trickle works on; empty: torch's current stream on that device
    // whenever a step asks (stream()), so a trainer that switches streams with
    // torch.cuda.stream(...) keeps trickle on its stream.
    explicit process_group_cuda(c10::intrusive_ptr<c10d::ProcessGroup> group, int device = -1,
                                std::optional<c10::cuda::CUDAStream> stream = std::nullopt,
                                process_group_options options = {})
        : host_(group, options), fixed_(stream) {
        if (device < 0) TRICKLE_CUDA_CHECK(cudaGetDevice(&device));
        device_ = device;
        require(!fixed_ || fixed_->device_index() == device_, "comm::process_group_cuda: the stream belongs to device ",
                fixed_ ? static_cast<int>(fixed_->device_index()) : -1, ", the parameters to device ", device_);
        on_device_ = takes_device_tensors(host_.group());
        if (!fixed_) {
            detail::device_scope on(device_);
            TRICKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&own_, cudaStreamDefault));
        }
    }

    ~process_group_cuda() {
        if (own_ != nullptr) {
            detail::device_scope on(device_);
            cudaStreamDestroy(own_); // queued work still completes; nothing to report from a destructor
        }
    }

    // Whether `s` is the legacy default stream (the null stream or cudaStreamLegacy), where
    // trickle does not enqueue: stream() replaces it with this object's blocking stream.
    static bool is_legacy_default(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }

    // Whether `group`'s collectives take CUDA tensors (its backend is NCCL): the test the
    // constructor makes, for a caller that must choose before building one.
    static bool takes_device_tensors(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
        try {
            return group->getBackendName() == "nccl";
        } catch (...) {
            return false;
        }
    }

    process_group_cuda(const process_group_cuda&) = delete;
    process_group_cuda& operator=(const process_group_cuda&) = delete;

    int rank() const { return host_.rank(); }
    int size() const { return host_.size(); }
    int device() const { return device_; }
    traffic_counters traffic() const { return on_device_ ? traffic_ : host_.traffic(); }
    const c10::intrusive_ptr<c10d::ProcessGroup>& group() const { return host_.group(); }
    bool backend_failed() const { return host_.backend_failed() || failed_; }
    // Whether the collectives run on CUDA tensors (NCCL) or are staged through host memory.
    bool stages_through_host() const { return !on_device_; }
    // The collectives this object started (on the host path, comm::process_group's count,
    // argument checks included; over NCCL, one per data-plane call that moved bytes and two
    // per all_gather_bytes, which compares sizes first).
    std::uint64_t collectives() const { return on_device_ ? collectives_ : host_.collectives(); }

    // The stream the algorithms' kernels and this communicator's copies run on: torch's
    // current stream, or this object's blocking stream where that is the legacy default
    // stream (see the top of this file).
    cudaStream_t stream() const { return torch_stream().stream(); }

    // In place on stream(): data = elementwise sum over ranks.
    void all_reduce_sum(float* data, std::size_t n) {
        if (!on_device_) {
            stage(data, n * sizeof(float), [&](void* h) { host_.all_reduce_sum(static_cast<float*>(h), n); });
            return;
        }
        require(n == 0 || data != nullptr, "comm::process_group_cuda all_reduce_sum: null pointer with ", n, " elements");
        if (n != 0 && size() > 1) {
            guard g(*this);
            std::vector<at::Tensor> t{device_tensor(data, n * sizeof(float), at::kFloat)};
            c10d::AllreduceOptions o;
            o.reduceOp = c10d::ReduceOp::SUM;
            run("all_reduce_sum", [&] { return group()->allreduce(t, o); });
        }
        traffic_.count_all_reduce(detail::all_reduce_bytes(n, sizeof(float), size(), rank()));
    }

    // Device memory: recv[r*bytes .. (r+1)*bytes) = rank r's send.
    void all_gather(const void* send, void* recv, std::size_t bytes) {
        if (!on_device_) {
            stage2(send, bytes, recv, bytes * N(),
                   [&](const void* s, void* r) { host_.all_gather(s, r, bytes); });
            return;
        }
        require(bytes == 0 || (send != nullptr && recv != nullptr), "comm::process_group_cuda all_gather: null pointer");
        if (bytes != 0) {
            guard g(*this);
            std::vector<at::Tensor> in{device_tensor(const_cast<void*>(send), bytes, at::kByte)};
            std::vector<std::vector<at::Tensor>> out(1);
            for (std::size_t q = 0; q < N(); ++q)
                out[0].push_back(device_tensor(static_cast<unsigned char*>(recv) + q * bytes, bytes, at::kByte));
            run("all_gather", [&] { return group()->allgather(out, in); });
        }
        traffic_.count_all_gather(bytes, size());
    }

    // Device memory: recv[q*bytes ..] = rank q's send[rank*bytes ..].
    void all_to_all(const void* send, void* recv, std::size_t bytes) {
        if (!on_device_) {
            stage2(send, bytes * N(), recv, bytes * N(),
                   [&](const void* s, void* r) { host_.all_to_all(s, r, bytes); });
            return;
        }
        require(bytes == 0 || (send != nullptr && recv != nullptr), "comm::process_group_cuda all_to_all: null pointer");
        if (bytes != 0) {
            guard g(*this);
            at::Tensor in = device_tensor(const_cast<void*>(send), bytes * N(), at::kByte);
            at::Tensor out = device_tensor(recv, bytes * N(), at::kByte);
            run("all_to_all", [&] {
                std::vector<std::int64_t> equal_out, equal_in;
                return group()->alltoall_base(out, in, equal_out, equal_in);
            });
        }
        traffic_.count_all_to_all(bytes, size());
    }

    // Control plane, HOST pointers (agreement at construction, checkpoints): waits.
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) {
        if (!on_device_) {
            host_.all_gather_bytes(send, recv, bytes);
            return;
        }
        // Through device memory, with the sizes compared first (a collective of its own:
        // this is not on a step's path).
        std::uint64_t mine[2] = {bytes, bytes != 0 && (send == nullptr || recv == nullptr) ? 1u : 0u};
        std::vector<std::uint64_t> all(2 * N());
        gather_host(mine, all.data(), sizeof mine);
        for (std::size_t q = 0; q < N(); ++q) {
            if (all[2 * q + 1] != 0)
                throw invalid_argument(detail::concat("comm::process_group_cuda all_gather_bytes: rank ", q,
                                                      " passed a null pointer with a nonzero size"));
            if (all[2 * q] != bytes)
                throw comm_error(detail::concat("comm::process_group_cuda all_gather_bytes: ranks passed different "
                                                "sizes: rank ",
                                                q, " passed ", all[2 * q], " bytes, rank ", rank(), " passed ", bytes));
        }
        if (bytes != 0) gather_host(send, recv, bytes);
        traffic_.count_all_gather(bytes, size());
    }

    // Device memory, on stream(): data on every rank = data on root.
    void broadcast(float* data, std::size_t n, int root) {
        if (!on_device_) {
            stage(data, n * sizeof(float), [&](void* h) { host_.broadcast(static_cast<float*>(h), n, root); });
            return;
        }
        require(n == 0 || data != nullptr, "comm::process_group_cuda broadcast: null pointer with ", n, " elements");
        require(root >= 0 && root < size(), "comm::process_group_cuda broadcast: root ", root, " out of range [0, ",
                size(), ")");
        if (n != 0 && size() > 1) {
            guard g(*this);
            std::vector<at::Tensor> t{device_tensor(data, n * sizeof(float), at::kFloat)};
            c10d::BroadcastOptions o;
            o.rootRank = root;
            run("broadcast", [&] { return group()->broadcast(t, o); });
        }
        traffic_.count_broadcast(n * sizeof(float), size(), rank() == root);
    }

    // Device memory: n floats to dst, m floats from src (decentralized topologies).
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        if (!on_device_) {
            stage2(send, n * sizeof(float), recv, m * sizeof(float), [&](const void* s, void* r) {
                host_.send_recv(static_cast<const float*>(s), n, dst, static_cast<float*>(r), m, src);
            });
            return;
        }
        require(dst >= 0 && dst < size() && src >= 0 && src < size(), "comm::process_group_cuda send_recv: peer out of "
                                                                       "range");
        guard g(*this);
        if (dst == rank() && src == rank()) {
            if (m != 0)
                TRICKLE_CUDA_CHECK(cudaMemcpyAsync(recv, send, m * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
        } else {
            ++collectives_;
            c10::intrusive_ptr<c10d::Work> in, out;
            std::vector<at::Tensor> rt, st;
            try {
                if (m != 0) {
                    rt.push_back(device_tensor(recv, m * sizeof(float), at::kFloat));
                    in = group()->recv(rt, src, tag);
                }
                if (n != 0) {
                    st.push_back(device_tensor(const_cast<float*>(send), n * sizeof(float), at::kFloat));
                    out = group()->send(st, dst, tag);
                }
                if (out) out->wait();
                if (in) in->wait();
            } catch (const std::exception& e) {
                failed_ = true;
                throw comm_error(detail::concat("comm::process_group_cuda send_recv: ", e.what()));
            }
        }
        traffic_.count_send_recv(n * sizeof(float), m * sizeof(float));
    }

    void barrier() {
        synchronize();
        host_.barrier();
    }

    // Waits until the work queued on stream() (trickle's and the trainer's) is done.
    void synchronize() {
        detail::device_scope on(device_);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream()));
    }

private:
    static constexpr int tag = 0x7122;

    std::size_t N() const { return static_cast<std::size_t>(size()); }

    c10::cuda::CUDAStream torch_stream() const {
        if (fixed_) return *fixed_;
        const auto index = static_cast<c10::DeviceIndex>(device_);
        c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(index);
        if (!is_legacy_default(current.stream())) return current;
        return c10::cuda::getStreamFromExternal(own_, index);
    }

    // The device and stream torch's collectives see as current while trickle issues one.
    struct guard {
        explicit guard(const process_group_cuda& c) : device(static_cast<c10::DeviceIndex>(c.device_)), stream(c.torch_stream()) {}
        c10::cuda::CUDAGuard device;
        c10::cuda::CUDAStreamGuard stream;
    };

    at::Tensor device_tensor(void* p, std::size_t bytes, at::ScalarType type) const {
        const std::size_t elem = type == at::kFloat ? sizeof(float) : 1;
        return at::from_blob(p, {static_cast<std::int64_t>(bytes / elem)},
                             at::TensorOptions().dtype(type).device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_))));
    }

    template <class Start>
    void run(const char* op, Start&& start) {
        ++collectives_;
        try {
            start()->wait(); // ProcessGroupNCCL: the current stream (ours) waits; the host does not
        } catch (const std::exception& e) {
            failed_ = true;
            throw comm_error(detail::concat("comm::process_group_cuda ", op, ": ", e.what()));
        }
    }

    // A pinned host buffer of at least `bytes` (slot 0 or 1), grown when needed.
    void* pinned(int slot, std::size_t bytes) {
        at::Tensor& t = staging_[slot];
        if (!t.defined() || static_cast<std::size_t>(t.numel()) < bytes)
            t = at::empty({static_cast<std::int64_t>(bytes == 0 ? 1 : bytes)},
                          at::TensorOptions().dtype(at::kByte).pinned_memory(true));
        return t.data_ptr();
    }

    void copy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
        if (bytes != 0) TRICKLE_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, kind, stream()));
    }

    // In place through host memory: device data -> host, op(host), host -> device.
    template <class Op>
    void stage(void* data, std::size_t bytes, Op&& host_op) {
        if (data == nullptr && bytes != 0) { // comm::process_group refuses it on every rank together
            host_op(nullptr);
            return;
        }
        detail::device_scope on(device_);
        void* h = pinned(0, bytes);
        copy(h, data, bytes, cudaMemcpyDeviceToHost);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream()));
        host_op(h);
        copy(data, h, bytes, cudaMemcpyHostToDevice);
    }

    // From one device buffer to another through host memory.
    template <class Op>
    void stage2(const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes, Op&& host_op) {
        if ((send == nullptr && send_bytes != 0) || (recv == nullptr && recv_bytes != 0)) {
            host_op(send == nullptr ? nullptr : pinned(0, send_bytes), recv == nullptr ? nullptr : pinned(1, recv_bytes));
            return;
        }
        detail::device_scope on(device_);
        void* hs = pinned(0, send_bytes);
        void* hr = pinned(1, recv_bytes);
        copy(hs, send, send_bytes, cudaMemcpyDeviceToHost);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream()));
        host_op(hs, hr);
        copy(recv, hr, recv_bytes, cudaMemcpyHostToDevice);
    }

    // Host bytes gathered through a device buffer over the NCCL group; waits.
    void gather_host(const void* send, void* recv, std::size_t bytes) {
        detail::device_scope on(device_);
        const std::size_t total = bytes * N();
        if (!scratch_.defined() || static_cast<std::size_t>(scratch_.numel()) < total)
            scratch_ = at::empty({static_cast<std::int64_t>(total)},
                                 at::TensorOptions().dtype(at::kByte).device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_))));
        auto* base = static_cast<unsigned char*>(scratch_.data_ptr());
        copy(base + static_cast<std::size_t>(rank()) * bytes, send, bytes, cudaMemcpyHostToDevice);
        {
            guard g(*this);
            std::vector<at::Tensor> in{device_tensor(base + static_cast<std::size_t>(rank()) * bytes, bytes, at::kByte)};
            std::vector<std::vector<at::Tensor>> out(1);
            for (std::size_t q = 0; q < N(); ++q) out[0].push_back(device_tensor(base + q * bytes, bytes, at::kByte));
            run("all_gather_bytes", [&] { return group()->allgather(out, in); });
        }
        copy(recv, base, total, cudaMemcpyDeviceToHost);
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream()));
    }

    process_group host_;
    std::optional<c10::cuda::CUDAStream> fixed_;
    cudaStream_t own_ = nullptr; // the blocking stream used in place of the legacy default stream
    int device_ = 0;
    bool on_device_ = false;
    bool failed_ = false;
    std::uint64_t collectives_ = 0;
    traffic_counters traffic_{};
    at::Tensor staging_[2];
    at::Tensor scratch_;
};

static_assert(byte_communicator<process_group_cuda>);

} // namespace comm

TRICKLE_NAMESPACE_END

#endif // TRICKLE_HAS_CUDA && torch's c10/cuda headers
