// Compression on the device through other topologies: codec::encoded_link over gossip,
// ring, islands and exponential topologies, N workers on one GPU, gives exactly the host's
// replicas.
#include "device_path.hpp"

using namespace device_path;

TEST_CASE_TEMPLATE("through gossip, ring and islands (codec::encoded_link) N workers on one GPU give the host's "
                   "replicas",
                   T, float, trickle::bfloat16) {
    for (int workers : {2, 3, 4}) {
        const auto& layout = odd_layout;
        compare<T>(workers, layout, 5,
                   [](const auto& g, auto& c) {
                       return sparta<sampler::uniform, schedule::constant, topology::gossip, codec::int8_block>(
                           g, c, {.fraction = 0.05, .seed = 3, .stochastic_rounding = true});
                   },
                   "sparta gossip int8 stochastic");
        compare<T>(workers, layout, 5,
                   [](const auto& g, auto& c) {
                       return sparta<sampler::uniform, schedule::constant, topology::ring, codec::fp8_e4m3>(
                           g, c, {.fraction = 0.02, .seed = 3});
                   },
                   "sparta ring fp8");
        compare<T>(workers, layout, 6,
                   [](const auto& g, auto& c) {
                       diloco_options o{.interval = 2, .seed = 5, .error_feedback = 0.9};
                       o.weight = 1.0f + 0.25f * static_cast<float>(c.rank());
                       // Islands of 3 where the world has them (islands larger than the world are refused).
                       return diloco<outer::nesterov, topology::islands, codec::sign2_block>(
                           g, c, o, {}, topology::islands{.size = std::min(3, c.size())}, codec::sign2_block{});
                   },
                   "diloco islands(3) sign2, error feedback");
        compare<T>(workers, layout, 6,
                   [](const auto& g, auto& c) {
                       return diloco<outer::nesterov, topology::any, codec::any>(
                           g, c, {.interval = 3, .seed = 5}, {}, topology::exponential{}, codec::bf16{});
                   },
                   "diloco exponential bf16 (any)");
    }
}
