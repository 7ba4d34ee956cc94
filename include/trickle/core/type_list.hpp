// trickle/core/type_list.hpp: a list of types, a loop over it and a lookup by name, from which the policy registries are built.
//
// Each policy family keeps one list of its policies, in its own folder
// (sampler/registry.hpp, schedule/registry.hpp, topology/registry.hpp, outer/registry.hpp,
// codec/registry.hpp). The run-time choices are built from that list: codec::any,
// schedule::any and topology::any hold a std::variant of it, and the front ends
// (trickle-sim, the Python package) find a policy by the name the policy itself declares,
// `static constexpr const char* name`. A policy is thereby registered once and spelled one
// way everywhere, and adding one to a family is its header and one line in the list.
//
//   using registry = type_list<fp32, bf16, int8_block>;
//   for_each_type<registry>([](auto t) { using C = typename decltype(t)::type; ... });
//   visit_name<registry>("int8", "codec", [](auto t) { return typename decltype(t)::type{}; });
//
// Nothing here knows a policy family: it needs only that every listed type has a `name`.
#pragma once

#include <trickle/config.hpp>
#include <trickle/error.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

// The types T..., in order. `apply<std::variant>` is std::variant<T...>.
template <class... T>
struct type_list {
    static constexpr std::size_t size = sizeof...(T);
    template <template <class...> class To>
    using apply = To<T...>;
};

namespace detail {

template <class A, class B>
struct type_list_cat;
template <class... A, class... B>
struct type_list_cat<type_list<A...>, type_list<B...>> {
    using type = type_list<A..., B...>;
};

template <template <class> class Wrap, class List>
struct type_list_map;
template <template <class> class Wrap, class... T>
struct type_list_map<Wrap, type_list<T...>> {
    using type = type_list<Wrap<T>...>;
};

template <template <class> class Keep, class List>
struct type_list_filter;
template <template <class> class Keep>
struct type_list_filter<Keep, type_list<>> {
    using type = type_list<>;
};
template <template <class> class Keep, class First, class... Rest>
struct type_list_filter<Keep, type_list<First, Rest...>> {
    using rest = typename type_list_filter<Keep, type_list<Rest...>>::type;
    using type = std::conditional_t<Keep<First>::value, typename type_list_cat<type_list<First>, rest>::type, rest>;
};

template <class List, class T>
struct type_list_has;
template <class... A, class T>
struct type_list_has<type_list<A...>, T> : std::bool_constant<(std::is_same_v<T, A> || ...)> {};

template <std::size_t I, class List>
struct type_list_at;
template <std::size_t I, class First, class... Rest>
struct type_list_at<I, type_list<First, Rest...>> : type_list_at<I - 1, type_list<Rest...>> {};
template <class First, class... Rest>
struct type_list_at<0, type_list<First, Rest...>> {
    using type = First;
};

template <class List>
struct type_list_names;
template <class... T>
struct type_list_names<type_list<T...>> {
    static constexpr std::array<std::string_view, sizeof...(T)> value{std::string_view(T::name)...};
};

} // namespace detail

// The types of A, then those of B.
template <class A, class B>
using type_list_cat_t = typename detail::type_list_cat<A, B>::type;

// Wrap<T> for every T of the list: type_list_map_t<schedule::warmup, type_list<constant>>.
template <template <class> class Wrap, class List>
using type_list_map_t = typename detail::type_list_map<Wrap, List>::type;

// The types T of the list for which Keep<T>::value is true, in order.
template <template <class> class Keep, class List>
using type_list_filter_t = typename detail::type_list_filter<Keep, List>::type;

// The I-th type of the list.
template <std::size_t I, class List>
using type_list_at_t = typename detail::type_list_at<I, List>::type;

// Whether T is one of the list's types.
template <class List, class T>
inline constexpr bool type_list_contains = detail::type_list_has<List, T>::value;

// Calls f(std::type_identity<T>{}) for every type T of the list, in order.
template <class List, class F>
constexpr void for_each_type(F&& f) {
    [&]<class... T>(type_list<T...>*) { (f(std::type_identity<T>{}), ...); }(static_cast<List*>(nullptr));
}

// The names the list's types declare (T::name), in the list's order.
template <class List>
constexpr const auto& names_of() {
    return detail::type_list_names<List>::value;
}

// The position in the list of the type named `name`, or List::size when none is.
template <class List>
constexpr std::size_t index_of_name(std::string_view name) {
    const auto& names = names_of<List>();
    for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return i;
    return List::size;
}

// Whether no two types of the list share a name; every registry asserts it, so that a
// name finds exactly one policy.
template <class List>
constexpr bool names_unique() {
    const auto& names = names_of<List>();
    for (std::size_t i = 0; i < names.size(); ++i)
        for (std::size_t j = i + 1; j < names.size(); ++j)
            if (names[i] == names[j]) return false;
    return true;
}

// The list's names joined by `separator`: "fp32, bf16, int8".
template <class List>
std::string joined_names(std::string_view separator = ", ") {
    std::string out;
    for (const std::string_view n : names_of<List>()) {
        if (!out.empty()) out += separator;
        out += n;
    }
    return out;
}

namespace detail {
template <class List, std::size_t I, class Result, class F>
Result visit_index_from(std::size_t index, F& f) {
    if constexpr (I == List::size) {
        throw invalid_argument(concat("visit_index: ", index, " is not below ", List::size));
    } else {
        if (index == I) return f(std::type_identity<type_list_at_t<I, List>>{});
        return visit_index_from<List, I + 1, Result>(index, f);
    }
}
} // namespace detail

// Calls f(std::type_identity<T>{}) for the type T at position `index` of the list and
// returns its result (f returns one type for every T). Throws invalid_argument when
// index >= List::size.
template <class List, class F>
decltype(auto) visit_index(std::size_t index, F&& f) {
    static_assert(List::size > 0, "visit_index: an empty list has no type to visit");
    using result = std::invoke_result_t<F&, std::type_identity<type_list_at_t<0, List>>>;
    return detail::visit_index_from<List, 0, result>(index, f);
}

// The error for a name no type of the list has: "unknown codec 'int3' (valid: fp32, bf16, ...)".
template <class List>
std::string unknown_name_message(std::string_view what, std::string_view name) {
    return detail::concat("unknown ", what, " '", name, "' (valid: ", joined_names<List>(), ")");
}

// Calls f(std::type_identity<T>{}) for the type T of the list whose name is `name` and
// returns its result. Throws invalid_argument listing the list's names when no type has
// that name; `what` names the family in that message ("codec", "topology").
template <class List, class F>
decltype(auto) visit_name(std::string_view name, std::string_view what, F&& f) {
    const std::size_t index = index_of_name<List>(name);
    if (index == List::size) throw invalid_argument(unknown_name_message<List>(what, name));
    return visit_index<List>(index, f);
}

TRICKLE_NAMESPACE_END
