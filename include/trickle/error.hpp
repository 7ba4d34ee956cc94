// trickle/error.hpp: the exceptions trickle throws and the checks that raise them.
#pragma once

#include <trickle/config.hpp>

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#if TRICKLE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

TRICKLE_NAMESPACE_BEGIN

// Base of everything trickle throws. Thrown before any state changes: a caller that
// catches it can keep using its parameters and the object it called.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A bad argument (size, pointer, fraction, interval, ...).
class invalid_argument : public error {
public:
    using error::error;
};

// Workers disagree about configuration, layout or state.
class mismatch_error : public error {
public:
    using error::error;
};

// A peer failed or left while a collective operation was in progress.
class comm_error : public error {
public:
    using error::error;
};

// A comm_error that names its cause as a peer lost: one that left, whose thread or process
// failed, or that did not answer within the communicator's timeout. Every surviving rank of
// the collective throws it. An elastic communicator (comm/elastic.hpp) can then renew its
// membership and carry on without the lost peers; others can only report it.
class peer_failure : public comm_error {
public:
    using comm_error::comm_error;
};

#if TRICKLE_HAS_CUDA
// A CUDA runtime call failed. Carries the call's text, where it was made and the code.
class cuda_error : public error {
public:
    cuda_error(cudaError_t code, const char* call, const char* file, int line)
        : error(format(code, call, file, line)), code_(code), call_(call), file_(file),
          line_(line) {}

    cudaError_t code() const noexcept { return code_; }
    const char* call() const noexcept { return call_; }
    const char* file() const noexcept { return file_; }
    int line() const noexcept { return line_; }

private:
    static std::string format(cudaError_t code, const char* call, const char* file, int line) {
        std::ostringstream os;
        os << "CUDA call '" << call << "' failed at " << file << ':' << line << ": "
           << cudaGetErrorName(code) << " (" << static_cast<int>(code)
           << "): " << cudaGetErrorString(code);
        return os.str();
    }

    cudaError_t code_;
    const char* call_;
    const char* file_;
    int line_;
};

namespace detail {
inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
    if (code != cudaSuccess) {
        // Clear the error so the next unrelated call does not report it again.
        (void)cudaGetLastError();
        throw cuda_error(code, call, file, line);
    }
}
} // namespace detail

// Checks a CUDA runtime call and throws trickle::cuda_error on failure.
#define TRICKLE_CUDA_CHECK(call) ::trickle::detail::check_cuda((call), #call, __FILE__, __LINE__)
#endif

namespace detail {

// Builds a message from streamable parts: detail::concat("got ", n, " elements").
template <class... Parts>
std::string concat(Parts&&... parts) {
    std::ostringstream os;
    os.precision(17);
    (os << ... << std::forward<Parts>(parts));
    return os.str();
}

} // namespace detail

// Throws trickle::invalid_argument with the joined message when cond is false.
template <class... Parts>
void require(bool cond, Parts&&... parts) {
    if (!cond) throw invalid_argument(detail::concat(std::forward<Parts>(parts)...));
}

TRICKLE_NAMESPACE_END
