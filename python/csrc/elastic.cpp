// python/csrc/elastic.cpp: trickle.SPARTA, trickle.DiLoCo and trickle.SPARTADiLoCo with
// elastic=trickle.Elastic(...): the algorithm over comm::elastic_group (the view in a
// torch.distributed store, each epoch over Gloo). DiLoCo's instantiations (one per
// outer-gradient route, codec or sparsifier; outer::any holds the outer optimizer) are
// here; SPARTA's and SPARTA + DiLoCo's in elastic_sparta.cpp, elastic_sparta_diloco.cpp and
// elastic_sparta_diloco_sparse.cpp.
#include "common.hpp"

namespace trickle_py {

namespace {

// A Python callable held by a C++ object that may be destroyed, or call it, without the GIL
// (the elastic group lives inside bound_algorithm, destroyed with the GIL released): its
// reference is dropped, and every call made, under the GIL.
std::shared_ptr<py::object> hold(py::object fn) {
    return std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
        py::gil_scoped_acquire gil;
        delete p;
    });
}

// Runs fn under the GIL; a Python exception becomes a std::runtime_error with its text
// (the membership protocol reports it as the reason a join was refused).
template <class F>
auto under_gil(F&& fn) {
    py::gil_scoped_acquire gil;
    try {
        return fn();
    } catch (py::error_already_set& e) {
        throw std::runtime_error(e.what());
    }
}

// trickle.Elastic(carry=...): the trainer's state a joiner takes from the donor.
trickle::comm::trainer_state carried_state(const std::string& name, py::object save, py::object load) {
    auto s = hold(std::move(save));
    auto l = hold(std::move(load));
    return {name, [s] { return under_gil([&] { return std::string(py::bytes((*s)())); }); },
            [l](const std::string& b) { under_gil([&] { (*l)(py::bytes(b)); }); }};
}

} // namespace

std::unique_ptr<bound_algorithm> make_elastic(const std::string& kind, store_ptr store, int id, int initial,
                                              std::int64_t timeout_ms, std::int64_t liveness_ms, const std::string& job,
                                              std::int64_t start_timeout_ms, std::int64_t join_timeout_ms,
                                              const std::string& hostname, int renew_every, std::int64_t store_recovery_ms,
                                              const std::string& carry_name,
                                              py::object carry_save, py::object carry_load,
                                              const named_tensors& params, const py::dict& opts) {
    const bool sparse = kind == "SPARTA" || kind == "SPARTADiLoCo";
    const bool outer = kind == "DiLoCo" || kind == "SPARTADiLoCo";
    if (!sparse && !outer)
        throw trickle::invalid_argument("trickle: elastic= is offered by SPARTA, DiLoCo and SPARTADiLoCo, not " + kind);
    const int min_workers = get<int>(opts, "min_workers");
    std::optional<sparta_config> sc;
    std::optional<diloco_config> dc;
    if (sparse) {
        sc = sparta_config::from(opts, kind == "SPARTA" ? "interval" : "sparta_interval");
        sc->options.min_workers = min_workers;
    }
    if (outer) {
        dc = diloco_config::from(opts);
        dc->options.min_workers = min_workers;
    }
    // (trickle.Elastic checks its arguments; elastic_group checks them again, in its words.)
    trickle::comm::elastic_group_options eo;
    eo.initial = initial;
    eo.timeout = std::chrono::milliseconds(timeout_ms);
    eo.job = job;
    eo.liveness = std::chrono::milliseconds(liveness_ms);
    eo.start_timeout = std::chrono::milliseconds(start_timeout_ms);
    eo.join_timeout = std::chrono::milliseconds(join_timeout_ms);
    eo.hostname = hostname;
    eo.renew_every = renew_every;
    eo.store_recovery = std::chrono::milliseconds(store_recovery_ms);
    std::optional<trickle::comm::trainer_state> carried;
    if (!carry_name.empty()) carried = carried_state(carry_name, std::move(carry_save), std::move(carry_load));
    py::gil_scoped_release release;
    auto out = std::make_unique<bound_algorithm>(kind, std::move(store), id, eo);
    if (carried) out->elastic().carry_trainer_state(std::move(*carried));
    // A worker outside the view (new, or restarted with its id) joins: the members admit it
    // at their next round and hand it the state.
    const bool join = !out->elastic().member();
    if (sc) sc->options.join = join;
    if (dc) dc->options.join = join;
    if (kind == "SPARTA")
        out->set(sparta_on_elastic(out->elastic(), params, *sc, make_topology(opts)));
    else if (kind == "SPARTADiLoCo" && dc->wire.sparse)
        out->set(sparta_diloco_sparsified_on_elastic(out->elastic(), params, *sc, *dc));
    else if (kind == "SPARTADiLoCo")
        out->set(sparta_diloco_on_elastic(out->elastic(), params, *sc, *dc));
    else if (dc->wire.sparse)
        out->set(build_diloco(out->elastic(), params, *dc, *dc->wire.sparse));
    else
        out->set(build_diloco(out->elastic(), params, *dc, dc->wire.codec));
    return out;
}

} // namespace trickle_py
