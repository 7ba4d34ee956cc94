// trickle/error.hpp: the exceptions trickle throws and the checks that raise them.
#pragma once

#include <trickle/config.hpp>

#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
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

// The shortest digits that read back as the same value (std::to_chars without a
// precision), in the value's own type: 0.005 prints as "0.005", 0.1f as "0.1" (not the
// 17 digits "0.10000000149011612" of the float widened to double). Written as a plain
// decimal from 1e-4 up to 1e16 ("0.0001", "100000") and in scientific notation outside
// ("1e-08", "1e+20"), as Python's repr does.
template <class F>
    requires std::is_floating_point_v<F>
std::string shortest(F value) {
    const F magnitude = value < 0 ? -value : value;
    const bool plain = magnitude == 0 || (magnitude >= F(1e-4) && magnitude < F(1e16));
    char buf[64];
    const auto end =
        std::to_chars(buf, buf + sizeof buf, value, plain ? std::chars_format::fixed : std::chars_format::scientific).ptr;
    return std::string(buf, end);
}

template <class Part>
void put_part(std::ostringstream& os, Part&& part) {
    if constexpr (std::is_floating_point_v<std::remove_cvref_t<Part>>)
        os << shortest(part);
    else
        os << std::forward<Part>(part);
}

// Builds a message from streamable parts: detail::concat("got ", n, " elements").
// Floating-point parts print in their shortest round-trip form (shortest() above), so a
// message says "fraction 0.005", not "0.0050000000000000001". Configuration records keep
// their own 17-digit text (core/config_record.hpp), which checkpoints hash.
template <class... Parts>
std::string concat(Parts&&... parts) {
    std::ostringstream os;
    os.precision(17);
    (put_part(os, std::forward<Parts>(parts)), ...);
    return os.str();
}

} // namespace detail

// Throws trickle::invalid_argument with the joined message when cond is false.
template <class... Parts>
void require(bool cond, Parts&&... parts) {
    if (!cond) throw invalid_argument(detail::concat(std::forward<Parts>(parts)...));
}

TRICKLE_NAMESPACE_END
