// trickle/comm/byte_stream.hpp: a byte stream from one rank to chosen others over any
// communicator, that moves large writes without copying them.
//
// The root writes through an std::ostream over stream_writer; every other rank builds a
// stream_reader with the same root and the same set of receivers. A receiver reads through
// an std::istream over it; every reader ends with drain() (it takes part in the rest of the
// stream, keeping nothing; a rank that does not receive only drains). The bytes travel as messages: a header (how many small bytes, how
// many direct bytes, whether it is the last) through the control plane (all_gather_bytes);
// the small bytes, gathered from the writes shorter than stream_direct_bytes, in one
// broadcast to every rank; then the direct bytes (one large write) from where they lie in
// the writer's memory to each receiver in turn (send_recv: the ranks that do not receive
// move nothing), in pieces of at most stream_piece_bytes. A receiver that asks for a whole
// piece at once (std::istream::read into its destination) receives it there; any other
// piece goes through one reused buffer. So a state of many megabytes read straight into the
// memory it belongs to crosses with no copy on either side, no buffer of its size anywhere,
// and only to the ranks that need it.
//
// Every rank issues the same collectives with the same sizes whatever it reads: the piece
// schedule depends only on the message headers and the receivers. A reader that stops early
// (it refused what it read) must still drain() so that the collectives stay matched; the
// destructor does not (a collective from a destructor would hide an exception). Bytes travel
// unchanged: a broadcast or a send copies bits, whatever its element type.
#pragma once

#include <trickle/config.hpp>
#include <trickle/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The header of one message: small bytes, direct bytes, last (1) or not (0).
struct stream_message {
    std::uint64_t small = 0;
    std::uint64_t direct = 0;
    std::uint64_t last = 0;
};

// Writes shorter than this are gathered into the next message's small bytes.
inline constexpr std::size_t stream_direct_bytes = std::size_t{1} << 16;
// A direct part travels in sends of at most this many bytes (a multiple of 4).
inline constexpr std::size_t stream_piece_bytes = std::size_t{1} << 26;

inline std::size_t floats_for(std::size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); }

template <class Comm>
void check_receivers(const Comm& comm, int root, const std::vector<char>& receives, const char* who) {
    if (root < 0 || root >= comm.size() || receives.size() != static_cast<std::size_t>(comm.size()))
        throw invalid_argument(concat("comm::", who, ": root ", root, " and ", receives.size(),
                                      " receiver flags do not fit a communicator of ", comm.size(), " ranks"));
}

} // namespace detail

namespace comm {

template <class Comm>
class stream_writer : public std::streambuf {
public:
    // `receives[r]`: whether rank r reads the stream (root's entry is ignored). Every other
    // rank builds a stream_reader with the same root and receivers.
    stream_writer(Comm& comm, int root, std::vector<char> receives)
        : comm_(comm), root_(root), receives_(std::move(receives)) {
        detail::check_receivers(comm_, root_, receives_, "stream_writer");
    }
    stream_writer(const stream_writer&) = delete;
    stream_writer& operator=(const stream_writer&) = delete;

    // Sends what is gathered and the end of the stream. Collective; call it exactly once.
    void finish() {
        if (finished_) throw invalid_argument("comm::stream_writer: finish() called twice");
        finished_ = true;
        send(nullptr, 0, true);
    }
    // The bytes written so far.
    std::uint64_t bytes() const { return bytes_; }

protected:
    int_type overflow(int_type c) override {
        if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
        const char ch = traits_type::to_char_type(c);
        xsputn(&ch, 1);
        return c;
    }
    std::streamsize xsputn(const char* s, std::streamsize count) override {
        if (finished_) return 0;
        auto n = static_cast<std::size_t>(count);
        bytes_ += n;
        // A large write goes directly: its whole floats from where they lie, the rest (at most
        // three bytes, or all of it where it is not aligned for floats) with the next message.
        const std::size_t whole = reinterpret_cast<std::uintptr_t>(s) % alignof(float) == 0
                                      ? n / sizeof(float) * sizeof(float)
                                      : 0;
        if (whole >= detail::stream_direct_bytes) {
            send(s, whole, false);
            s += whole;
            n -= whole;
        }
        small_.append(s, n);
        return count;
    }

private:
    void send(const char* direct, std::size_t n, bool last) {
        const detail::stream_message m{small_.size(), n, last ? 1u : 0u};
        std::vector<detail::stream_message> all(static_cast<std::size_t>(comm_.size()));
        comm_.all_gather_bytes(&m, all.data(), sizeof m);
        if (!small_.empty()) {
            small_.resize(detail::floats_for(small_.size()) * sizeof(float), '\0');
            comm_.broadcast(reinterpret_cast<float*>(small_.data()), small_.size() / sizeof(float), root_);
            small_.clear();
        }
        for (std::size_t o = 0; o < n; o += detail::stream_piece_bytes) {
            const std::size_t k = std::min(detail::stream_piece_bytes, n - o);
            const auto* piece = reinterpret_cast<const float*>(direct + o);
            for (int r = 0; r < comm_.size(); ++r)
                if (r != root_ && receives_[static_cast<std::size_t>(r)])
                    comm_.send_recv(piece, k / sizeof(float), r, nullptr, 0, r);
        }
    }

    Comm& comm_;
    int root_;
    std::vector<char> receives_;
    std::string small_;
    std::uint64_t bytes_ = 0;
    bool finished_ = false;
};

template <class Comm>
class stream_reader : public std::streambuf {
public:
    stream_reader(Comm& comm, int root, std::vector<char> receives)
        : comm_(comm), root_(root), receives_(std::move(receives)) {
        detail::check_receivers(comm_, root_, receives_, "stream_reader");
    }
    stream_reader(const stream_reader&) = delete;
    stream_reader& operator=(const stream_reader&) = delete;

    // Takes part in the rest of the stream, keeping nothing. Collective.
    void drain() {
        while (!ended_ || direct_left_ != 0) {
            if (direct_left_ != 0) {
                receive_piece(nullptr);
            } else {
                next_message();
            }
        }
        setg(nullptr, nullptr, nullptr);
    }
    // The rest of the stream as a string. Collective.
    std::string rest() {
        require_receiver();
        std::string out;
        while (true) {
            if (gptr() < egptr()) {
                out.append(gptr(), static_cast<std::size_t>(egptr() - gptr()));
                setg(nullptr, nullptr, nullptr);
            }
            if (direct_left_ != 0) { // a direct part: received at the string's end, grown once
                const std::size_t at = out.size();
                out.resize(at + direct_left_);
                const auto got = static_cast<std::size_t>(xsgetn(out.data() + at, static_cast<std::streamsize>(direct_left_)));
                out.resize(at + got);
                continue;
            }
            if (!fill()) return out;
        }
    }
    // The bytes that arrived so far (read or not).
    std::uint64_t bytes() const { return bytes_; }

protected:
    int_type underflow() override {
        require_receiver();
        if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
        if (!fill()) return traits_type::eof();
        return traits_type::to_int_type(*gptr());
    }
    std::streamsize xsgetn(char* out, std::streamsize count) override {
        require_receiver();
        auto n = static_cast<std::size_t>(count);
        std::size_t done = 0;
        while (done < n) {
            if (gptr() < egptr()) {
                const std::size_t k = std::min(n - done, static_cast<std::size_t>(egptr() - gptr()));
                std::memcpy(out + done, gptr(), k);
                gbump(static_cast<int>(k));
                done += k;
                continue;
            }
            // A whole piece the caller wants goes straight into its memory.
            const std::size_t piece = std::min(detail::stream_piece_bytes, direct_left_);
            if (direct_left_ != 0 && n - done >= piece &&
                reinterpret_cast<std::uintptr_t>(out + done) % alignof(float) == 0) {
                receive_piece(out + done);
                done += piece;
                continue;
            }
            if (!fill()) break;
        }
        return static_cast<std::streamsize>(done);
    }

private:
    void require_receiver() const {
        if (!receives_[static_cast<std::size_t>(comm_.rank())])
            throw invalid_argument("comm::stream_reader: this rank does not receive the stream (drain() it)");
    }
    // Makes the next bytes readable through the get area; false at the end of the stream.
    bool fill() {
        while (true) {
            if (direct_left_ != 0) {
                const std::size_t k = receive_piece(buffer());
                setg(piece_.data(), piece_.data(), piece_.data() + k);
                return true;
            }
            if (ended_) {
                setg(nullptr, nullptr, nullptr);
                return false;
            }
            next_message();
            if (!small_.empty()) {
                setg(small_.data(), small_.data(), small_.data() + small_size_);
                return true;
            }
        }
    }
    // The next header and its small bytes.
    void next_message() {
        std::vector<detail::stream_message> all(static_cast<std::size_t>(comm_.size()));
        const detail::stream_message none{};
        comm_.all_gather_bytes(&none, all.data(), sizeof none);
        const detail::stream_message m = all[static_cast<std::size_t>(root_)];
        small_size_ = static_cast<std::size_t>(m.small);
        small_.assign(detail::floats_for(small_size_) * sizeof(float), '\0');
        if (!small_.empty())
            comm_.broadcast(reinterpret_cast<float*>(small_.data()), small_.size() / sizeof(float), root_);
        bytes_ += m.small + m.direct;
        direct_left_ = static_cast<std::size_t>(m.direct);
        ended_ = m.last != 0;
    }
    char* buffer() {
        if (piece_.empty()) piece_.resize(detail::stream_piece_bytes);
        return piece_.data();
    }
    // The next piece of the direct part into `to` (null: the reused buffer; a rank that does
    // not receive takes part in each receiver's turn and moves nothing); its size.
    std::size_t receive_piece(char* to) {
        const std::size_t k = std::min(detail::stream_piece_bytes, direct_left_);
        const int me = comm_.rank();
        for (int r = 0; r < comm_.size(); ++r) {
            if (r == root_ || !receives_[static_cast<std::size_t>(r)]) continue;
            if (r == me)
                comm_.send_recv(nullptr, 0, root_, reinterpret_cast<float*>(to ? to : buffer()), k / sizeof(float), root_);
            else
                comm_.send_recv(nullptr, 0, me, nullptr, 0, me);
        }
        direct_left_ -= k;
        return k;
    }

    Comm& comm_;
    int root_;
    std::vector<char> receives_;
    std::string small_;
    std::size_t small_size_ = 0;
    std::vector<char> piece_;
    std::size_t direct_left_ = 0;
    std::uint64_t bytes_ = 0;
    bool ended_ = false;
};

} // namespace comm

TRICKLE_NAMESPACE_END
