// trickle/algorithm/stage/route.hpp: the exchange route, the stage that sums an
// algorithm's buffer over its workers.
//
// Every exchange of every algorithm (SPARTA's selected values, DiLoCo's outer gradient,
// one streaming fragment's) goes through one route, decided once at construction from
// the codec and the topology:
//
//   plain     the codec fp32: fp32 sums through the topology's rounds (today's wire)
//   summed    any other codec with the all_reduce topology: the encoded all-reduce
//             (codec::encoded_all_reduce on the host, encoded_all_reduce_blocks on the
//             device, codec::sparse_all_reduce for a sparsifier)
//   linked    any other codec with another topology: the codec's bytes through the
//             topology's rounds (codec::encoded_link)
//
// The route owns what its exchanges need: the codec's scratch (sized once, no step
// allocates), the link, the error-feedback residual, and the byte
// accounting by part (codes, scales, indices, padding). A weighted exchange (DiLoCo)
// carries its weight last: with the plain route in the same buffer, otherwise summed
// exactly apart, its bytes counted as scales.
#pragma once

#include <trickle/algorithm/detail/codec.hpp>
#include <trickle/algorithm/detail/device.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/codec/codec.hpp>
#include <trickle/codec/link.hpp>
#include <trickle/codec/reduce.hpp>
#include <trickle/codec/sparsifier.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Topology: a topology policy; Wire: the resolved codec (codec::resolve_t), a value codec
// or a sparsifier; Space and Comm: the parameters' memory space and the communicator.
template <class Topology, class Wire, class Space, class Comm>
class exchange_route {
public:
    static constexpr bool sparsified = codec::sparsifier_policy<Wire>;
    static constexpr bool on_device = std::is_same_v<Space, cuda_space>;
    static_assert(codec_policy<Wire> || sparsified,
                  "Codec must satisfy trickle::codec_policy or codec::sparsifier_policy (or be codec::native)");

    exchange_route() = default;
    exchange_route(Topology topology, Wire codec, std::uint64_t seed, bool stochastic, double error_feedback = 0.0)
        : topology_(std::move(topology)), codec_(std::move(codec)), seed_(seed), stochastic_(stochastic),
          beta_(static_cast<float>(error_feedback)) {
        encoded_ = !plain_codec(codec_);
        summed_ = encoded_ && is_all_reduce(topology_);
        feedback_ = error_feedback > 0.0 && encoded_;
    }

    // The topology's and the codec's fields and errors, for the algorithm's record.
    void describe(config_record& rec, int workers, const char* kind) const {
        describe_topology(topology_, rec, workers);
        describe_codec<Comm, Space>(codec_, topology_, rec, kind, stochastic_);
    }

    // Sizes everything an exchange of up to `capacity` values uses, once: the topology's
    // workspace slots for `ws_values` values (capacity, plus the weight for a weighted
    // exchange), the codec's scratch and link, and the residual (error feedback).
    template <class Workspace>
    void reserve(Comm& comm, Workspace& ws, std::size_t capacity, std::size_t ws_values, const exec::cuda& ex) {
        capacity_ = capacity;
        ex_ = ex;
        reserve_topology_scratch<Topology>(ws, ws_values);
        reserve_codec_scratch(comm);
        if constexpr (!sparsified)
            if (encoded_ && !summed_) link_.reserve(codec_, capacity, ex);
        if constexpr (on_device) {
            if constexpr (byte_communicator<Comm> && !sparsified)
                if (summed_) device_scratch_.reserve(codec_, capacity, comm.size(), ex);
            if (feedback_) residual_dev_ = buffer<float, Space>(capacity, ex);
        } else {
            if (feedback_) residual_.assign(capacity, 0.0f);
        }
    }

    // A new view of an elastic world: the codec's host scratch for its number of workers.
    void view_changed(Comm& comm) { reserve_codec_scratch(comm); }

    bool encoded() const { return encoded_; }
    bool summed() const { return summed_; }
    bool feedback() const { return feedback_; }
    bool all_reduce() const { return is_all_reduce(topology_); }
    const Wire& codec() const { return codec_; }

    // Refuses (with `message`) to run inside a CUDA-graph capture when the route rounds
    // stochastically: its words change at every exchange, and a replay would repeat them.
    // Nothing on a host execution space.
    template <class Exec>
    void refuse_capture_if_stochastic(const Exec& ex, const char* message) const {
        if constexpr (std::is_same_v<Exec, exec::cuda>)
            if (encoded_ && stochastic_) refuse_capture(ex, message);
    }

    // The rounding of exchange `round` (stochastic rounding's words are keyed by it).
    codec::rounding rounding(std::uint64_t round) const { return codec::rounding{stochastic_, seed_, round}; }

    // The sum over the topology's group of buf[0, n), exchange `round` (SPARTA: its
    // exchanges; DiLoCo: its outer rounds); `first`: where buf starts in the group, for the
    // residual of error feedback. Returns the group's size.
    template <class Exec, class Workspace>
    int sum(const Exec& ex, Comm& comm, float* buf, std::size_t n, Workspace& ws, std::uint64_t round,
            std::size_t first = 0) {
        const reduce_context ctx{seed_, round};
        if (!encoded_) return topology_reduce(topology_, ex, comm, buf, n, ws, ctx);
        float* residual = feedback_ ? residual_data() + first : nullptr;
        if (summed_) {
            if constexpr (byte_communicator<Comm>) {
                if constexpr (sparsified) {
                    if constexpr (!on_device)
                        return sparse_all_reduce(codec_, comm, buf, n, scratch_, residual, beta_, seed_, round); // found by ADL (codec/sparse.hpp)
                } else if constexpr (on_device) {
                    return codec::encoded_all_reduce_blocks(codec_, comm, ex, buf, n, device_scratch_, residual, beta_,
                                                            rounding(round));
                } else {
                    return codec::encoded_all_reduce(codec_, comm, buf, n, scratch_, residual, beta_, rounding(round));
                }
            }
            throw invalid_argument("this communicator cannot carry an encoded all-reduce"); // refused at construction
        }
        if constexpr (!sparsified && reduce_takes_link<Topology, Exec, Comm, Space, link_type>) {
            link_.begin(residual, beta_, rounding(round), comm.rank());
            return topology_reduce(topology_, ex, comm, buf, n, ws, ctx, link_);
        } else {
            throw invalid_argument("this topology cannot carry the codec"); // refused at construction
        }
    }

    // A weighted exchange: the sum of buf[0, n) and of the weight buf[n]. The plain route
    // sums both in one call; an encoded one sums the values through the codec and the
    // weight exactly apart (an all-reduce with the all_reduce topology, the topology's own
    // rounds, drawn from the same context, with any other).
    template <class Exec, class Workspace>
    void sum_weighted(const Exec& ex, Comm& comm, float* buf, std::size_t n, Workspace& ws, std::uint64_t round,
                      std::size_t first = 0) {
        if (!encoded_) {
            topology_reduce(topology_, ex, comm, buf, n + 1, ws, reduce_context{seed_, round});
            return;
        }
        sum(ex, comm, buf, n, ws, round, first);
        sum_weight(ex, comm, buf + n, ws, round);
    }

    // The weight's exact sum, alone (the fused outer step sums it first).
    template <class Exec, class Workspace>
    void sum_weight(const Exec& ex, Comm& comm, float* w, Workspace& ws, std::uint64_t round) {
        const std::uint64_t before = comm.traffic().bytes_sent;
        if (summed_)
            comm.all_reduce_sum(w, 1);
        else
            topology_reduce(topology_, ex, comm, w, 1, ws, reduce_context{seed_, round});
        side_bytes_ += comm.traffic().bytes_sent - before;
    }

    // The summed route on host memory with the passes fused into the encoding and the
    // decoding, tile by tile (codec::encoded_all_reduce_tiled): produce(i0, m, out) writes
    // values [i0, i0 + m), consume(i0, m, in) takes their sums; the fp32 buffer is never
    // stored. The same bits and bytes as sum() between two separate passes.
    static constexpr bool can_fuse = !on_device && byte_communicator<Comm> && !sparsified;
    template <class Produce, class Consume>
    void sum_fused(Comm& comm, std::size_t n, std::uint64_t round, Produce&& produce, Consume&& consume) {
        if constexpr (can_fuse) {
            codec::encoded_all_reduce_tiled(codec_, comm, n, scratch_, std::forward<Produce>(produce),
                                            std::forward<Consume>(consume), feedback_ ? residual_.data() : nullptr,
                                            beta_, rounding(round));
        } else {
            (void)comm, (void)n, (void)round, (void)produce, (void)consume;
        }
    }

    // The summed route on device memory with the passes fused the same way
    // (codec::encoded_all_reduce_blocks_fused): source(i, count, out) produces values
    // [i, i + count), sink(i, count, in) takes their sums, both device functors
    // (kernels/codec_pass.hpp's value_source, value_sink) run inside the encode and decode
    // passes; no fp32 array of the values is stored. The same bits and bytes as sum()
    // between two separate passes.
    static constexpr bool can_fuse_device = on_device && byte_communicator<Comm> && !sparsified;
    bool fuses_on_device() const {
        if constexpr (can_fuse_device)
            return summed_ && codec::fuses_values(codec_);
        else
            return false;
    }
    template <class Exec, class Source, class Sink>
    void sum_fused_device(const Exec& ex, Comm& comm, std::size_t n, std::uint64_t round, const Source& source,
                          const Sink& sink) {
        if constexpr (can_fuse_device) {
            codec::encoded_all_reduce_blocks_fused(codec_, comm, ex, n, device_scratch_, source, sink,
                                                   feedback_ ? residual_data() : nullptr, beta_, rounding(round));
        } else {
            (void)ex, (void)comm, (void)n, (void)round, (void)source, (void)sink;
        }
    }

    // What an exchange of n values sent, by part, once it completed; `last` its traffic.
    // The plain route's bytes are all codes; an encoded one's parts come from the codec's
    // cost model (summed) or the link's count (linked), the weight's sum as scales.
    codec::wire_parts parts_sent(const Comm& comm, std::size_t n, const traffic_counters& last) {
        if (!encoded_) return codec::wire_parts{.codes = last.bytes_sent};
        codec::wire_parts parts;
        if (summed_) {
            if constexpr (sparsified)
                parts = sparse_all_reduce_parts(codec_, n, comm.size(), comm.rank()); // by ADL
            else
                parts = codec::encoded_all_reduce_parts(codec_, n, comm.size(), comm.rank());
        } else {
            if constexpr (!sparsified) parts = link_.take_sent();
        }
        // Parts that are codes alone (a sparsifier's fp32 values through all_reduce_sum) are
        // whatever the exchange sent besides the weight's sum: the communicator's count, not
        // the ring cost model, which a communicator may beat (comm::process_group sends a
        // small all-reduce as one all-gather).
        if (summed_ && parts.scales == 0 && parts.indices == 0 && parts.padding == 0 && parts.codes != 0)
            parts.codes = last.bytes_sent - side_bytes_;
        parts.scales += std::exchange(side_bytes_, 0);
        return parts;
    }

    // ---- Error feedback's residual: this worker's compression error of the last exchange,
    // part of the replica's state (checkpointed, rolled back with a failed round: the
    // engines name it as a section of their replica_state).
    std::vector<float> residual() const {
        if constexpr (on_device) {
            std::vector<float> out(residual_dev_.size());
            copy_elements<host_space, Space>(out.data(), residual_dev_.data(), out.size(), ex_);
            return out;
        } else {
            return residual_;
        }
    }
    void set_residual(const std::vector<float>& r) {
        if constexpr (on_device)
            copy_elements<Space, host_space>(residual_dev_.data(), r.data(), r.size(), ex_);
        else
            residual_ = r;
    }
private:
    using link_type = codec_link_t<Wire, Space>;
    using scratch_type = std::conditional_t<sparsified, codec::sparse_scratch, codec::reduce_scratch>;

    void reserve_codec_scratch(Comm& comm) {
        if constexpr (!on_device && byte_communicator<Comm>) {
            if constexpr (sparsified) {
                if (codec_.error().empty()) codec_.reserve_scratch(scratch_, capacity_, comm.size());
            } else if (summed_) {
                scratch_.reserve(codec_, capacity_, comm.size());
            }
        } else {
            (void)comm;
        }
    }

    float* residual_data() {
        if constexpr (on_device)
            return residual_dev_.data();
        else
            return residual_.data();
    }

    Topology topology_{};
    Wire codec_{};
    std::uint64_t seed_ = 0;
    bool stochastic_ = false;
    float beta_ = 0.0f;
    bool encoded_ = false;  // a codec other than fp32
    bool summed_ = false;   // ... with the all_reduce topology
    bool feedback_ = false; // error feedback on (a lossy codec and beta > 0)
    std::size_t capacity_ = 0;
    std::uint64_t side_bytes_ = 0; // bytes of the weight's separate sum in the current exchange
    exec::cuda ex_{};
    link_type link_;
    scratch_type scratch_;
    codec::block_reduce_scratch<cuda_space> device_scratch_;
    std::vector<float> residual_;
    buffer<float, Space> residual_dev_;
};

} // namespace detail

TRICKLE_NAMESPACE_END
