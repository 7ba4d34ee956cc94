// tests/algorithm/drift_model.hpp: a five-tensor model (1000 values) whose "training" adds a
// deterministic drift per worker and step, for the tests of streaming and elastic DiLoCo.
#pragma once

#include <trickle/core/param_group.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trickle_test {

inline const std::vector<std::size_t> drift_sizes{300, 50, 200, 7, 443};

inline float drift(int worker, std::size_t i, std::uint64_t t) {
    return 0.01f * static_cast<float>(std::sin(0.1 * static_cast<double>(i) * (worker + 1) + 0.3 * static_cast<double>(t)));
}

struct drift_model {
    std::vector<std::vector<float>> ts;
    trickle::param_group<float> group;
    explicit drift_model(int worker) {
        for (std::size_t k = 0; k < drift_sizes.size(); ++k) {
            std::vector<float> v(drift_sizes[k]);
            for (std::size_t i = 0; i < v.size(); ++i)
                v[i] = 0.3f * static_cast<float>(std::cos(0.07 * static_cast<double>(i) + static_cast<double>(k))) +
                       0.05f * static_cast<float>(worker);
            ts.push_back(std::move(v));
        }
        for (std::size_t k = 0; k < ts.size(); ++k) group.add(std::string(1, 't').append(std::to_string(k)), ts[k].data(), ts[k].size());
    }
    drift_model(const drift_model&) = delete;
    drift_model& operator=(const drift_model&) = delete;
    std::vector<float> flat() const {
        std::vector<float> out;
        for (const auto& v : ts) out.insert(out.end(), v.begin(), v.end());
        return out;
    }
    void train(int worker, std::uint64_t t) {
        std::size_t i = 0;
        for (auto& v : ts)
            for (float& x : v) x += drift(worker, i++, t);
    }
};

} // namespace trickle_test
