// trickle/codec/sparsifier.hpp: the sparsifier concept and the host scratch of a sparse
// all-reduce (the sparsifiers themselves, chunk_topk and random_k, and the sparse
// all-reduce are in codec/sparse.hpp).
//
// Apart from them, so that an algorithm can ask whether its codec is a sparsifier without
// compiling the sparsifiers.
#pragma once

#include <trickle/codec/reduce.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

// Host memory a sparse all-reduce of up to `values` values uses, sized once by
// reserve(sparsifier, values, ranks) (an algorithm reserves it at construction, so no step
// allocates).
struct sparse_scratch {
    std::vector<std::byte> send, recv;   // this worker's payload; the N gathered payloads
    std::vector<std::uint64_t> keys;     // chunk_topk: one chunk's selection keys; random_k: the positions
    std::vector<std::uint32_t> index;    // chunk_topk: the kept in-chunk indices
    std::vector<float> values;           // the kept values (gathered, then decoded)
    std::vector<float> packed_residual;  // random_k through a lossy value codec: the packed values' coding error
    reduce_scratch reduce;               // random_k through a value codec other than fp32

    template <class Sparsifier>
    void reserve(const Sparsifier& s, std::size_t n, int ranks) {
        s.reserve_scratch(*this, n, ranks);
    }
};

template <class S>
concept sparsifier_policy = std::copy_constructible<S> && requires(const S& s, std::size_t n, config_record& rec,
                                                                    sparse_scratch& scratch, int ranks) {
    { S::name } -> std::convertible_to<const char*>;
    { s.payload_bytes(n) } -> std::convertible_to<std::size_t>;
    { s.kept(n) } -> std::convertible_to<std::size_t>;
    { s.error() } -> std::convertible_to<std::string>;
    s.describe(rec);
    s.reserve_scratch(scratch, n, ranks);
};

} // namespace codec

TRICKLE_NAMESPACE_END
