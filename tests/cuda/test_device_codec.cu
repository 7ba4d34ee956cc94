// Compression on the device, DiLoCo: value codecs (fp8, fp8_block, int8, int4, sign2;
// stochastic rounding; error feedback; codec::any) over N workers on one GPU
// (comm::local_cuda's byte collectives) give exactly the host's replicas; the device's
// error-feedback residual survives a checkpoint; sparsifiers are refused on the device, on
// every worker. SPARTA's codecs are in test_device_codec_sparta.cu, the topologies' links
// in test_device_codec_link.cu (three translation units, so that the CUDA build compiles
// them on both cores).
#include "device_path.hpp"

using namespace device_path;

namespace {

template <class Codec, class O = outer::nesterov>
auto make_coded_diloco(diloco_options o, Codec codec, O outer = {}) {
    return [=](const auto& g, auto& c) {
        diloco_options mine = o;
        mine.weight = 1.0f + 0.5f * static_cast<float>(c.rank());
        return diloco<O, topology::all_reduce, Codec>(g, c, mine, outer, topology::all_reduce{}, codec);
    };
}

} // namespace

TEST_CASE_TEMPLATE("N workers on one GPU give the host's replicas through every value codec: DiLoCo", T, float,
                   trickle::bfloat16) {
    for (int workers : {1, 2, 3}) {
        const auto& layout = odd_layout;
        compare<T>(workers, layout, 6, make_coded_diloco({.interval = 2}, codec::int8_block{}), "diloco int8");
        compare<T>(workers, layout, 6,
                   make_coded_diloco({.interval = 2, .seed = 4, .error_feedback = 0.5, .stochastic_rounding = true},
                                     codec::int8_block{.block_size = 100}),
                   "diloco int8, stochastic rounding, error feedback");
        compare<T>(workers, layout, 6,
                   make_coded_diloco({.interval = 3, .error_feedback = 1.0}, codec::sign2_block{.block_size = 64}),
                   "diloco sign2, error feedback");
        compare<T>(workers, layout, 6,
                   make_coded_diloco({.interval = 2, .seed = 3, .drop_probability = 0.3, .prune_fraction = 0.25},
                                     codec::fp8_e4m3{}),
                   "diloco fp8_e4m3, drops, pruning");
        compare<T>(workers, layout, 4, make_coded_diloco({.interval = 2}, codec::any{codec::int4_block{.symmetric = false}}),
                   "diloco any(int4 min-max)");
        compare<T>(workers, layout, 4, make_coded_diloco({.interval = 2}, codec::fp8_block{}), "diloco fp8_block");
        // The outer optimizer chosen at run time: its rule visited once around the fused passes.
        compare<T>(workers, layout, 4,
                   make_coded_diloco({.interval = 2}, codec::any{codec::int8_block{}}, outer::any(outer::adam{.lr = 0.01})),
                   "diloco any(int8), any(adam)");
    }
}

TEST_CASE("the device's error-feedback residual is part of the checkpoint") {
    // Run A: 4 outer steps straight. Run B: 2 outer steps, a checkpoint, a new object that
    // loads it on the parameters of that moment, 2 more. Without the residual B differs.
    const int workers = 2;
    const std::size_t n = 3001;
    const diloco_options opts{.interval = 1, .error_feedback = 0.8};
    const codec::int4_block c4{.block_size = 50};
    std::vector<std::vector<float>> straight(workers), resumed(workers);
    for (const bool resume : {false, true})
        comm::run_local_cuda(workers, 0, [&](comm::local_cuda& c) {
            const exec::cuda ex{c.stream(), c.device()};
            buffer<float, cuda_space> p(n, ex);
            param_group<float, cuda_space> g;
            g.add("w", p.data(), n);
            const auto step = [&](auto& alg, std::uint64_t s) {
                flat_params<float, cuda_space> f(g, ex);
                for_each_index(ex, n, perturb_body<float>{f.view(), static_cast<std::uint64_t>(c.rank()), s});
                alg.step(ex);
            };
            diloco<outer::nesterov, topology::all_reduce, codec::int4_block> a(g, c, opts, {}, {}, c4);
            step(a, 0);
            step(a, 1);
            if (resume) {
                std::stringstream ckpt;
                a.save(ckpt);
                diloco_options later = opts;
                later.broadcast_initial = false;
                diloco<outer::nesterov, topology::all_reduce, codec::int4_block> b(g, c, later, {}, {}, c4);
                b.load(ckpt);
                step(b, 2);
                step(b, 3);
            } else {
                step(a, 2);
                step(a, 3);
            }
            c.synchronize();
            auto& out = (resume ? resumed : straight)[static_cast<std::size_t>(c.rank())];
            out.resize(n);
            copy_elements<host_space, cuda_space>(out.data(), p.data(), n, ex);
        });
    for (int r = 0; r < workers; ++r)
        CHECK(std::memcmp(straight[static_cast<std::size_t>(r)].data(), resumed[static_cast<std::size_t>(r)].data(),
                          n * sizeof(float)) == 0);
}

TEST_CASE("sparsifiers are refused for device parameters, on every worker, naming the sparsifier") {
    std::vector<std::string> errors(2);
    comm::run_local_cuda(2, 0, [&](comm::local_cuda& c) {
        buffer<float, cuda_space> p(1000);
        param_group<float, cuda_space> g;
        g.add("w", p.data(), 1000);
        try {
            diloco<outer::nesterov, topology::all_reduce, codec::chunk_topk<codec::sign2_block>> d(
                g, c, {.interval = 2}, {}, {}, codec::chunk_topk<codec::sign2_block>{});
        } catch (const invalid_argument& e) {
            errors[static_cast<std::size_t>(c.rank())] = e.what();
        }
    });
    for (const auto& e : errors) {
        CHECK(e.find("sparsifier runs on host parameters") != std::string::npos);
        CHECK(e.find("chunk_topk") != std::string::npos);
    }
}
