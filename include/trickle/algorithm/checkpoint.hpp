// trickle/algorithm/checkpoint.hpp: the binary format of algorithm checkpoints.
//
// A checkpoint is: magic "TRKLCKPT", format version, the algorithm's kind, the hash of
// its configuration record (so a checkpoint written under another configuration or
// layout is refused), then sections of named, sized payloads. Readers check every size
// and name, so a truncated or foreign file is an error, never a partial restore.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>

#include <cstdint>
#include <fstream>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

inline constexpr char checkpoint_magic[8] = {'T', 'R', 'K', 'L', 'C', 'K', 'P', 'T'};
inline constexpr std::uint32_t checkpoint_version = 2; // 2: exchange_stats gained `initial`

inline std::uint64_t fnv1a(const std::string& s) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

class checkpoint_writer {
public:
    explicit checkpoint_writer(std::ostream& os) : os_(os) {}

    void header(const std::string& kind, std::uint64_t config_hash) {
        os_.write(checkpoint_magic, sizeof checkpoint_magic);
        pod(checkpoint_version);
        str(kind);
        pod(config_hash);
    }
    template <class T>
    void pod(const T& v) {
        os_.write(reinterpret_cast<const char*>(&v), sizeof v);
    }
    void str(const std::string& s) {
        pod(static_cast<std::uint64_t>(s.size()));
        os_.write(s.data(), static_cast<std::streamsize>(s.size()));
    }
    // A named array of bytes.
    void section(const std::string& name, const void* data, std::uint64_t bytes) {
        str(name);
        pod(bytes);
        os_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    }
    void finish() {
        str("end");
        os_.flush();
        if (!os_) throw error("checkpoint: write failed");
    }

private:
    std::ostream& os_;
};

class checkpoint_reader {
public:
    explicit checkpoint_reader(std::istream& is) : is_(is) {}

    void header(const std::string& kind, std::uint64_t config_hash) {
        char magic[sizeof checkpoint_magic] = {};
        is_.read(magic, sizeof magic);
        if (!is_ || std::string(magic, sizeof magic) != std::string(checkpoint_magic, sizeof checkpoint_magic))
            throw invalid_argument("checkpoint: not a trickle checkpoint (bad magic)");
        const auto version = pod<std::uint32_t>();
        if (version != checkpoint_version)
            throw invalid_argument(concat("checkpoint: format version ", version, ", this build reads ",
                                          checkpoint_version));
        const std::string k = str();
        if (k != kind) throw invalid_argument("checkpoint: written by '" + k + "', expected '" + kind + "'");
        const auto h = pod<std::uint64_t>();
        if (h != config_hash)
            throw invalid_argument("checkpoint: written under a different configuration or parameter layout");
    }
    template <class T>
    T pod() {
        T v{};
        is_.read(reinterpret_cast<char*>(&v), sizeof v);
        if (!is_) throw invalid_argument("checkpoint: truncated");
        return v;
    }
    std::string str() {
        const auto n = pod<std::uint64_t>();
        if (n > (1u << 20)) throw invalid_argument("checkpoint: corrupt (string too long)");
        std::string s(n, '\0');
        is_.read(s.data(), static_cast<std::streamsize>(n));
        if (!is_) throw invalid_argument("checkpoint: truncated");
        return s;
    }
    // Reads section `name` of exactly `bytes` bytes into out.
    void section(const std::string& name, void* out, std::uint64_t bytes) {
        const std::string got = str();
        if (got != name) throw invalid_argument("checkpoint: expected section '" + name + "', found '" + got + "'");
        const auto size = pod<std::uint64_t>();
        if (size != bytes)
            throw invalid_argument(concat("checkpoint: section '", name, "' holds ", size, " bytes, expected ", bytes));
        is_.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
        if (!is_) throw invalid_argument("checkpoint: truncated in section '" + name + "'");
    }
    // Reads a section of any size (at most `limit` bytes).
    std::string blob(const std::string& name, std::uint64_t limit = 1u << 20) {
        const std::string got = str();
        if (got != name) throw invalid_argument("checkpoint: expected section '" + name + "', found '" + got + "'");
        const auto size = pod<std::uint64_t>();
        if (size > limit) throw invalid_argument("checkpoint: corrupt (section '" + name + "' too large)");
        std::string s(size, '\0');
        is_.read(s.data(), static_cast<std::streamsize>(size));
        if (!is_) throw invalid_argument("checkpoint: truncated in section '" + name + "'");
        return s;
    }
    void finish() {
        if (str() != "end") throw invalid_argument("checkpoint: corrupt (missing end marker)");
    }

private:
    std::istream& is_;
};

} // namespace detail

// Writes an algorithm's state to a file (binary), replacing it; throws trickle::error.
template <class Algorithm>
void save_checkpoint(const Algorithm& algo, const std::string& path) {
    std::ofstream os(path, std::ios::binary | std::ios::trunc);
    if (!os) throw error("checkpoint: cannot open '" + path + "' for writing");
    algo.save(os);
}

// Restores an algorithm's state from a file written by save_checkpoint. Collective,
// like Algorithm::load: a rank that cannot open its file still takes part, so every
// rank throws the same error. On any error the algorithm is unchanged.
template <class Algorithm>
void load_checkpoint(Algorithm& algo, const std::string& path) {
    std::ifstream is(path, std::ios::binary);
    algo.load(is, "'" + path + "'");
}

TRICKLE_NAMESPACE_END
