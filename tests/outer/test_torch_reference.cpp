// The outer optimizers against torch.optim itself: trajectories recorded from torch
// (scripts/torch_outer_reference.py -> data/torch_reference.txt) replayed through the
// DiLoCo update body on the host, from the same parameters and outer gradients.
#include "outer_tests.hpp"

#include <trickle/outer.hpp>
#include <trickle/schedule.hpp>

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle;

namespace {

struct torch_case {
    std::string name;
    std::map<std::string, std::string> fields;
    std::vector<float> p0;
    std::vector<std::vector<float>> grads, params; // per step
    std::string label;
};

std::vector<float> parse_words(std::istringstream& is) {
    std::vector<float> out;
    std::string w;
    while (is >> w) out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(std::stoul(w, nullptr, 16))));
    return out;
}

std::vector<torch_case> load_cases() {
    const std::string path = std::string(TRICKLE_TEST_DATA_DIR) + "/torch_reference.txt";
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "cannot open ", path);
    std::vector<torch_case> cases;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream is(line);
        std::string tag;
        is >> tag;
        if (tag == "case") {
            torch_case c;
            c.label = line;
            is >> c.name;
            std::string kv;
            while (is >> kv) {
                const auto eq = kv.find('=');
                REQUIRE(eq != std::string::npos);
                c.fields[kv.substr(0, eq)] = kv.substr(eq + 1);
            }
            cases.push_back(std::move(c));
        } else if (tag == "p0") {
            cases.back().p0 = parse_words(is);
        } else if (tag == "g") {
            cases.back().grads.push_back(parse_words(is));
        } else if (tag == "p") {
            cases.back().params.push_back(parse_words(is));
        } else {
            REQUIRE_MESSAGE(tag == "end", "unexpected line in ", path, ": ", line);
        }
    }
    return cases;
}

double num(const torch_case& c, const std::string& key) {
    const auto it = c.fields.find(key);
    REQUIRE_MESSAGE(it != c.fields.end(), c.label, ": no field ", key);
    return std::strtod(it->second.c_str(), nullptr);
}

struct replay_result {
    double max_error = 0; // in units of 2^-24 of the step's scale, see replay()
    std::size_t exact = 0, total = 0;
};

// Runs the case's steps through outer_update_body (g = recv * 1, exact) and compares each
// step's parameters with torch's. The error of a value is measured against the scale of
// that step, |p before| + |p after| (torch's values), in units of 2^-24 of it: one
// rounding of a result of that size is at most 1 unit. (A plain ulp distance would blow
// up where p - lr * g nearly cancels, although both sides then differ by a rounding of
// lr * g only.)
template <class Opt>
replay_result replay(const torch_case& c, const Opt& opt) {
    const std::size_t n = c.p0.size();
    trickle_test::diloco_rig<exec::host, float> rig(exec::host{}, n, Opt::state_slots);
    rig.set_params(c.p0);
    rig.copy_snapshot();
    replay_result r;
    for (std::size_t s = 0; s < c.grads.size(); ++s) {
        rig.update(opt.prepare(s + 1), c.grads[s], 1.0f);
        const auto snap = trickle_test::download(rig.snapshot);
        const std::vector<float>& before = s == 0 ? c.p0 : c.params[s - 1];
        for (std::size_t i = 0; i < n; ++i) {
            const double want = c.params[s][i];
            const double scale = std::fabs(static_cast<double>(before[i])) + std::fabs(want);
            const double e = std::fabs(static_cast<double>(snap[i]) - want) / (scale * 0x1p-24);
            r.max_error = e > r.max_error ? e : r.max_error;
            r.exact += std::bit_cast<std::uint32_t>(snap[i]) == std::bit_cast<std::uint32_t>(c.params[s][i]);
            ++r.total;
        }
    }
    return r;
}

template <class Opt>
replay_result replay_maybe_scheduled(const torch_case& c, const Opt& opt) {
    if (!c.fields.contains("schedule")) return replay(c, opt);
    REQUIRE(c.fields.at("schedule") == "cosine");
    const schedule::cosine cos{.end_fraction = num(c, "end_fraction"),
                               .steps = static_cast<std::uint64_t>(num(c, "schedule_steps"))};
    return replay(c, outer::lr_scheduled<Opt, schedule::cosine>{opt, cos});
}

} // namespace

// Where trickle and torch differ, and why: torch's CPU kernels fuse some products into the
// following addition (add_ with alpha, lerp_ and addcmul_ become fused multiply-adds) and
// divide by a scalar by multiplying with its reciprocal, where trickle rounds every
// product and quotient separately, as the formulas in docs/outer-optimizers.md are
// written (and identically on the host and on CUDA). That leaves a few roundings of
// difference per step. The bound is what the recorded trajectories need, with margin.
TEST_CASE("outer optimizers reproduce torch.optim trajectories recorded from torch itself") {
    const auto cases = load_cases();
    REQUIRE(cases.size() == 9);
    std::size_t exact = 0, total = 0;
    for (const torch_case& c : cases) {
        CAPTURE(c.label);
        REQUIRE(c.p0.size() == 67);
        REQUIRE(c.grads.size() == 7);
        REQUIRE(c.params.size() == 7);
        replay_result r;
        if (c.name == "sgd") {
            r = replay_maybe_scheduled(c, outer::sgd{.lr = num(c, "lr")});
        } else if (c.name == "momentum") {
            r = replay_maybe_scheduled(c, outer::momentum{.lr = num(c, "lr"), .momentum = num(c, "momentum")});
        } else if (c.name == "nesterov") {
            r = replay_maybe_scheduled(c, outer::nesterov{.lr = num(c, "lr"), .momentum = num(c, "momentum")});
        } else {
            REQUIRE(c.name == "adam");
            r = replay_maybe_scheduled(c, outer::adam{.lr = num(c, "lr"), .beta1 = num(c, "beta1"),
                                                      .beta2 = num(c, "beta2"), .eps = num(c, "eps")});
        }
        MESSAGE(c.label, ": ", r.exact, " of ", r.total, " values bit for bit; largest difference ", r.max_error,
                " roundings of the step's scale");
        CHECK(r.max_error <= 8.0);
        exact += r.exact;
        total += r.total;
    }
    CHECK(total == 9 * 7 * 67);
    MESSAGE("all cases: ", exact, " of ", total, " values bit for bit");
}
