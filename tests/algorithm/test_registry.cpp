// The registries of policy names ({sampler,schedule,topology,outer,codec}/registry.hpp), from
// C++: every registered name is reachable (codec::any, schedule::any and topology::any built
// by name hold that policy and describe themselves exactly as it does; a sampler or outer
// optimizer found by name is the registered type), the any variants are exactly the
// registries, names are spelled one way, an unknown name is an error listing the
// registered ones, and an algorithm built from names alone runs. trickle-sim's command
// line and the Python package are checked against the same lists in tests/sim and
// tests/python.
#include <trickle/trickle.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

using namespace trickle;

namespace {

// Whether the variant V has each of T... among its alternatives.
template <class V, class... T>
inline constexpr bool held_by = false;
template <class... A, class... T>
inline constexpr bool held_by<std::variant<A...>, T...> = (type_list_contains<type_list<A...>, T> && ...);

template <class P>
config_record record_of(const P& p) {
    config_record rec("registry");
    p.describe(rec);
    return rec;
}

template <class Any>
const typename Any::variant_type& held_of(const Any& a) {
    if constexpr (requires { a.held(); })
        return a.held();
    else
        return a.held;
}

// Any::from_name(T::name) holds T{} and is indistinguishable from it in the configuration
// check, for every T of Registry; Any::names() is the registry's list.
template <class Any, class Registry>
void check_any_by_name() {
    CHECK(Any::names().size() == Registry::size);
    for_each_type<Registry>([](auto t) {
        using T = typename decltype(t)::type;
        CAPTURE(T::name);
        const Any a = Any::from_name(T::name);
        CHECK(std::string(a.held_name()) == T::name);
        CHECK(std::holds_alternative<T>(held_of(a)));
        CHECK(record_of(a).serialize() == record_of(T{}).serialize());
        CHECK(Any::names()[index_of_name<Registry>(T::name)] == T::name);
    });
}

// What a name may look like: lowercase letters, digits and '_' (no '-', so that trickle-sim's
// older spelling with '-' for '_' maps back to exactly one name), starting with a letter.
bool well_formed(std::string_view name) {
    if (name.empty() || !(name[0] >= 'a' && name[0] <= 'z')) return false;
    for (const char ch : name)
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
    return true;
}

template <class Registry>
void check_names_well_formed() {
    static_assert(names_unique<Registry>());
    for (const std::string_view n : names_of<Registry>()) {
        CAPTURE(n);
        CHECK(well_formed(n));
    }
}

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const invalid_argument& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("registry: the any variants are the registries, and hold every type they held before") {
    static_assert(std::is_same_v<codec::any::variant_type, codec::registry::apply<std::variant>>);
    static_assert(std::is_same_v<topology::any::variant_type, topology::registry::apply<std::variant>>);
    static_assert(std::is_same_v<schedule::any::variant_type,
                                 type_list_cat_t<schedule::registry, type_list_map_t<schedule::warmup, schedule::warmed>>::
                                     apply<std::variant>>);
    // Source compatibility: every alternative the variants held before the registries is
    // held still (std::get, std::holds_alternative and get_if on them keep compiling). A
    // policy added to a registry adds an alternative and leaves these as they are.
    static_assert(held_by<codec::any::variant_type, codec::fp32, codec::bf16, codec::fp16, codec::fp8_e4m3,
                          codec::fp8_e5m2, codec::fp8_block, codec::int8_block, codec::int4_block, codec::sign2_block>);
    static_assert(held_by<topology::any::variant_type, topology::all_reduce, topology::ring, topology::gossip,
                          topology::exponential, topology::islands>);
    static_assert(held_by<schedule::any::variant_type, schedule::constant, schedule::linear, schedule::cosine,
                          schedule::piecewise, schedule::warmup<schedule::constant>, schedule::warmup<schedule::linear>,
                          schedule::warmup<schedule::cosine>>);
    // The default alternatives are the first ones, as before.
    static_assert(std::is_same_v<std::variant_alternative_t<0, codec::any::variant_type>, codec::fp32>);
    static_assert(std::is_same_v<std::variant_alternative_t<0, topology::any::variant_type>, topology::all_reduce>);
    static_assert(std::is_same_v<std::variant_alternative_t<0, schedule::any::variant_type>, schedule::constant>);
}

TEST_CASE("registry: every codec, schedule and topology name builds its any") {
    check_any_by_name<codec::any, codec::registry>();
    check_any_by_name<schedule::any, schedule::registry>();
    check_any_by_name<topology::any, topology::registry>();
    // The default fields: from_name gives T{}.
    CHECK(codec::any::from_name("int8").block_values() == codec::int8_block{}.block_size);
    CHECK(std::get<topology::islands>(topology::any::from_name("islands").held()).size == topology::islands{}.size);
}

TEST_CASE("registry: every sampler and outer optimizer name finds its type") {
    for_each_type<sampler::registry>([](auto t) {
        using S = typename decltype(t)::type;
        CAPTURE(S::name);
        const std::string found = visit_name<sampler::registry>(S::name, "sampler", [](auto u) -> std::string {
            using U = typename decltype(u)::type;
            static_assert(sampler_policy<U>);
            return U::name;
        });
        CHECK(found == S::name);
        const config_record rec = record_of(S{});
        CHECK(rec.fields().front().second == S::name); // describe() names the sampler first
    });
    for_each_type<outer::registry>([](auto t) {
        using O = typename decltype(t)::type;
        CAPTURE(O::name);
        const int slots = visit_name<outer::registry>(O::name, "outer optimizer", [](auto u) {
            using U = typename decltype(u)::type;
            static_assert(outer_optimizer<U>);
            return U::state_slots;
        });
        CHECK(slots == O::state_slots);
        const config_record rec = record_of(O{});
        CHECK(rec.fields().front() == std::pair<std::string, std::string>{"outer", O::name});
    });
}

TEST_CASE("registry: names are lowercase identifiers, one per policy, none with '-'") {
    check_names_well_formed<sampler::registry>();
    check_names_well_formed<schedule::registry>();
    check_names_well_formed<topology::registry>();
    check_names_well_formed<outer::registry>();
    check_names_well_formed<codec::registry>();
}

TEST_CASE("registry: an unknown name is an invalid_argument that lists the registered names") {
    // (The lists come from the registries, so that adding a policy needs no change here.)
    CHECK(error_of([] { (void)codec::any::from_name("no_such_codec"); }) ==
          "unknown codec 'no_such_codec' (valid: " + joined_names<codec::registry>() + ")");
    CHECK(joined_names<codec::registry>().find("fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, fp8_block, int8, int4, sign2") == 0);
    CHECK(error_of([] { (void)topology::any::from_name("no_such_topology"); }) ==
          "unknown topology 'no_such_topology' (valid: " + joined_names<topology::registry>() + ")");
    CHECK(error_of([] { (void)schedule::any::from_name("no_such_schedule"); }) ==
          "unknown schedule 'no_such_schedule' (valid: " + joined_names<schedule::registry>() + ")");
    // One spelling: the library takes the registry's names exactly (trickle-sim alone still
    // accepts its older '-' spelling, as a deprecated alias).
    CHECK(error_of([] { (void)codec::any::from_name("fp8-e4m3"); }).find("unknown codec 'fp8-e4m3'") == 0);
    CHECK(error_of([] { (void)topology::any::from_name("all-reduce"); }).find("unknown topology") == 0);
    CHECK(error_of([] { (void)codec::any::from_name("FP32"); }) != "");
    // warmup wraps a schedule; it is built as warmup<S>{...}, not by name.
    CHECK(error_of([] { (void)schedule::any::from_name("warmup"); }).find("unknown schedule 'warmup'") == 0);
    CHECK(error_of([] { visit_name<sampler::registry>("no_such_sampler", "sampler", [](auto) {}); }) ==
          "unknown sampler 'no_such_sampler' (valid: " + joined_names<sampler::registry>() + ")");
    CHECK(error_of([] { visit_name<outer::registry>("no_such_optimizer", "outer optimizer", [](auto) {}); }) ==
          "unknown outer optimizer 'no_such_optimizer' (valid: " + joined_names<outer::registry>() + ")");
}

TEST_CASE("registry: SPARTA built from a codec, schedule and topology name alone averages over comm::local") {
    constexpr int N = 4;
    constexpr std::size_t n = 96;
    for (const std::string_view top : topology::any::names()) {
        for (const std::string_view cod : codec::any::names()) {
            CAPTURE(top);
            CAPTURE(cod);
            std::vector<std::vector<float>> params(N, std::vector<float>(n));
            std::vector<exchange_stats> stats(N);
            comm::run_local(N, [&](comm::local& c) {
                const int r = c.rank();
                for (std::size_t i = 0; i < n; ++i)
                    params[r][i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i) + r));
                param_group<float> g;
                g.add("w", params[r].data(), n);
                sparta<sampler::uniform, schedule::any, topology::any, codec::any> s(
                    g, c, {.fraction = 1.0, .seed = 5, .broadcast_initial = false}, {}, schedule::any::from_name("constant"),
                    topology::any::from_name(top), codec::any::from_name(cod));
                for (int t = 0; t < 3; ++t) s.step(exec::host{});
                stats[r] = s.stats();
            });
            for (int r = 0; r < N; ++r) {
                CHECK(stats[r].exchanges == 3);
                CHECK(stats[r].total.bytes_sent > 0);
            }
            // Every value is averaged at every step, within whatever groups the topology
            // forms. With values that travel exactly (fp32) the workers draw together: their
            // spread about the mean of all of them (the sum of squared deviations) falls and
            // the mean is kept; an all-reduce leaves no spread at all. A lossy codec adds its
            // rounding to that (how much is each codec's own test): the values written back
            // are finite and differ from the initial ones.
            double before = 0, after = 0, mean_moved = 0;
            bool finite = true, changed = false;
            for (std::size_t i = 0; i < n; ++i) {
                double m0 = 0, m1 = 0;
                for (int r = 0; r < N; ++r) {
                    m0 += std::sin(0.3 * static_cast<double>(i) + r) / N;
                    m1 += static_cast<double>(params[r][i]) / N;
                    finite = finite && std::isfinite(params[r][i]);
                    changed = changed || params[r][i] != static_cast<float>(std::sin(0.3 * static_cast<double>(i) + r));
                }
                for (int r = 0; r < N; ++r) {
                    const double d0 = std::sin(0.3 * static_cast<double>(i) + r) - m0, d1 = params[r][i] - m1;
                    before += d0 * d0;
                    after += d1 * d1;
                }
                mean_moved = std::max(mean_moved, std::fabs(m1 - m0));
            }
            CHECK(finite);
            CHECK(changed);
            if (cod == "fp32") {
                CHECK(after < 0.75 * before);
                CHECK(mean_moved < 1e-5);
            }
            if (top == "all_reduce" && cod == "fp32") CHECK(after < 1e-20);
        }
    }
}
