// The device path end to end, streaming DiLoCo (fragments, overlapped outer steps, mixing):
// N workers on one GPU give exactly the host's replicas. (A translation unit of its own so
// that the CUDA build compiles the device DiLoCo tests on both cores.)
#include "device_path.hpp"

#include <tuple>

using namespace device_path;

TEST_CASE_TEMPLATE("streaming DiLoCo: N workers on one GPU give the host's replicas", T, float, trickle::bfloat16) {
    for (int workers : {1, 2, 3})
        for (const auto& [F, tau, alpha] : {std::tuple<std::uint64_t, std::uint64_t, double>{3, 0, 0.0},
                                            std::tuple<std::uint64_t, std::uint64_t, double>{2, 2, 0.5},
                                            std::tuple<std::uint64_t, std::uint64_t, double>{3, 1, 0.0}}) {
            diloco_options o{.interval = 4, .seed = 6};
            o.fragments = F;
            o.overlap_steps = tau;
            o.mix = alpha;
            compare<T>(workers, odd_layout, 11, make_diloco<outer::nesterov>(o), "streaming diloco");
        }
}
