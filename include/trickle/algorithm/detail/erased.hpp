// trickle/algorithm/detail/erased.hpp: the type-erased interface behind trickle's algorithm objects.
//
// sparta<...>, diloco<...> and ddp are concrete types that hide the parameter type, memory
// space and communicator they were built with, so a trainer can hold one as a plain
// member. The hidden engine is a template; this interface dispatches step() to it per
// execution space, and turns a space the engine cannot use into a clear runtime error.
#pragma once

#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/execution_space.hpp>

#include <istream>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

class algorithm_interface {
public:
    virtual ~algorithm_interface() = default;
    virtual void step(const exec::host&) = 0;
    virtual void step(const exec::openmp&) = 0;
    virtual void step(const exec::cuda&) = 0;
    virtual void flush(const exec::host&) = 0;
    virtual void outer_step(const exec::host&) = 0;
    virtual void outer_step(const exec::cuda&) = 0;
    virtual void set_weight(float) = 0;
    virtual const exchange_stats& stats() const = 0;
    // The SPARTA and DiLoCo parts of a combined algorithm (both equal stats() otherwise).
    virtual const exchange_stats& sparse_stats() const = 0;
    virtual const exchange_stats& outer_stats() const = 0;
    virtual membership_stats membership() const = 0;
    virtual aggregation_stats aggregation() const = 0;
    virtual deadline_stats deadlines() const = 0;
    virtual double deadline() const = 0;
    virtual overlap_plan overlap() const = 0;
    virtual void report_arrival(double) = 0;
    virtual void save(std::ostream&) const = 0;
    virtual void load(std::istream&, const std::string& source, checkpoint_trailing trailing) = 0;
    virtual std::vector<std::string> own_state() const = 0;
    // The engine's kind: "sparta", "diloco", "sparta_diloco" or "ddp" (as its messages name it).
    virtual const char* kind() const = 0;
};

template <class Engine>
class erased_algorithm final : public algorithm_interface {
public:
    template <class... Args>
    explicit erased_algorithm(Args&&... args) : engine_(std::forward<Args>(args)...) {}

    void step(const exec::host& ex) override { dispatch(ex); }
    void step(const exec::openmp& ex) override { dispatch(ex); }
    void step(const exec::cuda& ex) override { dispatch(ex); }
    void flush(const exec::host& ex) override {
        if constexpr (requires { engine_.flush(ex); })
            if constexpr (can_access_v<exec::host, typename Engine::memory_space>) engine_.flush(ex);
    }
    void outer_step(const exec::host& ex) override { outer(ex); }
    void outer_step(const exec::cuda& ex) override { outer(ex); }
    void set_weight(float w) override {
        if constexpr (requires { engine_.set_weight(w); })
            engine_.set_weight(w);
        else
            throw invalid_argument(concat(Engine::kind, ": set_weight applies to DiLoCo and SPARTA + DiLoCo"));
    }
    const exchange_stats& stats() const override { return engine_.stats(); }
    const exchange_stats& sparse_stats() const override {
        if constexpr (requires { engine_.sparse_stats(); })
            return engine_.sparse_stats();
        else
            return engine_.stats();
    }
    membership_stats membership() const override {
        if constexpr (requires { engine_.membership(); })
            return engine_.membership();
        else
            return membership_stats{};
    }
    aggregation_stats aggregation() const override {
        if constexpr (requires { engine_.aggregation(); })
            return engine_.aggregation();
        else
            return aggregation_stats{};
    }
    deadline_stats deadlines() const override {
        if constexpr (requires { engine_.deadlines(); })
            return engine_.deadlines();
        else
            return deadline_stats{};
    }
    overlap_plan overlap() const override {
        if constexpr (requires { engine_.overlap(); })
            return engine_.overlap();
        else
            return overlap_plan{};
    }
    double deadline() const override {
        if constexpr (requires { engine_.deadline(); })
            return engine_.deadline();
        else
            return 0.0;
    }
    void report_arrival(double t) override {
        if constexpr (requires { engine_.report_arrival(t); })
            engine_.report_arrival(t);
        else
            throw invalid_argument(concat(Engine::kind, ": report_arrival applies to DiLoCo and SPARTA + DiLoCo"));
    }
    const exchange_stats& outer_stats() const override {
        if constexpr (requires { engine_.outer_stats(); })
            return engine_.outer_stats();
        else
            return engine_.stats();
    }
    void save(std::ostream& os) const override { engine_.save(os); }
    std::vector<std::string> own_state() const override {
        if constexpr (requires { engine_.own_state(); })
            return engine_.own_state();
        else
            return {};
    }
    void load(std::istream& is, const std::string& source, checkpoint_trailing trailing) override {
        engine_.load(is, source, trailing);
    }
    const char* kind() const override { return Engine::kind; }

    Engine& engine() { return engine_; }

private:
    template <class Exec>
    void outer(const Exec& ex) {
        using space = typename Engine::memory_space;
        if constexpr (requires { engine_.outer_step(ex); }) {
            if constexpr (can_access_v<Exec, space>)
                engine_.outer_step(ex);
            else
                throw invalid_argument(concat(Engine::kind, "::outer_step: the parameters are in ", space::name,
                                              " memory, which exec::", Exec::name, " cannot reach"));
        } else {
            throw invalid_argument(concat(Engine::kind, ": outer_step applies to DiLoCo and SPARTA + DiLoCo"));
        }
    }

    template <class Exec>
    void dispatch(const Exec& ex) {
        using space = typename Engine::memory_space;
        if constexpr (can_access_v<Exec, space>)
            engine_.step(ex);
        else
            throw invalid_argument(concat(Engine::kind, "::step: the parameters are in ", space::name,
                                          " memory, which exec::", Exec::name, " cannot reach"));
    }

    Engine engine_;
};

// The public face shared by sparta, diloco, sparta_diloco and ddp: one type-erased engine
// (any_algorithm, algorithm/any.hpp, holds any of them).
// Default-constructed (or moved-from) it holds none, so a trainer can declare the member
// first and assign the algorithm once its parameters and communicator exist; using an
// empty one throws invalid_argument.
class erased_handle {
public:
    template <class Exec>
    void step(const Exec& ex) {
        get("step").step(ex);
    }
    const exchange_stats& stats() const { return get("stats").stats(); }
    // Membership over an elastic communicator (docs/elastic.md); zeros otherwise.
    membership_stats membership() const { return get("membership").membership(); }
    // DiLoCo and SPARTA + DiLoCo: how the outer steps combined the workers' contributions
    // (diloco_options::aggregate; the mean's reports too), and the adaptive deadline
    // (diloco_options::deadline): the coming round's, the history, and this worker's
    // arrival time in the current round (docs/robustness.md).
    aggregation_stats aggregation() const { return get("aggregation").aggregation(); }
    deadline_stats deadlines() const { return get("deadlines").deadlines(); }
    double deadline() const { return get("deadline").deadline(); }
    // The inner steps the exchanges run behind the worker's compute (overlap_plan; 0: they
    // block), as the route decided from the communicator, the codec and the topology.
    overlap_plan overlap() const { return get("overlap").overlap(); }
    void report_arrival(double t) { get("report_arrival").report_arrival(t); }
    // Applies an overlapped SPARTA exchange still waiting (sparta_options::overlap), so that
    // save() may run; nothing otherwise. Local to the worker.
    void flush() { get("flush").flush(exec::host{}); }
    // DiLoCo and SPARTA + DiLoCo with diloco_options::manual_outer: an outer step now, on
    // every worker at once (workers at different speeds, a deadline).
    void outer_step(const exec::host& ex) { get("outer_step").outer_step(ex); }
    void outer_step(const exec::cuda& ex) { get("outer_step").outer_step(ex); }
    // DiLoCo and SPARTA + DiLoCo: this worker's weight in the coming outer steps (e.g. the
    // tokens it processed since the last one).
    void set_weight(float w) { get("set_weight").set_weight(w); }
    void save(std::ostream& os) const { get("save").save(os); }
    // Reads a checkpoint; `trailing`: whether bytes may follow it in `is` (checkpoint.hpp).
    void load(std::istream& is, const std::string& source = "stream",
              checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        get("load").load(is, source, trailing);
    }

    // The sections of this worker's checkpoint that are its own rather than equal on every
    // worker (an error-feedback residual, streaming's fragment state): empty when a
    // checkpoint saved by any one worker restores every worker alike (its traffic counts
    // aside). The Python package refuses another rank's state_dict unless this is empty.
    std::vector<std::string> own_state() const { return get("own_state").own_state(); }

    // The algorithm's kind: "sparta", "diloco", "sparta_diloco" or "ddp".
    const char* kind() const { return get("kind").kind(); }

    // Whether this object holds an algorithm.
    explicit operator bool() const { return impl_ != nullptr; }

protected:
    erased_handle() = default;
    explicit erased_handle(std::unique_ptr<algorithm_interface> impl) : impl_(std::move(impl)) {}

    algorithm_interface& get(const char* what) const {
        if (impl_ == nullptr)
            throw invalid_argument(concat(what, ": this algorithm object is empty (default-constructed or moved from); "
                                                "assign a constructed one first"));
        return *impl_;
    }

private:
    std::unique_ptr<algorithm_interface> impl_;
};

template <class Engine, class... Args>
std::unique_ptr<algorithm_interface> make_erased(Args&&... args) {
    return std::make_unique<erased_algorithm<Engine>>(std::forward<Args>(args)...);
}

} // namespace detail

TRICKLE_NAMESPACE_END
