// tests/sim/test_cli_registry.cpp: trickle-sim reads its policy names from the library's registries: every
// registered name parses (and its older '-' spelling, deprecated), builds the policy of that name, and is listed by
// --help and by the error for an unknown name; --network refuses a topology it has no round count for.
#include "app.hpp"
#include "network.hpp"
#include "options.hpp"
#include "strategies.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

using namespace trickle_sim;

namespace {

sim_config parse(const std::vector<std::string>& args) { return parse_cli(args); }

std::string error_of(const std::vector<std::string>& args) {
    try {
        parse_cli(args);
    } catch (const usage_error& e) {
        return e.what();
    }
    return "";
}

std::string help() {
    std::ostringstream out, err;
    run_cli(std::vector<std::string>{"--help"}, out, err);
    return out.str();
}

// The spellings of a registered name the command line takes: the name, and the older one
// with '-' for '_' where that differs.
std::vector<std::string> spellings(std::string_view name) {
    std::vector<std::string> out{std::string(name)};
    if (dashed(name) != name) out.push_back(dashed(name));
    return out;
}

// What a name parses to, for the option `opt` of the strategy `strategy`, with `extra` arguments.
template <class Kind, class Field>
void check_every_name(const std::string& strategy, const std::string& opt, Field field,
                      const std::vector<std::string>& extra = {}) {
    for (const std::string_view name : trickle::names_of<registry_t<Kind>>()) {
        for (const std::string& spelled : spellings(name)) {
            CAPTURE(opt);
            CAPTURE(spelled);
            std::vector<std::string> args{"--strategy", strategy, opt, spelled};
            args.insert(args.end(), extra.begin(), extra.end());
            const std::string error = error_of(args);
            REQUIRE_MESSAGE(error.empty(), error);
            const Kind k = field(parse(args));
            CHECK(name_of(k) == name);
            CHECK(static_cast<std::size_t>(k) == trickle::index_of_name<registry_t<Kind>>(name));
        }
    }
}

} // namespace

TEST_CASE("cli registry: every registered sampler, topology, outer optimizer and codec name parses, in both spellings") {
    check_every_name<sampler_kind>("sparta", "--sampler", [](const sim_config& c) { return c.sampler; });
    check_every_name<topology_kind>("sparta", "--topology", [](const sim_config& c) { return c.topology; });
    check_every_name<topology_kind>("diloco", "--topology", [](const sim_config& c) { return c.topology; });
    check_every_name<outer_kind>("diloco", "--outer", [](const sim_config& c) { return c.outer; });
    check_every_name<codec_kind>("sparta", "--codec", [](const sim_config& c) { return c.codec; });
    check_every_name<codec_kind>("diloco", "--outer-codec", [](const sim_config& c) { return c.outer_codec; });
}

TEST_CASE("cli registry: every registered schedule the options can build parses; piecewise alone needs Python or C++") {
    std::vector<std::string> unreachable;
    for (const std::string_view name : trickle::names_of<trickle::schedule::registry>()) {
        const auto k = static_cast<schedule_kind>(trickle::index_of_name<trickle::schedule::registry>(name));
        CAPTURE(name);
        if (!cli_offers_schedule(k)) {
            unreachable.emplace_back(name);
            CHECK(error_of({"--strategy", "sparta", "--fraction-schedule", std::string(name)})
                      .find("--fraction-schedule: expected one of") == 0);
            continue;
        }
        const bool decays = kind_has<schedule_kind, decay_fields>(k);
        std::vector<std::string> sparse{"--strategy", "sparta", "--fraction-schedule", std::string(name)};
        std::vector<std::string> outer{"--strategy", "diloco", "--outer-lr-schedule", std::string(name)};
        if (decays) {
            sparse.insert(sparse.end(), {"--fraction-end", "0.001"});
            outer.insert(outer.end(), {"--outer-lr-end", "0.5"});
        }
        REQUIRE_MESSAGE(error_of(sparse).empty(), error_of(sparse));
        REQUIRE_MESSAGE(error_of(outer).empty(), error_of(outer));
        CHECK(name_of(parse(sparse).fraction_schedule) == name);
        CHECK(name_of(parse(outer).outer_lr_schedule) == name);
        // The schedule built from the options is the one named, with the run's end and steps.
        const sim_config c = parse(sparse);
        CHECK(std::string_view(make_runtime_schedule(c).held_name()) == name);
        CHECK(std::string_view(make_outer_lr_schedule(parse(outer)).held_name()) == name);
    }
    // No option of trickle-sim gives piecewise's points. A schedule added to the registry
    // with fields the options cannot fill lands here too: give it an option, or list it.
    CHECK(unreachable == std::vector<std::string>{"piecewise"});
}

TEST_CASE("cli registry: the policy built from each parsed name is the policy of that name") {
    for (const std::string_view name : trickle::names_of<trickle::codec::registry>()) {
        const sim_config c = parse({"--strategy", "sparta", "--codec", std::string(name)});
        CHECK(std::string_view(make_codec(c.codec, c.codec_block).held_name()) == name);
    }
    for (const std::string_view name : trickle::names_of<trickle::topology::registry>()) {
        const sim_config c = parse({"--strategy", "sparta", "--topology", std::string(name)});
        CHECK(std::string_view(make_topology(c).held_name()) == name);
    }
    for (const std::string_view name : trickle::names_of<trickle::sampler::registry>()) {
        const sim_config c = parse({"--strategy", "sparta", "--sampler", std::string(name)});
        std::visit([&](const auto& s) { CHECK(std::string_view(s.name) == name); }, make_sampler(c));
    }
    for (const std::string_view name : trickle::names_of<trickle::outer::registry>()) {
        const sim_config c = parse({"--strategy", "diloco", "--outer", std::string(name)});
        CHECK(std::string_view(make_outer(c).held_name()) == name);
    }
    // The options reach the fields: --codec-block, --island-size, --block-size, --outer-lr, --outer-momentum.
    const sim_config b = parse({"--strategy", "sparta", "--codec", "int4", "--codec-block", "32"});
    CHECK(make_codec(b.codec, b.codec_block).block_values() == 32);
    const sim_config i = parse({"--strategy", "sparta", "--topology", "islands", "--island-size", "3"});
    CHECK(std::get<trickle::topology::islands>(make_topology(i).held()).size == 3);
    const sim_config s = parse({"--strategy", "sparta", "--sampler", "block", "--block-size", "8"});
    CHECK(std::get<trickle::sampler::block>(make_sampler(s)).block_size == 8);
    const sim_config o = parse({"--strategy", "diloco", "--outer", "momentum", "--outer-lr", "0.3", "--outer-momentum", "0.5"});
    const auto outer = make_outer(o); // (kept: m refers into it)
    const auto& m = std::get<scheduled<trickle::outer::momentum>>(outer.held()).optimizer;
    CHECK(m.lr == 0.3);
    CHECK(m.momentum == 0.5);
}

TEST_CASE("cli registry: --help lists the registry's names, and the older spellings as deprecated aliases") {
    const std::string text = help();
    const auto has = [&](const std::string& s) {
        CAPTURE(s);
        CHECK(text.find(s) != std::string::npos);
    };
    has(joined(sampler_choices()));
    has(joined(schedule_choices()));
    has(joined(outer_choices()));
    has(joined(topology_choices()));
    has(joined(codec_choices()));
    has("fp32|bf16|fp16|fp8_e4m3|fp8_e5m2|fp8_block|int8|int4|sign2");
    has("all_reduce|ring|gossip|exponential|islands");
    has("deprecated aliases");
    for (const std::string_view name : trickle::names_of<trickle::codec::registry>())
        if (dashed(name) != name) has(dashed(name));
    // No list of names in the older spelling is left in the help.
    CHECK(text.find("fp8-e4m3|") == std::string::npos);
    CHECK(text.find("all-reduce|") == std::string::npos);
}

TEST_CASE("cli registry: an unknown name's error lists every offered name, also in the registry's spelling") {
    std::string e = error_of({"--strategy", "sparta", "--codec", "int3"});
    for (const std::string_view name : trickle::names_of<trickle::codec::registry>()) {
        CAPTURE(name);
        CHECK(e.find(dashed(name)) != std::string::npos);
        CHECK(e.find(std::string(name)) != std::string::npos);
    }
    CHECK(e.find("(the registry's spelling: " + joined(codec_choices()) + ")") != std::string::npos);
    e = error_of({"--strategy", "diloco", "--outer", "no_such_optimizer"});
    CHECK(e == "--outer: expected one of " + joined(outer_choices()) + ", got 'no_such_optimizer'");
    // Near misses are not guessed at.
    CHECK(error_of({"--strategy", "sparta", "--codec", "FP32"}).find("--codec: expected one of") == 0);
    CHECK(error_of({"--strategy", "sparta", "--topology", "all reduce"}).find("--topology: expected one of") == 0);
}

TEST_CASE("cli registry: --network needs a round count for the topology, which every built-in one has") {
    for (const std::string_view name : trickle::names_of<trickle::topology::registry>()) {
        const sim_config c = parse({"--strategy", "sparta", "--topology", std::string(name), "--network", "internet"});
        if (c.topology <= topology_kind::islands) CHECK_NOTHROW(check_network_model(c));
    }
    // A topology the model has no count for (one added to the registry, until
    // exchange_rounds learns it) is refused before training, not modelled as something else.
    sim_config c = parse({"--strategy", "sparta", "--network", "internet"});
    c.topology = static_cast<topology_kind>(trickle::topology::registry::size + 7);
    CHECK(exchange_rounds(c.topology, 4, 2) == -1);
    try {
        check_network_model(c);
        FAIL("no error");
    } catch (const usage_error& e) {
        CHECK(std::string(e.what()).find("--network: the network model has no message-round count") == 0);
    }
    c.networks.clear();
    CHECK_NOTHROW(check_network_model(c)); // without --network nothing needs the count
}
