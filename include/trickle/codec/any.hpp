// trickle/codec/any.hpp: codecs chosen at run time, and the parameters' own precision.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/codec/registry.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/error.hpp>

#include <cstddef>
#include <string_view>
#include <type_traits>
#include <variant>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

// One of the registered codecs (codec/registry.hpp), chosen at run time (a trainer's or
// simulator's option), so that an algorithm is compiled once for all of them. Every call
// visits the held codec once per array or block, never per value; describe() writes
// exactly the held codec's fields, so a worker using any{int8_block{}} agrees with one
// using int8_block{}.
struct any {
    using variant_type = registry::apply<std::variant>;
    static constexpr const char* name = "any";
    variant_type held = fp32{};

    any() = default;
    template <class C>
        requires std::is_constructible_v<variant_type, C>
    any(C c) : held(std::move(c)) {} // NOLINT(google-explicit-constructor): a codec is an any

    // The registered codec of that name with its default fields: from_name("int8") holds
    // int8_block{}. Throws invalid_argument listing the registered names for any other.
    static any from_name(std::string_view codec_name) {
        return visit_name<registry>(codec_name, "codec", [](auto c) -> any { return typename decltype(c)::type{}; });
    }
    // The registered names, in the registry's order.
    static constexpr const auto& names() { return names_of<registry>(); }

    const char* held_name() const {
        return std::visit([](const auto& c) { return std::remove_cvref_t<decltype(c)>::name; }, held);
    }
    std::size_t wire_bytes(std::size_t n) const {
        return std::visit([&](const auto& c) { return c.wire_bytes(n); }, held);
    }
    wire_parts wire_parts_of(std::size_t n) const {
        return std::visit([&](const auto& c) { return parts_of(c, n); }, held);
    }
    std::size_t block_values() const {
        return std::visit([](const auto& c) { return c.block_values(); }, held);
    }
    std::size_t block_bytes(std::size_t m) const {
        return std::visit([&](const auto& c) { return c.block_bytes(m); }, held);
    }
    std::size_t block_offset(std::size_t b) const {
        return std::visit([&](const auto& c) { return c.block_offset(b); }, held);
    }
    void encode(const float* in, std::size_t n, std::byte* out) const {
        std::visit([&](const auto& c) { c.encode(in, n, out); }, held);
    }
    void decode(const std::byte* in, std::size_t n, float* out) const {
        std::visit([&](const auto& c) { c.decode(in, n, out); }, held);
    }
    // Stochastic rounding, where the held codec offers it (int8_block, int4_block, sign2_block).
    bool supports_stochastic() const {
        return std::visit(
            [](const auto& c) {
                return requires(const float* i, std::size_t k, std::byte* o, const philox_words& w) { c.encode(i, k, o, w); };
            },
            held);
    }
    template <word_source Words>
    void encode(const float* in, std::size_t n, std::byte* out, const Words& words) const {
        std::visit(
            [&](const auto& c) {
                if constexpr (requires { c.encode(in, n, out, words); })
                    c.encode(in, n, out, words);
                else
                    throw invalid_argument(trickle::detail::concat("codec::", std::remove_cvref_t<decltype(c)>::name,
                                                                   ": this codec has no stochastic rounding"));
            },
            held);
    }
    void encode_block(const float* in, std::size_t m, std::byte* out) const {
        std::visit([&](const auto& c) { c.encode_block(in, m, out); }, held);
    }
    void decode_block(const std::byte* in, std::size_t m, float* out) const {
        std::visit([&](const auto& c) { c.decode_block(in, m, out); }, held);
    }
    void describe(config_record& rec) const {
        std::visit([&](const auto& c) { c.describe(rec); }, held);
    }
};

} // namespace codec

static_assert(codec_policy<codec::any>);

TRICKLE_NAMESPACE_END
