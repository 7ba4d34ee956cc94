// trickle/algorithm/checkpoint.hpp: the binary format of algorithm checkpoints.
//
// A checkpoint is a sequence of records, each closed by a checksum:
//
//   header   "TRKLCKPT", u32 format version (3), u64 length + the algorithm's kind,
//            u64 hash of its configuration record, u32 checksum
//   section  u64 length + name, u64 payload size, payload, u32 checksum     (repeated)
//   end      u64 3, "end", u32 checksum
//
// Integers are in the machine's byte order (little-endian on every platform trickle
// builds for). Each checksum is the CRC-32C (core/crc32c.hpp) of every byte of the
// checkpoint from the magic up to it, the stored checksums excepted: it covers its own
// record and, chained, every record before it, so a damaged byte, a truncation, and a
// section spliced in from another checkpoint are all caught, and the first record whose
// checksum fails is the one named in the error. Readers check each record's name, size
// and checksum as they go and hand out nothing unverified; the algorithms read into
// temporaries and apply them only after the whole checkpoint verified on every worker
// (those made of several checkpoints, below, apply part by part and put the applied
// parts back when a later part is refused). A checkpoint written under another
// configuration or layout is refused by the hash. The checksums guard against damage,
// not against deliberate edits: anyone can recompute them.
//
// Trailing bytes: a checkpoint ends with its end record. A top-level load (load_checkpoint,
// load_bytes, Algorithm::load with its default checkpoint_trailing::refuse) requires its
// input to end there and refuses anything after it (an appended or concatenated file),
// before anything is applied. checkpoint_trailing::leave reads one checkpoint out of a
// longer stream and leaves the stream just after its end record: sparta_diloco writes its
// SPARTA and DiLoCo parts as two checkpoints in a row, and a model's algorithm one per
// parameter group; their loads read all but the last part with `leave` and the last with
// the caller's rule.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/config.hpp>
#include <trickle/core/crc32c.hpp>
#include <trickle/error.hpp>

#include <cstdint>
#include <fstream>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// What may follow a checkpoint in the stream it is loaded from.
enum class checkpoint_trailing {
    refuse, // the input must end with the checkpoint: further bytes are an error
    leave,  // the checkpoint is part of a longer stream: stop after its end record
};

namespace detail {

inline constexpr char checkpoint_magic[8] = {'T', 'R', 'K', 'L', 'C', 'K', 'P', 'T'};
// 2: exchange_stats gained `initial`; 3: CRC-32C per record, DiLoCo's counters in a section
inline constexpr std::uint32_t checkpoint_version = 3;
// Kinds and section names are short; a longer length field is damage, not a name.
inline constexpr std::uint64_t checkpoint_name_limit = 256;

inline std::uint64_t fnv1a(const std::string& s) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

// A string read from a file, fit for an error message: in single quotes, non-printable
// bytes, quotes and backslashes escaped as \xNN / \' / \\, at most `limit` bytes shown
// (then "..." and the full length), so a damaged name can neither break the message over
// lines nor flood it.
inline std::string quote_from_file(const std::string& s, std::size_t limit = 64) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out = "'";
    for (std::size_t i = 0; i < s.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '\'' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
        } else {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 0xf];
        }
    }
    out += '\'';
    if (s.size() > limit) out += concat("... (", s.size(), " bytes)");
    return out;
}

// Writes the records; every byte goes through put(), which keeps the running CRC-32C.
class checkpoint_writer {
public:
    explicit checkpoint_writer(std::ostream& os) : os_(os) {}

    void header(const std::string& kind, std::uint64_t config_hash) {
        put(checkpoint_magic, sizeof checkpoint_magic);
        pod(checkpoint_version);
        str(kind);
        pod(config_hash);
        seal();
    }
    // A named array of bytes.
    void section(const std::string& name, const void* data, std::uint64_t bytes) {
        str(name);
        pod(bytes);
        put(data, bytes);
        seal();
    }
    void finish() {
        str("end");
        seal();
        os_.flush();
        if (!os_) throw error("checkpoint: write failed");
    }

private:
    void put(const void* data, std::uint64_t bytes) {
        crc_ = crc32c(data, bytes, crc_);
        os_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    }
    template <class T>
    void pod(const T& v) {
        put(&v, sizeof v);
    }
    void str(const std::string& s) {
        pod(static_cast<std::uint64_t>(s.size()));
        put(s.data(), s.size());
    }
    // Closes a record: its checksum, which is not itself part of the running CRC (a CRC
    // over data followed by its own CRC is a constant, which would break the chain).
    void seal() { os_.write(reinterpret_cast<const char*>(&crc_), sizeof crc_); }

    std::ostream& os_;
    std::uint32_t crc_ = 0;
};

// Reads and verifies the records in the order they were written. Every error is an
// invalid_argument naming the record (the header, a section, the end marker); whatever
// a method returns or fills in has passed its record's checksum.
class checkpoint_reader {
public:
    explicit checkpoint_reader(std::istream& is) : is_(is) {}

    void header(const std::string& kind, std::uint64_t config_hash) {
        char magic[sizeof checkpoint_magic] = {};
        get(magic, sizeof magic, "header");
        if (std::string(magic, sizeof magic) != std::string(checkpoint_magic, sizeof checkpoint_magic))
            throw invalid_argument("checkpoint: not a trickle checkpoint (bad magic)");
        const auto version = pod<std::uint32_t>("header");
        if (version == 1 || version == 2)
            throw invalid_argument(concat("checkpoint: format version ", version,
                                          " (an older trickle's, without checksums, or a damaged header); this build "
                                          "reads format version ", checkpoint_version, " only"));
        if (version != checkpoint_version)
            throw invalid_argument(concat("checkpoint: unknown format version ", version,
                                          " (a damaged header or a newer trickle's checkpoint); this build reads ",
                                          checkpoint_version));
        const std::string k = name("header", "the algorithm's kind");
        const auto h = pod<std::uint64_t>("header");
        verify("header");
        if (k != kind)
            throw invalid_argument(concat("checkpoint: written by ", quote_from_file(k), ", expected '", kind, "'"));
        if (h != config_hash)
            throw invalid_argument("checkpoint: written under a different configuration or parameter layout");
    }
    // Reads section `name` of exactly `bytes` bytes into out (left partly written when
    // it throws: read into a temporary).
    void section(const std::string& name, void* out, std::uint64_t bytes) {
        const std::string where = "section '" + name + "'";
        expect_name(name, where);
        const auto size = pod<std::uint64_t>(where);
        if (size != bytes)
            throw invalid_argument(concat("checkpoint: ", where, " holds ", size, " bytes, expected ", bytes));
        get(out, bytes, where);
        verify(where);
    }
    // Reads a section of any size (at most `limit` bytes).
    std::string blob(const std::string& name, std::uint64_t limit = 1u << 20) {
        const std::string where = "section '" + name + "'";
        expect_name(name, where);
        const auto size = pod<std::uint64_t>(where);
        if (size > limit)
            throw invalid_argument(concat("checkpoint: corrupt (", where, " of ", size, " bytes, at most ", limit,
                                          " expected)"));
        std::string s(size, '\0');
        get(s.data(), size, where);
        verify(where);
        return s;
    }
    // Reads the end record, then applies the trailing-bytes rule.
    void finish(checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        expect_name("end", "end marker");
        verify("end marker");
        if (trailing == checkpoint_trailing::refuse && is_.peek() != std::istream::traits_type::eof())
            throw invalid_argument("checkpoint: unexpected bytes after the end marker (appended data, or more than "
                                   "one checkpoint in the input)");
    }

private:
    void get(void* out, std::uint64_t bytes, const std::string& where) {
        is_.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
        if (!is_) throw invalid_argument("checkpoint: truncated in " + where);
        crc_ = crc32c(out, bytes, crc_);
    }
    template <class T>
    T pod(const std::string& where) {
        T v{};
        get(&v, sizeof v, where);
        return v;
    }
    std::string name(const std::string& where, const char* what) {
        const auto n = pod<std::uint64_t>(where);
        if (n > checkpoint_name_limit)
            throw invalid_argument(concat("checkpoint: corrupt ", where, " (", what, " would be ", n, " bytes long)"));
        std::string s(n, '\0');
        get(s.data(), n, where);
        return s;
    }
    void expect_name(const std::string& expected, const std::string& where) {
        const std::string got = name(where, "its name");
        if (got != expected)
            throw invalid_argument(concat("checkpoint: expected ", where, ", found ",
                                          got.empty() ? std::string("an unnamed section") : "section " + quote_from_file(got)));
    }
    // Checks the checksum that closes the record just read.
    void verify(const std::string& where) {
        std::uint32_t stored = 0;
        is_.read(reinterpret_cast<char*>(&stored), sizeof stored);
        if (!is_) throw invalid_argument("checkpoint: truncated in " + where);
        if (stored != crc_)
            throw invalid_argument(concat("checkpoint: checksum mismatch in ", where, " (the data is damaged)"));
    }

    std::istream& is_;
    std::uint32_t crc_ = 0;
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
// rank throws the same error. The file must end with the checkpoint (bytes appended
// to it are an error). On any error the algorithm is unchanged.
template <class Algorithm>
void load_checkpoint(Algorithm& algo, const std::string& path) {
    std::ifstream is(path, std::ios::binary);
    algo.load(is, "'" + path + "'", checkpoint_trailing::refuse);
}

TRICKLE_NAMESPACE_END
