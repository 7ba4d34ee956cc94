// trickle/comm/channel.hpp: comm::cuda_channel, any communicator over device memory behind one interface.
//
// The algorithms are templates over their communicator, so each communicator type is one
// more instantiation of every engine's CUDA members, which only nvcc compiles. A program
// that wants those members compiled once, apart from the communicator it will use (the
// Python package: its nvcc translation units must not see torch's headers, and must not
// multiply by communicator), instantiates the engines over comm::cuda_channel, and hands
// them any communicator wrapped in comm::channel_of<Comm>. A call through the interface
// costs one virtual dispatch, nothing next to a collective.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>

#if TRICKLE_HAS_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

// A communicator over device memory, as an interface: the members every algorithm uses
// (communicator and byte_communicator), with their usual meaning.
class cuda_channel {
public:
    using memory_space = cuda_space;

    virtual ~cuda_channel() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual traffic_counters traffic() const = 0;
    virtual cudaStream_t stream() const = 0;
    virtual void all_reduce_sum(float* data, std::size_t n) = 0;
    virtual void all_gather(const void* send, void* recv, std::size_t bytes) = 0;
    virtual void all_to_all(const void* send, void* recv, std::size_t bytes) = 0;
    virtual void all_gather_bytes(const void* send, void* recv, std::size_t bytes) = 0; // host pointers
    virtual void broadcast(float* data, std::size_t n, int root) = 0;
    virtual void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) = 0;
    virtual void barrier() = 0;
    virtual void synchronize() = 0;

protected:
    cuda_channel() = default;
    cuda_channel(const cuda_channel&) = default;
    cuda_channel& operator=(const cuda_channel&) = default;
};

// Comm (a communicator over device memory, which must outlive this object) as a cuda_channel.
template <class Comm>
class channel_of final : public cuda_channel {
    static_assert(std::is_same_v<typename Comm::memory_space, cuda_space>,
                  "comm::channel_of: the communicator must move device memory");

public:
    explicit channel_of(Comm& comm) : comm_(&comm) {}

    int rank() const override { return comm_->rank(); }
    int size() const override { return comm_->size(); }
    traffic_counters traffic() const override { return comm_->traffic(); }
    cudaStream_t stream() const override { return comm_->stream(); }
    void all_reduce_sum(float* data, std::size_t n) override { comm_->all_reduce_sum(data, n); }
    void all_gather(const void* send, void* recv, std::size_t bytes) override { comm_->all_gather(send, recv, bytes); }
    void all_to_all(const void* send, void* recv, std::size_t bytes) override { comm_->all_to_all(send, recv, bytes); }
    void all_gather_bytes(const void* send, void* recv, std::size_t bytes) override {
        comm_->all_gather_bytes(send, recv, bytes);
    }
    void broadcast(float* data, std::size_t n, int root) override { comm_->broadcast(data, n, root); }
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) override {
        comm_->send_recv(send, n, dst, recv, m, src);
    }
    void barrier() override { comm_->barrier(); }
    void synchronize() override { comm_->synchronize(); }

    Comm& get() const { return *comm_; }

private:
    Comm* comm_;
};

static_assert(byte_communicator<cuda_channel>);

} // namespace comm

TRICKLE_NAMESPACE_END

#endif // TRICKLE_HAS_CUDA
