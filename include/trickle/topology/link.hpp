// trickle/topology/link.hpp: how a topology's point-to-point rounds carry a worker's buffer.
//
// The topologies that average without a global all-reduce (ring, gossip, exponential,
// islands) move buffers in rounds of send_recv. A link decides what travels in a round:
//   prepare(ex, comm, buf, n)    this worker is about to send buf[0, n): the link may
//                                replace buf by what its receivers will get from it (an
//                                encoded link rounds buf to the codec's values), so that the
//                                sender and its receivers hold the same bits
//   relay(ex, comm, buf, n)      this worker is about to send on what it received last
//                                into buf[0, n): the same bytes again (a lossy link must not
//                                round them twice)
//   exchange(ex, comm, dst, send, recv, m, src)
//                                one collective send_recv round: the prepared buffer goes to
//                                dst when `send`, and recv[0, m) receives src's
//   lossless                     static: true when the link sends the fp32 values themselves
// A round must have been prepared when `send` is true; a topology prepares each buffer once
// before the rounds that send it. plain_link sends the fp32 values as they are (every
// topology's behaviour without a codec, bit for bit and byte for byte);
// codec::encoded_link (codec/link.hpp) sends a codec's bytes.
#pragma once

#include <trickle/config.hpp>

#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

struct plain_link {
    static constexpr bool lossless = true;
    const float* sent = nullptr;
    std::size_t count = 0;

    template <class Exec, class Comm>
    void prepare(const Exec&, Comm&, float* buf, std::size_t n) {
        sent = buf;
        count = n;
    }

    template <class Exec, class Comm>
    void relay(const Exec& ex, Comm& comm, float* buf, std::size_t n) {
        prepare(ex, comm, buf, n);
    }

    template <class Exec, class Comm>
    void exchange(const Exec&, Comm& comm, int dst, bool send, float* recv, std::size_t m, int src) {
        comm.send_recv(sent, send ? count : 0, dst, recv, m, src);
    }
};

TRICKLE_NAMESPACE_END
