// trickle/exec/buffer.hpp: owning scratch buffers allocated in a memory space.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/core/tensor_view.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/cuda.hpp>

#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

// How host memory is allocated. pinned (page-locked, cudaMallocHost) needs the CUDA
// runtime; it lets device kernels and copies reach host-resident state quickly.
enum class host_alloc { pageable, pinned };

// An owning, move-only array of n trivially copyable T in memory space Space. Host
// buffers are 64-byte aligned and zero-initialized. CUDA buffers made with an exec::cuda
// are stream-ordered: allocated with cudaMallocAsync (cudaMallocFromPoolAsync from ex.pool
// when it is set), zeroed with cudaMemsetAsync and
// freed with cudaFreeAsync, all on that stream and its device (the stream must outlive
// the buffer), so they never synchronize the host or touch the legacy default stream;
// this is how trickle's algorithms allocate. CUDA buffers made without one use
// cudaMalloc + cudaMemset (set-up code and tests).
template <class T, class Space = host_space>
class buffer {
    static_assert(std::is_trivially_copyable_v<T>, "buffer<T>: T must be trivially copyable");
    static_assert(memory_space<Space>, "Space must be trickle::host_space or trickle::cuda_space");

public:
    static constexpr std::size_t alignment = 64;

    buffer() = default;

    explicit buffer(std::size_t n, host_alloc how = host_alloc::pageable) : size_(n), how_(how) { allocate(n); }

    // Stream-ordered device memory on ex's stream and device (cuda_space only).
    buffer(std::size_t n, const exec::cuda& ex) : size_(n), stream_(ex.stream), pool_(ex.pool), ordered_(true) {
        static_assert(std::is_same_v<Space, cuda_space>, "buffer(n, exec::cuda): stream-ordered memory is device memory");
#if TRICKLE_HAS_CUDA
        device_ = detail::device_of(ex);
#endif
        allocate(n);
    }

    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    buffer(buffer&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), how_(o.how_), stream_(o.stream_),
          pool_(o.pool_), device_(o.device_), ordered_(o.ordered_) {}
    buffer& operator=(buffer&& o) noexcept {
        if (this != &o) {
            release();
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
            how_ = o.how_;
            stream_ = o.stream_;
            pool_ = o.pool_;
            device_ = o.device_;
            ordered_ = o.ordered_;
        }
        return *this;
    }
    ~buffer() { release(); }

    T* data() { return data_; }
    const T* data() const { return data_; }
    std::size_t size() const { return size_; }
    std::size_t size_bytes() const { return size_ * sizeof(T); }
    bool empty() const { return size_ == 0; }
    tensor_view<T, Space> view() { return {data_, size_}; }
    tensor_view<const T, Space> view() const { return {data_, size_}; }

private:
    void allocate(std::size_t n) {
        if (n == 0) return;
        if (n > static_cast<std::size_t>(-1) / sizeof(T) / 2)
            throw invalid_argument(detail::concat("buffer: ", n, " elements is too large"));
        const std::size_t bytes = n * sizeof(T);
        if constexpr (std::is_same_v<Space, cuda_space>) {
#if TRICKLE_HAS_CUDA
            void* p = nullptr;
            if (ordered_) {
                detail::device_scope on(device_);
                if (pool_ != nullptr)
                    TRICKLE_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes, pool_, stream_));
                else
                    TRICKLE_CUDA_CHECK(cudaMallocAsync(&p, bytes, stream_));
                data_ = static_cast<T*>(p);
                const cudaError_t rc = cudaMemsetAsync(p, 0, bytes, stream_);
                if (rc != cudaSuccess) {
                    cudaFreeAsync(p, stream_);
                    data_ = nullptr;
                    detail::check_cuda(rc, "cudaMemsetAsync(p, 0, bytes, stream_)", __FILE__, __LINE__);
                }
                return;
            }
            TRICKLE_CUDA_CHECK(cudaMalloc(&p, bytes));
            data_ = static_cast<T*>(p);
            // cudaMemset of device memory returns before it runs, on the default stream,
            // which the non-blocking streams trickle works on never wait for: finish the
            // zeroing here, or it could land after the caller's first writes.
            cudaError_t rc = cudaMemset(p, 0, bytes);
            if (rc == cudaSuccess) rc = cudaStreamSynchronize(nullptr);
            if (rc != cudaSuccess) {
                cudaFree(p);
                data_ = nullptr;
                detail::check_cuda(rc, "cudaMemset(p, 0, bytes); cudaStreamSynchronize(0)", __FILE__, __LINE__);
            }
#else
            throw invalid_argument("buffer<T, cuda_space>: this build has no CUDA runtime");
#endif
        } else if (how_ == host_alloc::pinned) {
#if TRICKLE_HAS_CUDA
            void* p = nullptr;
            TRICKLE_CUDA_CHECK(cudaMallocHost(&p, bytes));
            data_ = static_cast<T*>(p);
            std::memset(p, 0, bytes);
#else
            throw invalid_argument("buffer: pinned host memory needs the CUDA runtime");
#endif
        } else {
            data_ = static_cast<T*>(::operator new(bytes, std::align_val_t{alignment}));
            std::memset(static_cast<void*>(data_), 0, bytes);
        }
    }

    void release() noexcept {
        if (data_ == nullptr) return;
        if constexpr (std::is_same_v<Space, cuda_space>) {
#if TRICKLE_HAS_CUDA
            if (ordered_) {
                int previous = -1;
                const bool switch_device = cudaGetDevice(&previous) == cudaSuccess && previous != device_ && device_ >= 0;
                if (switch_device) (void)cudaSetDevice(device_);
                cudaFreeAsync(data_, stream_);
                if (switch_device) (void)cudaSetDevice(previous);
            } else {
                cudaFree(data_);
            }
#endif
        } else if (how_ == host_alloc::pinned) {
#if TRICKLE_HAS_CUDA
            cudaFreeHost(data_);
#endif
        } else {
            ::operator delete(static_cast<void*>(data_), std::align_val_t{alignment});
        }
        data_ = nullptr;
    }

    T* data_ = nullptr;
    std::size_t size_ = 0;
    host_alloc how_ = host_alloc::pageable;
    CUstream_st* stream_ = nullptr; // stream-ordered device buffers: the stream, pool and device they live on
    CUmemPoolHandle_st* pool_ = nullptr;
    int device_ = -1;
    bool ordered_ = false;
};

// Copies count elements between memory spaces (synchronously; for set-up, checkpoints
// and tests, never on the per-step path).
template <class DstSpace, class SrcSpace, class T>
void copy_elements(T* dst, const T* src, std::size_t count) {
    if (count == 0) return;
    if constexpr (std::is_same_v<DstSpace, host_space> && std::is_same_v<SrcSpace, host_space>) {
        std::memcpy(static_cast<void*>(dst), static_cast<const void*>(src), count * sizeof(T));
    } else {
#if TRICKLE_HAS_CUDA
        TRICKLE_CUDA_CHECK(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyDefault));
        // From pageable host memory, cudaMemcpy may return before the DMA into the device
        // has finished (it is ordered on the default stream only, which non-blocking streams
        // do not wait for): wait for it, so the copy is complete for every stream.
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
#else
        throw invalid_argument("copy_elements: CUDA memory needs the CUDA runtime");
#endif
    }
}

// Copies count elements between memory spaces on ex's stream and device, and waits for
// that stream only (set-up and checkpoints: never the legacy default stream).
template <class DstSpace, class SrcSpace, class T>
void copy_elements(T* dst, const T* src, std::size_t count, const exec::cuda& ex) {
    if (count == 0) return;
#if TRICKLE_HAS_CUDA
    detail::device_scope on(ex.device);
    TRICKLE_CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDefault, ex.stream));
    TRICKLE_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
#else
    (void)dst, (void)src, (void)ex;
    throw invalid_argument("copy_elements: CUDA memory needs the CUDA runtime");
#endif
}

TRICKLE_NAMESPACE_END
