// A consumer of trickle: builds against the public surface and checks one exchange.
#include <trickle/trickle.hpp>

#include <cstdio>
#include <vector>

int main() {
    std::vector<float> w(64, 1.0f);
    trickle::param_group<float> params;
    params.add("w", w.data(), w.size());
    const auto r = trickle::random_words(42, 0, 0);
    std::printf("trickle %d.%d.%d consumer: %zu parameters, first draw %08x\n", TRICKLE_VERSION_MAJOR,
                TRICKLE_VERSION_MINOR, TRICKLE_VERSION_PATCH, params.total_size(), r[0]);
    return params.total_size() == 64 ? 0 : 1;
}
