// Compression on the device, SPARTA and SPARTA + DiLoCo: value codecs (native, fp8,
// int8 with stochastic rounding; bf16 for SPARTA's payload with int8 for DiLoCo's) over N
// workers on one GPU give exactly the host's replicas.
#include "device_path.hpp"

using namespace device_path;

namespace {

template <class Codec, class S = sampler::uniform>
auto make_coded_sparta(sparta_options o, Codec codec, S s = {}) {
    return [=](const auto& g, auto& c) {
        return sparta<S, schedule::constant, topology::all_reduce, Codec>(g, c, o, s, schedule::constant{},
                                                                          topology::all_reduce{}, codec);
    };
}

} // namespace

TEST_CASE_TEMPLATE("N workers on one GPU give the host's replicas through every value codec: SPARTA and SPARTA + DiLoCo", T, float,
                   trickle::bfloat16) {
    for (int workers : {1, 2, 3}) {
        const auto& layout = odd_layout;
        compare<T>(workers, layout, 5, make_coded_sparta({.fraction = 0.01, .seed = 7}, codec::native{}),
                   "sparta native");
        compare<T>(workers, layout, 5, make_coded_sparta({.fraction = 0.02, .seed = 7}, codec::fp8_e5m2{}),
                   "sparta fp8_e5m2");
        compare<T>(workers, layout, 5,
                   make_coded_sparta({.fraction = 0.05, .seed = 2, .stochastic_rounding = true},
                                     codec::int8_block{.block_size = 32}, sampler::block{.block_size = 64}),
                   "sparta block sampler, int8, stochastic rounding");
        compare<T>(workers, layout, 6,
                   [](const auto& g, auto& c) {
                       return sparta_diloco<sampler::uniform, schedule::constant, topology::all_reduce, outer::nesterov,
                                            codec::bf16, codec::int8_block>(
                           g, c, {.fraction = 0.02, .seed = 1}, {.interval = 3, .error_feedback = 0.5});
                   },
                   "sparta (bf16) + diloco (int8, error feedback)");
    }
}
