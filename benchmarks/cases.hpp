// benchmarks/cases.hpp: the one list of benchmark cases and byte-counting rules that bench_host and bench_cuda both register.
//
// Names are '/'-separated fields that scripts/bench_tables.py parses:
//   copy/<kind>/<size>                                       the B_copy reference
//   exchange/<op>/<sampler>/<dtype>/p<fraction>/<size>       op: gather, scatter, fused, indices
//   baseline/<kind>/<sampler>/<dtype>/p<fraction>/<size>     kind: index_plain, index_kernel (fused pair)
//   baseline/mask/bernoulli/<dtype>/p<fraction>/<size>       the mask approach (fused pair)
//   diloco/<delta|update_nesterov>/<dtype>/<size>
//   allreduce/local/N<workers>/<floats>                      host only
// Compiled by g++ and by nvcc: plain C++ only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace trickle_bench {

// A transformer-shaped parameter group: token embedding, `layers` blocks of twelve tensors
// (two layer norms, qkv and output projections, a 4x MLP, with biases), a final norm. The
// benchmarks exchange over a real multi-tensor layout, so segment lookups cost what they
// cost in training. Tensors are packed back to back in one allocation, so the flat index
// is also the memory offset and the plain-gather baseline can use one base pointer.
struct model_shape {
    const char* name;
    int d;
    int layers;
    int vocab;
    bool host;  // registered by bench_host
    bool cuda;  // registered by bench_cuda
};

// Host: L2-resident (0.45 MB fp32), last-level-cache-resident (17 MB fp32) and DRAM
// (267 MB fp32, 134 MB bf16: >= 4x a 32 MB L3). CUDA: the same, plus 234M elements
// (>= 4x the 50-60 MB L2 of an H100/H200 in both dtypes).
inline constexpr model_shape shapes[] = {
    {"L2", 64, 2, 256, true, true},
    {"LLC", 256, 4, 4096, true, true},
    {"DRAM", 512, 16, 32000, true, true},
    {"HBM", 1024, 16, 32000, false, true},
};
inline constexpr int shape_count = sizeof(shapes) / sizeof(shapes[0]);

// TRICKLE_BENCH_SMOKE=1 shrinks every shape to a few thousand elements so that the CI
// smoke run executes every case in milliseconds; names stay the same.
inline bool smoke() {
    const char* s = std::getenv("TRICKLE_BENCH_SMOKE");
    return s != nullptr && s[0] != '\0' && s[0] != '0';
}

struct tensor_shape {
    std::string name;
    std::size_t size;
};

inline std::vector<tensor_shape> model_tensors(const model_shape& m) {
    std::size_t d = static_cast<std::size_t>(m.d), layers = static_cast<std::size_t>(m.layers),
                vocab = static_cast<std::size_t>(m.vocab);
    if (smoke()) {
        d = 16;
        layers = 1;
        vocab = 64;
    }
    std::vector<tensor_shape> t;
    t.push_back({"tok_emb", vocab * d});
    for (std::size_t l = 0; l < layers; ++l) {
        const std::string p = "h" + std::to_string(l) + ".";
        t.push_back({p + "ln1.w", d});
        t.push_back({p + "ln1.b", d});
        t.push_back({p + "attn.qkv.w", 3 * d * d});
        t.push_back({p + "attn.qkv.b", 3 * d});
        t.push_back({p + "attn.proj.w", d * d});
        t.push_back({p + "attn.proj.b", d});
        t.push_back({p + "ln2.w", d});
        t.push_back({p + "ln2.b", d});
        t.push_back({p + "mlp.fc1.w", 4 * d * d});
        t.push_back({p + "mlp.fc1.b", 4 * d});
        t.push_back({p + "mlp.fc2.w", 4 * d * d});
        t.push_back({p + "mlp.fc2.b", d});
    }
    t.push_back({"ln_f.w", d});
    t.push_back({"ln_f.b", d});
    return t;
}

inline std::size_t model_elements(const model_shape& m) {
    std::size_t n = 0;
    for (const auto& t : model_tensors(m)) n += t.size;
    return n;
}

enum class sampler_id { uniform, permutation, block, layerwise, rotating };

struct sampler_case {
    sampler_id id;
    std::size_t block_size; // block only
    std::string name() const {
        switch (id) {
        case sampler_id::uniform: return "uniform";
        case sampler_id::permutation: return "permutation";
        case sampler_id::block: return "block" + std::to_string(block_size);
        case sampler_id::layerwise: return "layerwise";
        case sampler_id::rotating: return "rotating";
        }
        return "?";
    }
};

inline const std::vector<sampler_case>& sampler_cases() {
    static const std::vector<sampler_case> s = {
        {sampler_id::uniform, 0},    {sampler_id::permutation, 0}, {sampler_id::block, 32},
        {sampler_id::block, 256},    {sampler_id::block, 1024},    {sampler_id::block, 4096},
        {sampler_id::layerwise, 0},  {sampler_id::rotating, 0},
    };
    return s;
}

inline constexpr double fractions[] = {0.001, 0.005, 0.01, 0.05};

enum class dtype_id { fp32, bf16 };
inline constexpr dtype_id dtypes[] = {dtype_id::fp32, dtype_id::bf16};
inline const char* dtype_name(dtype_id d) { return d == dtype_id::fp32 ? "fp32" : "bf16"; }
inline std::size_t dtype_bytes(dtype_id d) { return d == dtype_id::fp32 ? 4 : 2; }

enum class exchange_op { gather, scatter, fused, indices, index_plain, index_kernel, mask };

inline const char* op_name(exchange_op o) {
    switch (o) {
    case exchange_op::gather: return "gather";
    case exchange_op::scatter: return "scatter";
    case exchange_op::fused: return "fused";
    case exchange_op::indices: return "indices";
    case exchange_op::index_plain: return "index_plain";
    case exchange_op::index_kernel: return "index_kernel";
    case exchange_op::mask: return "mask";
    }
    return "?";
}

inline std::string fraction_name(double p) {
    std::string s = std::to_string(p); // "0.005000"
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    return "p" + s;
}

struct exchange_case {
    exchange_op op;
    sampler_case sampler;
    dtype_id dtype;
    double fraction;
    int shape;

    std::string name() const {
        const std::string tail = std::string(dtype_name(dtype)) + "/" + fraction_name(fraction) + "/" + shapes[shape].name;
        switch (op) {
        case exchange_op::index_plain:
        case exchange_op::index_kernel: return std::string("baseline/") + op_name(op) + "/" + sampler.name() + "/" + tail;
        case exchange_op::mask: return "baseline/mask/bernoulli/" + tail;
        default: return std::string("exchange/") + op_name(op) + "/" + sampler.name() + "/" + tail;
        }
    }
};

// Every exchange case of a backend. Index generation does not depend on the dtype, so it
// is registered for fp32 only; the mask approach does not depend on the sampler.
inline std::vector<exchange_case> exchange_cases(bool cuda) {
    std::vector<exchange_case> out;
    for (int s = 0; s < shape_count; ++s) {
        if (!(cuda ? shapes[s].cuda : shapes[s].host)) continue;
        for (dtype_id d : dtypes)
            for (double p : fractions) {
                for (const sampler_case& sc : sampler_cases())
                    for (exchange_op o : {exchange_op::gather, exchange_op::scatter, exchange_op::fused,
                                          exchange_op::indices, exchange_op::index_plain, exchange_op::index_kernel}) {
                        if (o == exchange_op::indices && d != dtype_id::fp32) continue;
                        out.push_back({o, sc, d, p, s});
                    }
                out.push_back({exchange_op::mask, {sampler_id::uniform, 0}, d, p, s});
            }
    }
    return out;
}

enum class diloco_op { delta, update_nesterov };

struct diloco_case {
    diloco_op op;
    dtype_id dtype;
    int shape;
    std::string name() const {
        return std::string("diloco/") + (op == diloco_op::delta ? "delta" : "update_nesterov") + "/" +
               dtype_name(dtype) + "/" + shapes[shape].name;
    }
    // Bytes per element, all contiguous. delta: read snapshot (4) and params, write the
    // wire (4). update with nesterov: read the wire, snapshot and momentum (4 each), write
    // momentum and snapshot (4 each) and params.
    std::size_t bytes_per_element() const {
        const std::size_t t = dtype_bytes(dtype);
        return op == diloco_op::delta ? 8 + t : 20 + t;
    }
};

inline std::vector<diloco_case> diloco_cases(bool cuda) {
    std::vector<diloco_case> out;
    for (int s = 0; s < shape_count; ++s) {
        if (!(cuda ? shapes[s].cuda : shapes[s].host)) continue;
        for (dtype_id d : dtypes)
            for (diloco_op o : {diloco_op::delta, diloco_op::update_nesterov}) out.push_back({o, d, s});
    }
    return out;
}

// Byte model (docs in benchmarks/README.md). Parameter memory is counted in whole units of
// `line` bytes (64 on a CPU: the cache line; 32 on a GPU: the sector), once per distinct
// unit a selection touches, for reads and writes alike: a random element moves a whole
// unit, and a line-aligned run moves exactly its bytes. The wire buffer, index arrays and
// masks are contiguous: plain bytes. Useful bytes are the payload only: each exchanged
// value's element in the parameters plus its fp32 slot in the wire buffer.
struct byte_model {
    std::size_t line;
};

} // namespace trickle_bench
