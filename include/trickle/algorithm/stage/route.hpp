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
//
// It also owns how a pass travels. An exchange is started (start()) and landed (land()):
// over a communicator that runs work on a progress thread (comm::async) and when the
// caller will not need the sums before its next steps (SPARTA's overlap, a fragment's
// overlap_steps), a plain all-reduce, or a whole encoded all-reduce (encode, exchange,
// decode, run by start_with on the wrapped communicator), runs while the worker trains;
// any other exchange runs at once and its flight is already landed: the same bits either
// way. A whole-group outer step (outer_step()) takes the engine's outer_pass (what the
// step produces and consumes, stage/outer_pass.hpp) and its pass_wrap (pruning, a robust
// rule), and chooses: the passes fused into the codec's on the host or on the device, or
// the plain sequence of producer, wrappers, sum and consumer.
#pragma once

#include <trickle/algorithm/detail/codec.hpp>
#include <trickle/algorithm/detail/device.hpp>
#include <trickle/algorithm/stage/outer_pass.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/codec/codec.hpp>
#include <trickle/codec/link.hpp>
#include <trickle/codec/reduce.hpp>
#include <trickle/codec/sparsifier.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/comm/request.hpp>
#include <trickle/comm/view.hpp>
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
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// An exchange the route started (exchange_route::start) and its caller lands later
// (exchange_route::land): its sums are in the caller's buffer once landed, and its bytes
// by part are known then.
struct route_flight {
    comm::request request{};  // running on the communicator's progress thread
    bool running = false;
    int group = 0;            // the size of the group it sums over
    std::size_t n = 0;        // values exchanged (a weighted exchange's weight apart)
    traffic_counters traffic{};
    codec::wire_parts parts{};
    std::shared_ptr<std::uint64_t> side; // running and weighted: the bytes of the weight's sum
};

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
        // An encoded exchange started earlier may still use the codec's scratch on the
        // progress thread.
        if constexpr (comm::job_communicator<Comm>) comm.synchronize();
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

    // Starts the sum of buf[0, n) (weighted: and of the weight buf[n]), exchange `round`;
    // `first` as for sum(). With `overlap`, over a communicator that runs work on a
    // progress thread, the all_reduce topology's plain or summed exchange runs there while
    // the caller computes; buf (and the residual's range) must then stay untouched until
    // land(). Otherwise the exchange runs now, and the flight comes back landed.
    template <class Exec, class Workspace>
    route_flight start(const Exec& ex, Comm& comm, float* buf, std::size_t n, Workspace& ws, std::uint64_t round,
                       std::size_t first, bool weighted, bool overlap) {
        route_flight f;
        f.n = n;
        if constexpr (comm::async_communicator<Comm> && !on_device) {
            if (overlap && overlaps()) {
                if (!encoded_) {
                    f.request = comm.start_all_reduce_sum(buf, n + (weighted ? 1 : 0));
                    f.running = true;
                    f.group = comm.size();
                    return f;
                }
                if constexpr (comm::job_communicator<Comm>) {
                    if (summed_) {
                        f.side = std::make_shared<std::uint64_t>(0);
                        f.request = comm.start_with(
                            [this, buf, n, round, first, weighted, side = f.side](typename Comm::wrapped_type& c) {
                                summed_on(c, buf, n, round, first);
                                if (weighted) {
                                    const std::uint64_t before = c.traffic().bytes_sent;
                                    c.all_reduce_sum(buf + n, 1);
                                    *side = c.traffic().bytes_sent - before;
                                }
                            });
                        f.running = true;
                        f.group = comm.size();
                        return f;
                    }
                }
            }
        } else {
            (void)overlap;
        }
        const traffic_counters before = comm.traffic();
        if (weighted) {
            sum_weighted(ex, comm, buf, n, ws, round, first);
            f.group = comm.size();
        } else {
            f.group = sum(ex, comm, buf, n, ws, round, first);
        }
        f.traffic = comm.traffic() - before;
        f.parts = parts_sent(comm, n, f.traffic);
        return f;
    }

    // Whether start(..., overlap = true) runs the exchange behind the caller's compute:
    // over a communicator that starts operations, with the all_reduce topology, plain or
    // summed (a communicator that runs whole exchanges, comm::async::start_with).
    bool overlaps() const {
        if constexpr (comm::async_communicator<Comm> && !on_device)
            return all_reduce() && (!encoded_ || (comm::job_communicator<Comm> && summed_));
        else
            return false;
    }

    // Waits for a started exchange if it still runs, and counts its bytes by part.
    void land(const Comm& comm, route_flight& f) const {
        if (!f.running) return;
        f.traffic = f.request.wait();
        f.running = false;
        f.parts = encoded_ ? summed_parts(comm, f.n, f.traffic, f.side ? *f.side : 0)
                           : codec::wire_parts{.codes = f.traffic.bytes_sent};
    }

    // One outer step over the whole group (pass.first == 0): the route chooses how it
    // travels. Without pruning, a robust rule or an elastic communicator, the summed route
    // fuses the producer and the consumer into the codec's passes (sum_fused on the host,
    // sum_fused_device on the device: the weights' sum first, so the update can divide by
    // it; no fp32 array of the deltas is stored); otherwise the producer, the wrappers
    // (pruning; a robust rule's combine replaces the sum), the sum and the consumer run in
    // turn. prepare() is called once the sums are known and before the consumer runs (it
    // commits the round and returns the outer rule). The same bits and bytes every way.
    template <class Exec, class Workspace, class T, class Prune, class Combine, class Prepare>
    void outer_step(const Exec& ex, Comm& comm, Workspace& ws, std::uint64_t round, const outer_pass<T>& pass,
                    const pass_wrap<Prune, Combine>& wrap, Prepare&& prepare) {
        constexpr bool elastic = comm::elastic_communicator<Comm>;
        constexpr const char* no_capture = "diloco::step: stochastic rounding draws new words at every outer step, "
                                           "which a captured CUDA graph would replay unchanged";
        const bool plain_pass = !wrap.prunes && !wrap.robust && !elastic;
        if constexpr (can_fuse) {
            if (plain_pass && summed_) {
                float* weight_sum = pass.buf + pass.n;
                *weight_sum = pass.weight;
                sum_weight(ex, comm, weight_sum, ws, round);
                const auto rule = prepare();
                sum_fused(
                    comm, pass.n, round, [&](std::size_t i0, std::size_t m, float* out) { pass.produce_tile(i0, m, out); },
                    [&](std::size_t i0, std::size_t m, const float* in) { pass.consume_tile(rule, i0, m, in); });
                return;
            }
        }
        if constexpr (can_fuse_device && std::is_same_v<Exec, exec::cuda>) {
            if (plain_pass && fuses_on_device()) {
                refuse_capture_if_stochastic(ex, no_capture);
                pass.store_weight(ex);
                sum_weight(ex, comm, pass.buf + pass.n, ws, round);
                with_rule(prepare(), [&](const auto& rule) {
                    sum_fused_device(ex, comm, pass.n, round, pass.source(), pass.sink(rule));
                });
                return;
            }
        }
        if (wrap.robust) { // (host parameters: refused on the device at construction)
            pass.run(ex, pass.delta(pass.weight > 0.0f ? 1.0f : 0.0f));
            if constexpr (!on_device) pass.buf[pass.n] = pass.weight;
            if (wrap.prunes) wrap.prune(ex, pass.buf);
            wrap.combine(pass.buf, pass.n);
        } else {
            pass.run(ex, pass.delta(pass.weight));
            if (wrap.prunes) wrap.prune(ex, pass.buf);
            refuse_capture_if_stochastic(ex, no_capture);
            sum_weighted(ex, comm, pass.buf, pass.n, ws, round, pass.first);
        }
        pass.run_update(ex, prepare());
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
            if constexpr (comm::job_communicator<Comm>) comm.synchronize(); // (as in sum())
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
        const std::uint64_t side = std::exchange(side_bytes_, 0);
        if (summed_) return summed_parts(comm, n, last, side);
        codec::wire_parts parts;
        if constexpr (!sparsified) parts = link_.take_sent();
        parts.scales += side;
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

    // The summed route's parts of an exchange of n values that sent `last`, `side` of it
    // the weight's sum (counted as scales).
    codec::wire_parts summed_parts(const Comm& comm, std::size_t n, const traffic_counters& last,
                                   std::uint64_t side) const {
        codec::wire_parts parts;
        if constexpr (sparsified)
            parts = sparse_all_reduce_parts(codec_, n, comm.size(), comm.rank()); // by ADL
        else
            parts = codec::encoded_all_reduce_parts(codec_, n, comm.size(), comm.rank());
        // Parts that are codes alone (a sparsifier's fp32 values through all_reduce_sum) are
        // whatever the exchange sent besides the weight's sum: the communicator's count, not
        // the ring cost model, which a communicator may beat (comm::process_group sends a
        // small all-reduce as one all-gather).
        if (parts.scales == 0 && parts.indices == 0 && parts.padding == 0 && parts.codes != 0)
            parts.codes = last.bytes_sent - side;
        parts.scales += side;
        return parts;
    }

    // The summed route's exchange on a host communicator C (the caller's, or the one a
    // progress thread wraps).
    template <class C>
    void summed_on(C& c, float* buf, std::size_t n, std::uint64_t round, std::size_t first) {
        if constexpr (!on_device && byte_communicator<C>) {
            float* residual = feedback_ ? residual_data() + first : nullptr;
            if constexpr (sparsified)
                sparse_all_reduce(codec_, c, buf, n, scratch_, residual, beta_, seed_, round); // by ADL (codec/sparse.hpp)
            else
                codec::encoded_all_reduce(codec_, c, buf, n, scratch_, residual, beta_, rounding(round));
        } else {
            (void)c, (void)buf, (void)n, (void)round, (void)first;
            throw invalid_argument("this communicator cannot carry an encoded all-reduce");
        }
    }
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
