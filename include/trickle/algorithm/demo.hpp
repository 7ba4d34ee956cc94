// trickle/algorithm/demo.hpp: DeMo (Decoupled Momentum Optimization; Peng, Quesnelle, Kingma,
// 2024), a distributed optimizer that exchanges a few DCT coefficients of each worker's
// momentum instead of all-reducing gradients.
//
// Per step, for each tensor (as published; docs/demo.md):
//   m <- beta m + g                          (beta: the compression decay, 0.999)
//   split m into chunks (1-D chunks of s values for vectors, s x s tiles for matrices; a
//   partial chunk at an edge is zero-padded in the frequency domain), DCT-II each chunk,
//   keep the k largest-magnitude coefficients of each chunk, and remove them from m;
//   exchange every worker's kept (index, value) pairs, scatter them, mean over workers,
//   inverse DCT -> Q;
//   p <- p - lr (sign(Q) + wd p).
// Every worker applies the same Q, so replicas that start equal stay equal, bit for bit.
//
// Built from what trickle has (no new exchange): the DCT is orthonormal and linear, so
// DeMo's momentum after removal, kept in the frequency domain, is exactly the error-feedback
// residual of codec::sparse_all_reduce with beta = the compression decay: the engine writes
// DCT(g) into a coefficient buffer (kernels/dct.hpp), and the sparsifier's all-reduce forms
// e = DCT(g) + beta r, sends its top-k per chunk, keeps r = e - what was sent (decoded, so a
// lossy value codec's error stays in the momentum too) and leaves the sum over workers,
// which the decode body inverts and applies. The selection is a policy:
//   demo_select::top_k    each worker's own top-k per chunk (codec::chunk_topk): DeMo as
//                         published, an all-gather of packed indices and values;
//   demo_select::shared   k coefficients per chunk chosen by the shared seed
//                         (codec::chunk_randk): no index on the wire and a plain all-reduce
//                         of the values (O(k) received per worker instead of O(N k)).
// Values: fp32 by default, or any value codec (bf16, sign2_block for DisTrO's sign-only
// values, ...), through the sparsifier's values.
//
// This version: host float parameters and gradients (exec::host, exec::openmp), any
// byte_communicator (comm::local, comm::process_group, MPI). Vectors and matrices are told
// apart by the shapes given (rows x cols; rows = 1: a vector).
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/detail/common.hpp>
#include <trickle/algorithm/stage/replica_state.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/codec/codec.hpp>
#include <trickle/codec/sparse.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/dct.hpp>

#include <cmath>
#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// Options of DeMo; every worker must pass the same values.
struct demo_options {
    double lr = 1e-3;                  // the step size of sign(Q) (> 0, finite); set_lr() changes it later
    double compression_decay = 0.999;  // beta in [0, 1]: m <- beta m + g
    double weight_decay = 0.0;         // wd >= 0: p <- p - lr (sign(Q) + wd p)
    std::size_t chunk = 64;            // s in [1, 256]: 1-D chunks of s values, s x s tiles
    std::size_t k = 32;                // coefficients kept per chunk, in [1, s * s] (vectors keep min(k, s))
    std::uint64_t seed = 0;            // the shared seed (demo_select::shared's positions)
};

// A tensor as DeMo chunks it: rows x cols elements (rows = 1: a vector, 1-D chunks; rows > 1:
// a matrix, s x s tiles). A tensor of more dimensions is usually given as (dim 0, the rest).
struct demo_shape {
    std::size_t rows = 1;
    std::size_t cols = 0;
};

namespace demo_select {
struct top_k {
    static constexpr const char* name = "top_k";
    template <class Values>
    using sparsifier = codec::chunk_topk<Values>;
};
struct shared {
    static constexpr const char* name = "shared";
    template <class Values>
    using sparsifier = codec::chunk_randk<Values>;
};
} // namespace demo_select

// DeMo over communicator Comm (host memory), coefficients chosen by Select, values coded by
// Values.
template <class Comm, class Select = demo_select::top_k, codec_policy Values = codec::fp32>
class demo_engine {
    static_assert(byte_communicator<Comm>, "demo: the communicator must be a trickle::byte_communicator");
    static_assert(std::is_same_v<typename Comm::memory_space, host_space>,
                  "demo: this version runs on host parameters (the communicator moves host memory)");
    using sparsifier_type = typename Select::template sparsifier<Values>;

public:
    static constexpr const char* kind = "demo";

    // Collective: every worker constructs at once. grads has the parameters' layout (the
    // trainer's gradient buffers); shapes, one per tensor, say how each is chunked.
    // Invalid options, layouts or shapes, or workers that disagree, throw the same error on
    // every worker (invalid_argument or mismatch_error) and change nothing.
    demo_engine(const param_group<float>& params, const param_group<float>& grads, std::vector<demo_shape> shapes,
                Comm& comm, demo_options options = {}, Values values = {})
        : comm_(comm), options_(options), values_(values), replica_(kind) {
        const config_record rec = describe(params, grads, shapes);
        agree(comm_, rec);
        replica_.set_config_hash(detail::fnv1a(rec.serialize()));
        bases_ = dct_bases(options_.chunk);
        for (std::size_t i = 0; i < params.tensor_count(); ++i) {
            params_.push_back(params[i].view.data());
            grads_.push_back(grads[i].view.data());
        }
        const std::size_t s = options_.chunk;
        vec_.slot = s;
        mat_.slot = s * s;
        vec_.pitch = mat_.pitch = s;
        for (std::size_t i = 0; i < shapes.size(); ++i)
            append_dct_chunks(vec_.chunks, mat_.chunks, static_cast<std::uint32_t>(i), shapes[i].rows, shapes[i].cols, s);
        for (part* p : {&vec_, &mat_}) {
            p->sp.chunk = p->slot;
            p->sp.k = std::min(options_.k, p->slot);
            p->sp.values = values_;
            const std::size_t n = p->size();
            p->coef.assign(n, 0.0f);
            p->residual.assign(n, 0.0f);
            p->sp.reserve_scratch(p->scratch, n, comm_.size());
        }
        dense_per_step_ = detail::dense_bytes_of(comm_, params.total_size());
        detail::add_stats_sections(replica_, stats_, detail::saved | detail::backed_up);
        replica_.add("momentum", detail::saved | detail::backed_up,
                     (vec_.size() + mat_.size()) * sizeof(float),
                     [this] {
                         std::string b = detail::bytes_of(vec_.residual.data(), vec_.residual.size());
                         b += detail::bytes_of(mat_.residual.data(), mat_.residual.size());
                         return b;
                     },
                     [this](const std::string& b) {
                         detail::bytes_to(b, vec_.residual.data(), vec_.residual.size());
                         detail::bytes_to(b.substr(vec_.residual.size() * sizeof(float)), mat_.residual.data(),
                                          mat_.residual.size());
                     });
    }

    demo_engine(const demo_engine&) = delete;
    demo_engine& operator=(const demo_engine&) = delete;

    // The whole optimizer step, collective: after the trainer's backward pass (the gradients
    // in grads), on every worker; the parameters are updated in place.
    template <class Exec>
    void step(const Exec& ex) {
        static_assert(can_access_v<Exec, host_space>, "demo::step: this execution space cannot reach host memory");
        const traffic_counters before = comm_.traffic();
        codec::wire_parts parts;
        std::uint64_t values = 0;
        const demo_sign_update update{static_cast<float>(options_.lr), static_cast<float>(options_.weight_decay),
                                      1.0f / static_cast<float>(comm_.size())};
        for (part* p : {&vec_, &mat_}) {
            if (p->chunks.empty()) continue;
            const std::size_t n = p->size();
            detail::run_ranges(ex, p->chunks.size(),
                               dct_encode_body{p->chunks.data(), bases_.data(), grads_.data(), p->coef.data(),
                                               p->slot, p->pitch});
            sparse_all_reduce(p->sp, comm_, p->coef.data(), n, p->scratch, p->residual.data(),
                              static_cast<float>(options_.compression_decay), options_.seed, stats_.steps);
            detail::run_ranges(ex, p->chunks.size(),
                               dct_decode_body<demo_sign_update>{p->chunks.data(), bases_.data(), p->coef.data(),
                                                                 params_.data(), p->slot, p->pitch, update});
            parts += sparse_all_reduce_parts(p->sp, n, comm_.size(), comm_.rank());
            values += p->sp.kept(n);
        }
        stats_.add_exchange(comm_.traffic() - before, parts, values);
        ++stats_.steps;
        stats_.dense_bytes += dense_per_step_;
    }

    // A new step size (a learning-rate schedule); every worker must set the same.
    void set_lr(double lr) {
        require(std::isfinite(lr) && lr > 0.0, "demo: lr must be finite and > 0, got ", lr);
        options_.lr = lr;
    }

    const exchange_stats& stats() const { return stats_; }
    const demo_options& options() const { return options_; }
    // Coefficients per step (both chunk classes, padding included) and their chunks.
    std::size_t coefficients() const { return vec_.size() + mat_.size(); }
    std::size_t chunks() const { return vec_.chunks.size() + mat_.chunks.size(); }
    // This worker's momentum, in the frequency domain: the vectors' chunks, then the tiles'
    // (each chunk's slot, padded), what a checkpoint saves.
    std::vector<float> momentum() const {
        std::vector<float> m = vec_.residual;
        m.insert(m.end(), mat_.residual.begin(), mat_.residual.end());
        return m;
    }

    // Writes the step counters and this worker's momentum.
    void save(std::ostream& os) const { replica_.save(os); }
    // Collective: reads a checkpoint written by save() under the same configuration; on any
    // worker's error every worker throws the same one and nothing changes.
    void load(std::istream& is, const std::string& source = "stream",
              checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        replica_.load(comm_, is, source, trailing, [](const detail::staged_sections& st, bool) {
            config_record rec("demo checkpoint");
            const exchange_stats s = st.has("stats") ? st.value<exchange_stats>("stats") : exchange_stats{};
            rec.add("step", s.steps);
            return rec;
        });
    }

private:
    struct part {
        std::vector<dct_chunk> chunks;
        std::size_t slot = 0, pitch = 0;
        std::vector<float> coef, residual;
        sparsifier_type sp{};
        codec::sparse_scratch scratch;
        std::size_t size() const { return chunks.size() * slot; }
    };

    config_record describe(const param_group<float>& params, const param_group<float>& grads,
                           const std::vector<demo_shape>& shapes) const {
        config_record rec(kind);
        rec.add("trickle", detail::concat(TRICKLE_VERSION_MAJOR, '.', TRICKLE_VERSION_MINOR));
        detail::describe_group(rec, params, comm_.size());
        rec.add("selection", Select::name)
            .add("chunk", options_.chunk)
            .add("k", options_.k)
            .add("compression_decay", options_.compression_decay)
            .add("lr", options_.lr)
            .add("weight_decay", options_.weight_decay)
            .add("seed", options_.seed);
        config_record inner;
        values_.describe(inner);
        rec.add_fields("values.", inner);
        if (!inner.error().empty()) rec.set_error(detail::concat("demo: value codec: ", inner.error()));
        for (std::size_t i = 0; i < shapes.size(); ++i)
            rec.add(detail::concat("shape.", i), detail::concat(shapes[i].rows, 'x', shapes[i].cols));
        const demo_options& o = options_;
        if (!(o.chunk >= 1 && o.chunk <= max_dct_chunk))
            rec.set_error(detail::concat("demo: chunk must be in [1, ", max_dct_chunk, "], got ", o.chunk));
        else if (!(o.k >= 1 && o.k <= o.chunk * o.chunk))
            rec.set_error(detail::concat("demo: k must be in [1, chunk * chunk = ", o.chunk * o.chunk, "], got ", o.k));
        if (!(std::isfinite(o.lr) && o.lr > 0.0)) rec.set_error(detail::concat("demo: lr must be finite and > 0, got ", o.lr));
        if (!(o.compression_decay >= 0.0 && o.compression_decay <= 1.0))
            rec.set_error(detail::concat("demo: compression_decay must be in [0, 1], got ", o.compression_decay));
        if (!(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0))
            rec.set_error(detail::concat("demo: weight_decay must be finite and >= 0, got ", o.weight_decay));
        if (grads.tensor_count() != params.tensor_count()) {
            rec.set_error(detail::concat("demo: the gradients have ", grads.tensor_count(), " tensors, the parameters ",
                                         params.tensor_count()));
        } else {
            for (std::size_t i = 0; i < params.tensor_count(); ++i)
                if (grads[i].view.size() != params[i].view.size()) {
                    rec.set_error(detail::concat("demo: gradient ", i, " ('", grads[i].name, "') has ",
                                                 grads[i].view.size(), " elements, parameter '", params[i].name,
                                                 "' has ", params[i].view.size()));
                    break;
                }
        }
        if (shapes.size() != params.tensor_count()) {
            rec.set_error(detail::concat("demo: ", shapes.size(), " shapes for ", params.tensor_count(), " tensors"));
        } else {
            for (std::size_t i = 0; i < shapes.size(); ++i)
                if (shapes[i].rows < 1 || shapes[i].rows * shapes[i].cols != params[i].view.size()) {
                    rec.set_error(detail::concat("demo: shape ", shapes[i].rows, 'x', shapes[i].cols, " of '",
                                                 params[i].name, "' does not hold its ", params[i].view.size(),
                                                 " elements"));
                    break;
                }
        }
        return rec;
    }

    Comm& comm_;
    demo_options options_;
    Values values_;
    dct_bases bases_;
    std::vector<float*> params_;
    std::vector<const float*> grads_;
    part vec_, mat_;
    exchange_stats stats_{};
    std::uint64_t dense_per_step_ = 0;
    detail::replica_state replica_;
};

TRICKLE_NAMESPACE_END
