// The device path end to end, SPARTA: N workers on one GPU give exactly the host's
// replicas for every sampler, both topologies, a schedule and an interval, fp32 and bf16,
// on layouts whose tensors are and are not 16-byte aligned against the flat index.
#include "device_path.hpp"

using namespace device_path;

TEST_CASE_TEMPLATE("N workers on one GPU give the host's replicas: SPARTA", T, float, trickle::bfloat16) {
    for (const auto& layout : {odd_layout, aligned_layout})
        for (int workers : {1, 2, 3, 4}) {
            compare<T>(workers, layout, 5, make_sparta<sampler::uniform>({.fraction = 0.01, .seed = 3}), "uniform");
            compare<T>(workers, layout, 5,
                       make_sparta<sampler::permutation, schedule::constant, topology::ring>({.fraction = 0.02, .seed = 4}),
                       "permutation ring");
            compare<T>(workers, layout, 5, make_sparta({.fraction = 0.05, .seed = 5}, sampler::block{.block_size = 256}),
                       "block 256");
            compare<T>(workers, layout, 5,
                       make_sparta<sampler::block, schedule::constant, topology::ring>({.fraction = 0.05, .seed = 6},
                                                                                      sampler::block{.block_size = 100}),
                       "block 100 ring");
            compare<T>(workers, layout, 5, make_sparta<sampler::layerwise>({.fraction = 0.01, .seed = 7}),
                       "layerwise per tensor");
            compare<T>(workers, layout, 5,
                       make_sparta({.fraction = 0.3, .seed = 8},
                                   sampler::layerwise{.how = sampler::layerwise::mode::rotating}),
                       "layerwise rotating");
            compare<T>(workers, layout, 6,
                       make_sparta({.fraction = 0.05, .interval = 2, .seed = 9}, sampler::block{.block_size = 64},
                                   schedule::linear{.end_fraction = 0.01, .steps = 4}),
                       "block, linear schedule, every 2 steps");
        }
}

