// python/csrc/demo.cpp: the engine under trickle.DeMo (trickle::demo_engine, trickle/algorithm/demo.hpp)
// over CPU float32 tensors and a torch.distributed process group: one object per
// torch.optim parameter group. The Python layer (trickle/_demo.py) checks the tensors and
// copies the gradients into the buffers this object was built over.
#include "common.hpp"

#include <trickle/algorithm/demo.hpp>

#include <sstream>

namespace trickle_py {
namespace {

using demo_comm = trickle::comm::process_group;

// The engine, whichever selection it was built with (two instantiations; the values go
// through codec::any, so a codec is a run-time choice).
struct demo_base {
    virtual ~demo_base() = default;
    virtual void step() = 0;
    virtual void set_lr(double lr) = 0;
    virtual const trickle::exchange_stats& stats() const = 0;
    virtual std::vector<float> momentum() const = 0;
    virtual std::size_t coefficients() const = 0;
    virtual std::size_t chunks() const = 0;
    virtual std::string save() const = 0;
    virtual void load(const std::string& bytes) = 0;
};

template <class Select>
struct demo_impl final : demo_base {
    template <class... A>
    explicit demo_impl(A&&... a) : engine(std::forward<A>(a)...) {}
    void step() override { engine.step(trickle::exec::host{}); }
    void set_lr(double lr) override { engine.set_lr(lr); }
    const trickle::exchange_stats& stats() const override { return engine.stats(); }
    std::vector<float> momentum() const override { return engine.momentum(); }
    std::size_t coefficients() const override { return engine.coefficients(); }
    std::size_t chunks() const override { return engine.chunks(); }
    std::string save() const override {
        std::ostringstream os;
        engine.save(os);
        return os.str();
    }
    void load(const std::string& bytes) override {
        std::istringstream is(bytes);
        engine.load(is, "trickle.DeMo state");
    }
    trickle::demo_engine<demo_comm, Select, trickle::codec::any> engine;
};

trickle::param_group<float> group_of(const named_tensors& tensors, const char* what) {
    trickle::param_group<float> g;
    for (const auto& [name, t] : tensors) {
        if (t.scalar_type() != at::kFloat || !t.device().is_cpu() || !t.is_contiguous())
            throw trickle::invalid_argument("trickle.DeMo: " + std::string(what) + " '" + name +
                                            "' must be a contiguous CPU float32 tensor");
        g.add(name, t.data_ptr<float>(), static_cast<std::size_t>(t.numel()));
    }
    return g;
}

} // namespace

// One parameter group's DeMo: owns the communicator over the process group, then the engine.
class bound_demo {
public:
    bound_demo(process_group_ptr pg, const named_tensors& params, const named_tensors& grads,
               const std::vector<std::pair<std::size_t, std::size_t>>& shapes, const py::dict& opts)
        : params_(params), grads_(grads),
          comm_(std::move(pg),
                trickle::comm::process_group_options{.checks = trickle::comm::argument_checks::in_payload}) {
        trickle::demo_options o;
        o.lr = get<double>(opts, "lr");
        o.compression_decay = get<double>(opts, "compression_decay");
        o.weight_decay = get<double>(opts, "weight_decay");
        o.chunk = get<std::size_t>(opts, "chunk");
        o.k = get<std::size_t>(opts, "k");
        o.seed = get<std::uint64_t>(opts, "seed");
        const auto selection = get<std::string>(opts, "selection");
        const trickle::codec::any values = make_codec(opts, "values").for_type<float>();
        const auto p = group_of(params, "parameter");
        const auto g = group_of(grads, "gradient");
        std::vector<trickle::demo_shape> s;
        for (const auto& [rows, cols] : shapes) s.push_back({rows, cols});
        py::gil_scoped_release release;
        if (selection == trickle::demo_select::top_k::name)
            impl_ = std::make_unique<demo_impl<trickle::demo_select::top_k>>(p, g, std::move(s), comm_, o, values);
        else if (selection == trickle::demo_select::shared::name)
            impl_ = std::make_unique<demo_impl<trickle::demo_select::shared>>(p, g, std::move(s), comm_, o, values);
        else
            throw trickle::invalid_argument("trickle.DeMo: selection must be 'top_k' or 'shared', got '" + selection +
                                            "'");
    }
    bound_demo(const bound_demo&) = delete;
    bound_demo& operator=(const bound_demo&) = delete;
    ~bound_demo() {
        // As bound_algorithm: dropping the group may join its threads, which may need the GIL.
        if (Py_IsInitialized() && PyGILState_Check()) {
            py::gil_scoped_release release;
            impl_.reset();
        } else {
            impl_.reset();
        }
    }

    demo_base& impl() const { return *impl_; }
    // After a step that wrote the parameters, autograd sees them changed (as any in-place
    // optimizer step does).
    void bump_versions() const {
        for (const auto& [name, t] : params_) ::torch::autograd::impl::bump_version(t);
    }
    int rank() const { return comm_.rank(); }
    int size() const { return comm_.size(); }

private:
    named_tensors params_, grads_; // held, so that the buffers outlive the engine
    demo_comm comm_;
    std::unique_ptr<demo_base> impl_;
};

void bind_demo(py::module_& m) {
    // The selections' names, as the engines' Select policies declare them (trickle.DeMo's
    // selection=).
    m.attr("demo_selections") = py::make_tuple(trickle::demo_select::top_k::name, trickle::demo_select::shared::name);
    py::class_<bound_demo>(m, "DeMoEngine")
        .def(py::init<process_group_ptr, const named_tensors&, const named_tensors&,
                      const std::vector<std::pair<std::size_t, std::size_t>>&, const py::dict&>(),
             py::arg("group"), py::arg("params"), py::arg("grads"), py::arg("shapes"), py::arg("options"))
        .def("step",
             [](bound_demo& d) {
                 {
                     py::gil_scoped_release release;
                     d.impl().step();
                 }
                 d.bump_versions();
             })
        .def("set_lr", [](bound_demo& d, double lr) { d.impl().set_lr(lr); }, py::arg("lr"))
        .def("stats", [](const bound_demo& d) { return stats_dict(d.impl().stats()); })
        .def("momentum",
             [](const bound_demo& d) {
                 const std::vector<float> m = d.impl().momentum();
                 at::Tensor t = at::empty({static_cast<std::int64_t>(m.size())}, at::kFloat);
                 std::copy(m.begin(), m.end(), t.data_ptr<float>());
                 return t;
             })
        .def_property_readonly("coefficients", [](const bound_demo& d) { return d.impl().coefficients(); })
        .def_property_readonly("chunks", [](const bound_demo& d) { return d.impl().chunks(); })
        .def_property_readonly("rank", &bound_demo::rank)
        .def_property_readonly("size", &bound_demo::size)
        .def("save_bytes",
             [](const bound_demo& d) {
                 std::string b;
                 {
                     py::gil_scoped_release release;
                     b = d.impl().save();
                 }
                 return py::bytes(b);
             })
        .def("load_bytes",
             [](bound_demo& d, const py::bytes& data) {
                 std::string b = data;
                 {
                     py::gil_scoped_release release;
                     d.impl().load(b);
                 }
             },
             py::arg("data"));
}

} // namespace trickle_py
