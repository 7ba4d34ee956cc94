// trickle/algorithm/detail/erased.hpp: the type-erased interface behind trickle's algorithm objects.
//
// sparta<...> and diloco<...> are concrete types that hide the parameter type, memory
// space and communicator they were built with, so a trainer can hold one as a plain
// member. The hidden engine is a template; this interface dispatches step() to it per
// execution space, and turns a space the engine cannot use into a clear runtime error.
#pragma once

#include <trickle/algorithm/stats.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/execution_space.hpp>

#include <istream>
#include <memory>
#include <ostream>
#include <string>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

class algorithm_interface {
public:
    virtual ~algorithm_interface() = default;
    virtual void step(const exec::host&) = 0;
    virtual void step(const exec::openmp&) = 0;
    virtual void step(const exec::cuda&) = 0;
    virtual const exchange_stats& stats() const = 0;
    virtual void save(std::ostream&) const = 0;
    virtual void load(std::istream&, const std::string& source) = 0;
};

template <class Engine>
class erased_algorithm final : public algorithm_interface {
public:
    template <class... Args>
    explicit erased_algorithm(Args&&... args) : engine_(std::forward<Args>(args)...) {}

    void step(const exec::host& ex) override { dispatch(ex); }
    void step(const exec::openmp& ex) override { dispatch(ex); }
    void step(const exec::cuda& ex) override { dispatch(ex); }
    const exchange_stats& stats() const override { return engine_.stats(); }
    void save(std::ostream& os) const override { engine_.save(os); }
    void load(std::istream& is, const std::string& source) override { engine_.load(is, source); }

    Engine& engine() { return engine_; }

private:
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

// The public face shared by sparta, diloco and sparta_diloco: one type-erased engine.
class erased_handle {
public:
    template <class Exec>
    void step(const Exec& ex) {
        impl_->step(ex);
    }
    const exchange_stats& stats() const { return impl_->stats(); }
    void save(std::ostream& os) const { impl_->save(os); }
    void load(std::istream& is, const std::string& source = "stream") { impl_->load(is, source); }

protected:
    explicit erased_handle(std::unique_ptr<algorithm_interface> impl) : impl_(std::move(impl)) {}

private:
    std::unique_ptr<algorithm_interface> impl_;
};

template <class Engine, class... Args>
std::unique_ptr<algorithm_interface> make_erased(Args&&... args) {
    return std::make_unique<erased_algorithm<Engine>>(std::forward<Args>(args)...);
}

} // namespace detail

TRICKLE_NAMESPACE_END
