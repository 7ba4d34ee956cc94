// core/type_list.hpp: the list, the loop over it, the lookups by index and by name, and the
// error for a name no type has, on types declared here (core knows no policy family).
#include <trickle/core/type_list.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

using namespace trickle;

namespace {

struct red {
    static constexpr const char* name = "red";
    int value = 1;
};
struct green_blue {
    static constexpr const char* name = "green_blue";
    int value = 2;
};
template <class T>
struct wrapped {
    static constexpr const char* name = "wrapped";
    T inner{};
};
struct also_red {
    static constexpr const char* name = "red";
};

using colours = type_list<red, green_blue>;

} // namespace

TEST_CASE("type_list: size, apply, cat, map, filter, at and contains are computed at compile time") {
    static_assert(colours::size == 2);
    static_assert(type_list<>::size == 0);
    static_assert(std::is_same_v<colours::apply<std::variant>, std::variant<red, green_blue>>);
    static_assert(std::is_same_v<type_list_cat_t<colours, type_list<int>>, type_list<red, green_blue, int>>);
    static_assert(std::is_same_v<type_list_map_t<wrapped, colours>, type_list<wrapped<red>, wrapped<green_blue>>>);
    static_assert(std::is_same_v<type_list_at_t<1, colours>, green_blue>);
    static_assert(std::is_same_v<type_list_filter_t<std::is_empty, type_list<red, also_red, int>>, type_list<also_red>>);
    static_assert(std::is_same_v<type_list_filter_t<std::is_empty, colours>, type_list<>>);
    static_assert(type_list_contains<colours, red> && !type_list_contains<colours, int>);
    static_assert(names_unique<colours>());
    static_assert(!names_unique<type_list<red, also_red>>());
    static_assert(index_of_name<colours>("green_blue") == 1);
    static_assert(index_of_name<colours>("green-blue") == colours::size);
    CHECK(names_of<colours>().size() == 2);
    CHECK(names_of<colours>()[0] == "red");
    CHECK(joined_names<colours>() == "red, green_blue");
    CHECK(joined_names<colours>("|") == "red|green_blue");
}

TEST_CASE("type_list: for_each_type visits every type once, in order") {
    std::vector<std::string> seen;
    int sum = 0;
    for_each_type<colours>([&](auto t) {
        using T = typename decltype(t)::type;
        seen.emplace_back(T::name);
        sum += T{}.value;
    });
    CHECK(seen == std::vector<std::string>{"red", "green_blue"});
    CHECK(sum == 3);
    int calls = 0;
    for_each_type<type_list<>>([&](auto) { ++calls; });
    CHECK(calls == 0);
}

TEST_CASE("type_list: visit_index and visit_name call f with the type found and return its result") {
    CHECK(visit_index<colours>(1, [](auto t) { return typename decltype(t)::type{}.value; }) == 2);
    // A result that is neither copyable nor default-constructible.
    const std::unique_ptr<int> p =
        visit_name<colours>("red", "colour", [](auto t) { return std::make_unique<int>(typename decltype(t)::type{}.value); });
    CHECK(*p == 1);
    // A void f.
    std::string got;
    visit_name<colours>("green_blue", "colour", [&](auto t) { got = decltype(t)::type::name; });
    CHECK(got == "green_blue");
    // A reference result.
    static int store[2] = {10, 20};
    int& r = visit_index<colours>(0, [](auto t) -> int& { return store[typename decltype(t)::type{}.value - 1]; });
    CHECK(&r == &store[0]);
}

TEST_CASE("type_list: an unknown name or index is an invalid_argument listing the names") {
    const auto message = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const invalid_argument& e) {
            return e.what();
        }
        return "";
    };
    CHECK(message([] { visit_name<colours>("blue", "colour", [](auto) { return 0; }); }) ==
          "unknown colour 'blue' (valid: red, green_blue)");
    // Names match exactly: no case folding, no '-' for '_'.
    CHECK(message([] { visit_name<colours>("Red", "colour", [](auto) { return 0; }); }) != "");
    CHECK(message([] { visit_name<colours>("green-blue", "colour", [](auto) { return 0; }); }) != "");
    CHECK(message([] { visit_name<colours>("", "colour", [](auto) { return 0; }); }) ==
          "unknown colour '' (valid: red, green_blue)");
    CHECK(message([] { visit_index<colours>(2, [](auto) {}); }) == "visit_index: 2 is not below 2");
    CHECK(unknown_name_message<colours>("colour", "x") == "unknown colour 'x' (valid: red, green_blue)");
}
