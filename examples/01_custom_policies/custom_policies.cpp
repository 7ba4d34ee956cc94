// Writing your own policies: a sampler and a fraction schedule defined here, outside the
// library, against the documented concepts, and plugged into trickle::sparta unchanged.
#include <trickle/trickle.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

// A sampler that averages a strided comb of positions: position (offset + j·stride) for
// j = 0, 1, ..., with a random offset per step. Pure function of (seed, step): no state.
struct strided_sampler {
    static constexpr const char* name = "strided";

    // The selection: trivially copyable, callable on host and device.
    struct selection_type {
        std::size_t n, stride, offset, size;
        TRICKLE_HOST_DEVICE std::size_t count() const { return size; }
        TRICKLE_HOST_DEVICE std::size_t operator()(std::size_t k) const { return offset + k * stride; }
    };

    selection_type select(const trickle::sampler_context& ctx) const {
        const std::size_t n = ctx.layout.total;
        const auto stride = static_cast<std::size_t>(std::llround(1.0 / ctx.fraction));
        // Every worker draws the same offset from the shared seed and the step.
        const std::size_t offset =
            trickle::bounded(trickle::random_u64(ctx.seed, 0x5717ull << 40 | ctx.step, 0), stride < n ? stride : n);
        const std::size_t size = offset < n ? (n - offset + stride - 1) / stride : 0;
        return {n, stride, offset, size};
    }

    void describe(trickle::config_record& rec) const { rec.add("sampler", name); }
};
static_assert(trickle::sampler_policy<strided_sampler>);

// A schedule that halves the fraction every `half_life` steps, down to a floor.
struct halving_schedule {
    static constexpr const char* name = "halving";
    std::uint64_t half_life = 100;
    double floor_fraction = 0.001;

    double fraction(std::uint64_t step, double base) const {
        const double p = base * std::exp2(-static_cast<double>(step / half_life));
        return p > floor_fraction ? p : floor_fraction;
    }
    void describe(trickle::config_record& rec) const {
        rec.add("schedule", name).add("half_life", half_life).add("floor_fraction", floor_fraction);
        if (half_life == 0) rec.set_error("halving_schedule: half_life must be >= 1");
        if (!(floor_fraction > 0 && floor_fraction <= 1)) rec.set_error("halving_schedule: floor_fraction must be in (0, 1]");
    }
};
static_assert(trickle::schedule_policy<halving_schedule>);

int main() {
    constexpr int workers = 3;
    std::vector<std::vector<float>> w(workers, std::vector<float>(5000));
    for (int r = 0; r < workers; ++r)
        for (std::size_t i = 0; i < w[r].size(); ++i) w[r][i] = static_cast<float>(r);
    std::vector<std::uint64_t> sent_per_step;

    trickle::comm::run_local(workers, [&](trickle::comm::local& comm) {
        // Workers start apart on purpose (worker r holds r everywhere), so no initial broadcast.
        trickle::param_group<float> params{{"w", w[comm.rank()].data(), w[comm.rank()].size()}};
        trickle::sparta<strided_sampler, halving_schedule> sparta(params, comm, {.fraction = 0.04, .seed = 7, .broadcast_initial = false}, {},
                                                                   halving_schedule{.half_life = 10});
        for (int step = 0; step < 40; ++step) {
            sparta.step(trickle::exec::host{});
            if (comm.rank() == 0) sent_per_step.push_back(sparta.stats().last_values);
        }
    });

    std::size_t averaged = 0;
    for (std::size_t i = 0; i < w[0].size(); ++i) averaged += w[0][i] == 1.0f && w[1][i] == 1.0f && w[2][i] == 1.0f;
    std::printf("custom sampler + schedule: values per exchange at steps 0, 10, 20, 30: %llu %llu %llu %llu\n",
                static_cast<unsigned long long>(sent_per_step[0]), static_cast<unsigned long long>(sent_per_step[10]),
                static_cast<unsigned long long>(sent_per_step[20]), static_cast<unsigned long long>(sent_per_step[30]));
    std::printf("positions holding the mean (1.0) on all workers: %zu of %zu\n", averaged, w[0].size());
    return sent_per_step[0] == 200 && sent_per_step[10] == 100 && averaged > 0 ? 0 : 1;
}
