// examples/sim/strategies_demo.cpp: builds trickle::demo_engine (demo, demo-shared), the optimizer in place of AdamW.
#include "strategies.hpp"

#include <algorithm>

namespace trickle_sim {

namespace {

// DeMo takes the gradients as well as the parameters: the engine reads them from a
// param_group of the parameters' layout, over a buffer this exchanger owns, into which the
// trainer's reduced and clipped gradients are copied before each step. Every step is one
// blocking exchange (the step waits for the coefficients before it applies them).
template <class Select>
class demo_exchanger final : public exchanger {
public:
    demo_exchanger(const sim_config& c, const trickle::param_group<float>& params,
                   const std::vector<tensor_slot>& tensors, trickle::comm::local& comm)
        : grads_(params.total_size()),
          engine_(params, gradient_group(params, grads_), demo_shapes(tensors), comm, make_demo_options(c),
                  make_codec(c.demo_values, c.codec_block)) {}

    bool optimizer_step(const float* grads, std::size_t n, float lr) override {
        std::copy(grads, grads + n, grads_.begin());
        engine_.set_lr(lr);
        engine_.step(trickle::exec::host{});
        peak_ = std::max(peak_, engine_.stats().last.bytes_sent);
        return true;
    }
    std::uint64_t bytes_sent() const override { return engine_.stats().total.bytes_sent; }
    traffic_split traffic() const override {
        traffic_split t;
        detail::tally(engine_.stats(), false, t);
        return t;
    }
    std::uint64_t peak_bytes() const override { return peak_; }

private:
    // The gradients' group: the parameters' names and sizes, over `storage`.
    static trickle::param_group<float> gradient_group(const trickle::param_group<float>& params,
                                                      std::vector<float>& storage) {
        trickle::param_group<float> g;
        for (const auto& e : params.entries()) g.add(e.name, storage.data() + e.offset, e.view.size());
        return g;
    }

    std::vector<float> grads_;
    trickle::demo_engine<trickle::comm::local, Select, trickle::codec::any> engine_;
    std::uint64_t peak_ = 0;
};

} // namespace

std::unique_ptr<exchanger> make_demo_exchanger(const sim_config& c, strategy_kind kind,
                                               const trickle::param_group<float>& group,
                                               const std::vector<tensor_slot>& tensors, trickle::comm::local& comm) {
    if (kind == strategy_kind::demo_shared)
        return std::make_unique<demo_exchanger<trickle::demo_select::shared>>(c, group, tensors, comm);
    return std::make_unique<demo_exchanger<trickle::demo_select::top_k>>(c, group, tensors, comm);
}

} // namespace trickle_sim
