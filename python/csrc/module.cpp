// python/csrc/module.cpp: the trickle._C extension module (exceptions, the bound algorithm
// class, the factories). The Python layer (trickle/_algorithms.py) validates arguments and
// builds the option dicts the factories read.
#include "common.hpp"

#include <torch/version.h>

#include <trickle/algorithm/cost.hpp>

#if TRICKLE_PY_CUDA
#include <trickle_py_build.hpp> // setup.py's choices: TRICKLE_PY_CUDA_ARCHS
#endif

#include <exception>

namespace trickle_py {

py::dict stats_dict(const trickle::exchange_stats& s) {
    py::dict d;
    d["steps"] = s.steps;
    d["exchanges"] = s.exchanges;
    d["values"] = s.values;
    d["bytes_sent"] = s.total.bytes_sent;
    d["bytes_received"] = s.total.bytes_received;
    d["calls"] = s.total.calls;
    d["last_bytes_sent"] = s.last.bytes_sent;
    d["last_bytes_received"] = s.last.bytes_received;
    d["last_calls"] = s.last.calls;
    d["last_values"] = s.last_values;
    d["dense_bytes"] = s.dense_bytes;
    d["reduction"] = s.reduction();
    d["initial_bytes_sent"] = s.initial.bytes_sent;
    d["initial_bytes_received"] = s.initial.bytes_received;
    d["initial_calls"] = s.initial.calls;
    d["code_bytes_sent"] = s.sent.codes;
    d["scale_bytes_sent"] = s.sent.scales;
    d["index_bytes_sent"] = s.sent.indices;
    d["padding_bytes_sent"] = s.sent.padding;
    return d;
}

namespace {

// trickle::aggregation_stats (trickle/algorithm/stats.hpp) as the dict trickle.Aggregation reads.
py::dict aggregation_dict(const trickle::aggregation_stats& s) {
    py::dict d;
    d["rule"] = s.rule;
    d["rounds"] = s.rounds;
    d["weights"] = s.weights;
    d["norm"] = s.norm;
    d["distance"] = s.distance;
    d["trimmed_fraction"] = s.trimmed_fraction;
    d["clipped"] = s.clipped;
    d["excluded"] = s.excluded;
    d["clipped_total"] = s.clipped_total;
    d["excluded_total"] = s.excluded_total;
    d["skipped"] = s.skipped;
    return d;
}

py::list groups_list(const trickle::torch::model_params& p) {
    py::list out;
    for (const auto& g : p.groups) {
        py::dict d;
        d["dtype"] = std::string(c10::toString(g.dtype));
        d["device"] = g.device.str();
        d["names"] = g.names;
        d["elements"] = g.elements();
        out.append(d);
    }
    return out;
}

// One family's registered names, in the registry's order, and the keyword arguments that
// configure each (common.hpp: the *_keys functions).
template <class Registry, class Keys>
void add_family(py::dict& names, py::dict& options, const char* family, Keys keys) {
    py::list list;
    py::dict by_name;
    trickle::for_each_type<Registry>([&](auto t) {
        using P = typename decltype(t)::type;
        list.append(P::name);
        by_name[P::name] = py::tuple(py::cast(keys(t)));
    });
    names[family] = py::tuple(list);
    options[family] = by_name;
}

// Collective: every rank reports the error its Python layer found (or none), so that a
// rank with a bad argument raises together with the others instead of leaving them
// waiting in the algorithm's constructor. Throws invalid_argument on every rank if any
// rank reported one.
// Over an NCCL group (which carries CUDA tensors only) the agreement goes through device
// memory on the current device (comm::process_group_cuda), in a CUDA build.
// `overlaps`: whether the object's exchanges may travel between steps (then the Python
// layer gives it a process group of its own, which every rank must make together).
void agree_python(process_group_ptr pg, const std::string& kind, const std::string& error, bool overlaps) {
    trickle::config_record rec("python." + kind);
    rec.add("overlapped exchanges (overlap, overlap_steps)", overlaps);
    if (!error.empty()) rec.set_error(error);
#if TRICKLE_PY_CUDA
    if (trickle::comm::process_group_cuda::takes_device_tensors(pg)) {
        trickle::comm::process_group_cuda comm(std::move(pg));
        py::gil_scoped_release release;
        trickle::agree(comm, rec);
        return;
    }
#endif
    trickle::comm::process_group comm(std::move(pg));
    py::gil_scoped_release release;
    trickle::agree(comm, rec);
}

} // namespace
} // namespace trickle_py

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    namespace py = pybind11;
    using namespace trickle_py;
    m.doc() = "trickle's C++ algorithms (SPARTA, DiLoCo, the dense baseline) over torch.distributed process groups";

    // Python classes for trickle's errors (the package re-exports them as trickle.MismatchError
    // and trickle.CommError). invalid_argument becomes ValueError, any other trickle::error
    // RuntimeError.
    static py::exception<trickle::mismatch_error> mismatch(m, "MismatchError", PyExc_ValueError);
    static py::exception<trickle::comm_error> comm(m, "CommError", PyExc_RuntimeError);
    py::register_local_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const trickle::mismatch_error& e) {
            PyErr_SetString(mismatch.ptr(), e.what());
        } catch (const trickle::comm_error& e) {
            PyErr_SetString(comm.ptr(), e.what());
        } catch (const trickle::invalid_argument& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        } catch (const trickle::error& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
        }
    });

    py::class_<bound_algorithm>(m, "Algorithm")
        .def_property_readonly("kind", &bound_algorithm::kind)
        .def_property_readonly("rank", &bound_algorithm::rank)
        .def_property_readonly("world_size", &bound_algorithm::size)
        .def(
            "step",
            [](bound_algorithm& a) {
                py::gil_scoped_release release;
                a.algo().step();
            },
            "Collective: one step of the algorithm (after optimizer.step()).")
        .def(
            "flush",
            [](bound_algorithm& a) {
                py::gil_scoped_release release;
                a.algo().flush();
            },
            "Applies an overlapped exchange still pending (every worker at the same step).")
        .def("stats", [](const bound_algorithm& a) { return stats_dict(a.algo().stats(stats_part::total)); })
        .def("sparse_stats", [](const bound_algorithm& a) { return stats_dict(a.algo().stats(stats_part::sparse)); })
        .def("outer_stats", [](const bound_algorithm& a) { return stats_dict(a.algo().stats(stats_part::outer)); })
        .def(
            "group_stats",
            [](const bound_algorithm& a, std::size_t group, int part) {
                if (part < 0 || part > 2) throw trickle::invalid_argument("trickle._C: part must be 0, 1 or 2");
                return stats_dict(a.algo().group_stats(group, static_cast<stats_part>(part)));
            },
            py::arg("group"), py::arg("part") = 0)
        .def(
            "aggregation",
            [](const bound_algorithm& a, std::size_t group) { return aggregation_dict(a.algo().aggregation(group)); },
            py::arg("group") = 0)
        .def("set_weight", [](bound_algorithm& a, float w) { a.algo().set_weight(w); }, py::arg("weight"))
        .def("groups", [](const bound_algorithm& a) { return groups_list(a.algo().params()); })
        .def("own_state", [](const bound_algorithm& a) { return a.algo().own_state(); })
        .def("overlap",
             [](const bound_algorithm& a) {
                 const trickle::overlap_plan p = a.algo().overlap();
                 py::dict d;
                 d["sparse_steps"] = p.sparse_steps;
                 d["outer_steps"] = p.outer_steps;
                 return d;
             })
        .def_property_readonly("collectives", &bound_algorithm::collectives)
        .def_property_readonly("on_cuda", &bound_algorithm::on_cuda)
        .def_property_readonly("stages_through_host", &bound_algorithm::stages_through_host)
        .def_property_readonly("elastic", &bound_algorithm::is_elastic)
        .def_property_readonly("worker_id", [](bound_algorithm& a) { return a.is_elastic() ? a.elastic().id() : -1; })
        .def("membership",
             [](const bound_algorithm& a) {
                 const trickle::membership_stats m = a.algo().membership();
                 py::dict d;
                 d["epoch"] = m.epoch;
                 d["workers"] = m.workers;
                 d["quorum"] = m.quorum;
                 d["changes"] = m.changes;
                 d["joined"] = m.joined;
                 d["left"] = m.left;
                 d["joins_refused"] = m.joins_refused;
                 d["rounds_retried"] = m.rounds_retried;
                 d["rounds_below_quorum"] = m.rounds_below_quorum;
                 d["state_bytes"] = m.state_bytes;
                 d["wait_seconds"] = m.wait_seconds;
                 d["transfer_seconds"] = m.transfer_seconds;
                 return d;
             })
        .def("save_bytes",
             [](const bound_algorithm& a) {
                 std::string b;
                 {
                     py::gil_scoped_release release;
                     b = a.algo().save_bytes();
                 }
                 return py::bytes(b);
             })
        .def("load_bytes", [](bound_algorithm& a, const py::bytes& data) {
            std::string b = data; // copied under the GIL
            py::gil_scoped_release release;
            a.algo().load_bytes(b);
        });

    m.def("sparta", &make_sparta, py::arg("group"), py::arg("params"), py::arg("options"));
    m.def("diloco", &make_diloco, py::arg("group"), py::arg("params"), py::arg("options"));
    m.def("elastic", &make_elastic, py::arg("kind"), py::arg("store"), py::arg("id"), py::arg("initial"),
          py::arg("timeout_ms"), py::arg("liveness_ms"), py::arg("job"), py::arg("start_timeout_ms"),
          py::arg("join_timeout_ms"), py::arg("hostname"), py::arg("renew_every"),
          py::arg("store_recovery_ms"), py::arg("carry_name"), py::arg("carry_save"),
          py::arg("carry_load"), py::arg("params"), py::arg("options"));
    m.def("sparta_diloco", &make_sparta_diloco, py::arg("group"), py::arg("params"), py::arg("options"));
    m.def("ddp", &make_ddp, py::arg("group"), py::arg("params"), py::arg("options"));
    bind_demo(m); // trickle.DeMo's engine (demo.cpp)
    // diloco_options::aggregate's text ("mean", "trimmed:K", "median", "clip:TAU") as the
    // library reads it: the rule's name, or ValueError with the library's message.
    m.def(
        "parse_aggregate", [](const std::string& text) { return trickle::aggregate::parse(text).name(); },
        py::arg("text"));
    // The cost model (trickle/algorithm/cost.hpp): the bytes one worker sends in the reports
    // every outer round begins with, for N workers.
    m.def("outer_report_bytes", &trickle::cost::outer_reports, py::arg("workers"));
    m.def("agree", &agree_python, py::arg("group"), py::arg("kind"), py::arg("error"), py::arg("overlaps") = false);
    // What this extension was built with (trickle.build_info()).
    py::dict info;
    info["trickle"] = std::to_string(TRICKLE_VERSION_MAJOR) + "." + std::to_string(TRICKLE_VERSION_MINOR);
    info["torch"] = TORCH_VERSION;
#if TRICKLE_PY_CUDA
    m.attr("has_cuda") = true;
    info["cuda"] = true;
    // The toolkit the engines were compiled with (CUDART_VERSION: 1000 major + 10 minor).
    info["cuda_version"] = std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
    info["cuda_archs"] = std::string(TRICKLE_PY_CUDA_ARCHS);
#else
    m.attr("has_cuda") = false;
    info["cuda"] = false;
    info["cuda_version"] = py::none();
    info["cuda_archs"] = py::none();
#endif
    // trickle's own NCCL communicator is not in the package: over CUDA tensors the bytes go
    // through the trainer's torch.distributed group (NCCL there when its backend is NCCL).
    info["nccl"] = false;
    info["gloo"] = true;
    info["cxx"] = __VERSION__;
    info["cplusplus"] = static_cast<long>(__cplusplus);
    m.attr("build_info") = info;
    m.attr("native_codec") = trickle::codec::native::name;

    // The library's registries of policy names (include/trickle/*/registry.hpp), which the
    // Python layer offers as trickle.SAMPLERS, SCHEDULES, TOPOLOGIES, CODECS and
    // OUTER_OPTIMIZERS, the sparsifiers of DiLoCo's outer gradient (trickle.SPARSIFIERS:
    // common.hpp's list), and the keyword arguments each registered policy takes.
    py::dict registry, policy_options;
    add_family<trickle::sampler::registry>(registry, policy_options, "sampler",
                                           [](auto t) { return sampler_keys<typename decltype(t)::type>(); });
    add_family<trickle::schedule::registry>(registry, policy_options, "schedule",
                                            [](auto t) { return schedule_keys<typename decltype(t)::type>(); });
    add_family<trickle::topology::registry>(registry, policy_options, "topology",
                                            [](auto t) { return topology_keys<typename decltype(t)::type>(); });
    add_family<trickle::codec::registry>(registry, policy_options, "codec",
                                         [](auto t) { return codec_keys<typename decltype(t)::type>(); });
    add_family<trickle::outer::registry>(registry, policy_options, "outer",
                                         [](auto t) { return outer_keys<typename decltype(t)::type>(); });
    add_family<trickle::codec::sparsifier_registry>(registry, policy_options, "sparsifier",
                                    [](auto t) { return sparsifier_keys<typename decltype(t)::type>(); });
    m.attr("registry") = registry;
    // The defaults of the options' plain fields, from the library's list of them
    // (trickle::for_each_option): the Python layer's defaults for those keywords.
    py::dict option_defaults;
    const auto defaults_of = [](const auto& options) {
        py::dict d;
        trickle::for_each_option(options, [&](std::string_view name, const auto& value) {
            d[py::str(std::string(name))] = py::cast(value);
        });
        return d;
    };
    option_defaults["sparta"] = defaults_of(trickle::sparta_options{});
    option_defaults["diloco"] = defaults_of(trickle::diloco_options{});
    const trickle::codec::sparsifier_settings sparse{};
    option_defaults["sparsifier"] = py::dict(py::arg("sparse_chunk") = sparse.chunk, py::arg("sparse_k") = sparse.k,
                                             py::arg("sparse_fraction") = sparse.fraction);
    m.attr("option_defaults") = option_defaults;
    m.attr("policy_options") = policy_options;
}
