// examples/sim/byzantine.hpp: --byzantine, workers that corrupt every outer gradient they send (docs/simulator.md).
//
// A byzantine worker changes its own parameters right before each outer step, so that the
// outer gradient DiLoCo takes from it (snapshot - params) is the corrupted one: with the
// honest delta d = round_start - params (round_start: its parameters at the start of the
// round, which after an outer step are the new global ones), it sets
// params = round_start - d'. The kinds of d':
//
//   scale:F   F d (F finite)
//   sign      -d
//   noise:S   d + Gaussian noise of standard deviation S x rms(d) per coordinate (S > 0),
//             from a stream of its own per worker and round (rng.hpp)
//   stale:K   its honest delta of K rounds earlier (zeros for the first K rounds)
//   nan       every coordinate NaN (the library excludes the worker)
//
// Plain functions over spans, and one small object holding a worker's state between
// rounds, so the trainers' hooks are a few lines and the arithmetic is tested alone.
#pragma once

#include "rng.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace trickle_sim {

enum class byzantine_kind { scale, sign, noise, stale, nan };

// One corrupt worker: --byzantine W:KIND.
struct byzantine_spec {
    int worker = 0;
    byzantine_kind kind = byzantine_kind::sign;
    double factor = 0.0; // scale: F; noise: S
    int lag = 0;         // stale: K
    bool operator==(const byzantine_spec&) const = default;
};

inline constexpr std::string_view byzantine_kinds_text = "scale:F, sign, noise:S, stale:K or nan";

// "scale:-4", "sign", "noise:0.5", "stale:2", "nan".
inline std::string byzantine_kind_name(const byzantine_spec& s) {
    const auto num = [](double x) {
        char buf[32];
        const auto r = std::to_chars(buf, buf + sizeof buf, x);
        return std::string(buf, r.ptr);
    };
    switch (s.kind) {
    case byzantine_kind::scale: return "scale:" + num(s.factor);
    case byzantine_kind::sign: return "sign";
    case byzantine_kind::noise: return "noise:" + num(s.factor);
    case byzantine_kind::stale: return "stale:" + std::to_string(s.lag);
    case byzantine_kind::nan: return "nan";
    }
    return "?";
}

// Reads KIND (the part after "W:") into `out`; returns what is wrong with it, or "".
inline std::string parse_byzantine_kind(std::string_view v, byzantine_spec& out) {
    const std::size_t colon = v.find(':');
    const std::string_view head = v.substr(0, colon);
    const std::string_view arg = colon == std::string_view::npos ? std::string_view{} : v.substr(colon + 1);
    const bool has_arg = colon != std::string_view::npos;
    const auto real = [&](double& x) {
        const auto r = std::from_chars(arg.data(), arg.data() + arg.size(), x);
        return !arg.empty() && r.ec == std::errc{} && r.ptr == arg.data() + arg.size() && std::isfinite(x);
    };
    if (head == "sign" || head == "nan") {
        if (has_arg) return std::string(head) + " takes no value";
        out.kind = head == "sign" ? byzantine_kind::sign : byzantine_kind::nan;
        return {};
    }
    if (head == "scale") {
        double f = 0;
        if (!has_arg || !real(f)) return "scale needs a finite factor F (scale:F, e.g. scale:-4)";
        out.kind = byzantine_kind::scale;
        out.factor = f;
        return {};
    }
    if (head == "noise") {
        double s = 0;
        if (!has_arg || !real(s) || !(s > 0)) return "noise needs a standard deviation S > 0 (noise:S, in units of rms(d))";
        out.kind = byzantine_kind::noise;
        out.factor = s;
        return {};
    }
    if (head == "stale") {
        int k = 0;
        const auto r = std::from_chars(arg.data(), arg.data() + arg.size(), k);
        if (!has_arg || arg.empty() || r.ec != std::errc{} || r.ptr != arg.data() + arg.size() || k < 1 || k > 1000)
            return "stale needs a number of rounds K in [1, 1000] (stale:K)";
        out.kind = byzantine_kind::stale;
        out.lag = k;
        return {};
    }
    return "unknown kind (expected " + std::string(byzantine_kinds_text) + ")";
}

// sqrt(mean(d^2)), in double; 0 for an empty d.
inline double rms(std::span<const float> d) {
    if (d.empty()) return 0.0;
    double s = 0;
    for (float x : d) s += static_cast<double>(x) * static_cast<double>(x);
    return std::sqrt(s / static_cast<double>(d.size()));
}

// The noise stream of one worker in one round (1-based), independent of the simulator's
// other streams (rng::stream's purposes are distinct constants).
inline rng byzantine_noise_stream(std::uint64_t seed, int worker, std::uint64_t round) {
    return rng::stream(seed, 0x62797a0000000000ull + (static_cast<std::uint64_t>(worker) << 32) + round);
}

// d' for the kinds that need no history (scale, sign, noise, nan), written into `out`
// (which may be `d` itself). stale is the caller's (byzantine_worker keeps the deltas).
inline void corrupt_delta(const byzantine_spec& s, std::span<const float> d, std::span<float> out, rng& noise) {
    switch (s.kind) {
    case byzantine_kind::scale: {
        const auto f = static_cast<float>(s.factor);
        for (std::size_t i = 0; i < d.size(); ++i) out[i] = f * d[i];
        return;
    }
    case byzantine_kind::sign:
        for (std::size_t i = 0; i < d.size(); ++i) out[i] = -d[i];
        return;
    case byzantine_kind::noise: {
        const double sigma = s.factor * rms(d);
        for (std::size_t i = 0; i < d.size(); ++i)
            out[i] = static_cast<float>(static_cast<double>(d[i]) + sigma * noise.normal());
        return;
    }
    case byzantine_kind::nan:
        for (std::size_t i = 0; i < d.size(); ++i) out[i] = std::numeric_limits<float>::quiet_NaN();
        return;
    case byzantine_kind::stale:
        for (std::size_t i = 0; i < d.size(); ++i) out[i] = d[i]; // (the caller's)
        return;
    }
}

// One byzantine worker's state: its parameters at the start of the round, and for stale:K
// its last K honest deltas. The trainer calls before_outer right before the call that runs
// an outer step and after_outer right after it.
class byzantine_worker {
public:
    byzantine_worker(const byzantine_spec& spec, std::uint64_t seed, std::span<const float> initial)
        : spec_(spec), seed_(seed), round_start_(initial.begin(), initial.end()), delta_(initial.size()) {}

    // params = round_start - d', d = round_start - params its honest delta.
    void before_outer(std::span<float> params) {
        ++round_;
        const std::size_t n = params.size();
        for (std::size_t i = 0; i < n; ++i) delta_[i] = round_start_[i] - params[i];
        if (spec_.kind == byzantine_kind::stale) {
            history_.push_back(delta_);
            if (history_.size() > static_cast<std::size_t>(spec_.lag)) {
                delta_ = std::move(history_.front());
                history_.pop_front();
            } else {
                std::fill(delta_.begin(), delta_.end(), 0.0f);
            }
        } else {
            rng noise = byzantine_noise_stream(seed_, spec_.worker, round_);
            corrupt_delta(spec_, delta_, delta_, noise);
        }
        for (std::size_t i = 0; i < n; ++i) params[i] = round_start_[i] - delta_[i];
    }

    // The outer step is done: its parameters are the new global ones, the next round's start.
    void after_outer(std::span<const float> params) { round_start_.assign(params.begin(), params.end()); }

    const byzantine_spec& spec() const { return spec_; }
    std::uint64_t rounds() const { return round_; }

private:
    byzantine_spec spec_;
    std::uint64_t seed_;
    std::uint64_t round_ = 0;
    std::vector<float> round_start_, delta_;
    std::deque<std::vector<float>> history_; // stale: honest deltas, oldest first
};

// The spec of `worker` among `specs`, or nullptr: honest.
inline const byzantine_spec* byzantine_of(const std::vector<byzantine_spec>& specs, int worker) {
    for (const auto& s : specs)
        if (s.worker == worker) return &s;
    return nullptr;
}

} // namespace trickle_sim
