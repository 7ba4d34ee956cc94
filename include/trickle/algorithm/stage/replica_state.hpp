// trickle/algorithm/stage/replica_state.hpp: a replica's state as named sections, saved,
// loaded, sent to a joiner, hashed, backed up and rolled back by one implementation.
//
// An algorithm describes its state once, at construction, as an ordered list of named
// sections (its counters, a snapshot, an optimizer's state, a sampler's state, an
// error-feedback residual, ...). Each section says how to read its bytes from where the
// algorithm keeps them, how to write them back, how many bytes it must hold, and which of
// the uses below it takes part in:
//
//   saved      the checkpoint (algorithm/checkpoint.hpp's records, in list order)
//   sent       the state a live member sends a joiner (membership's welcome)
//   hashed     the hash every replica must agree on after a welcome (the global state)
//   backed_up  what a round changes before its collectives complete, put back when a
//              peer fails during it
//
// Loading is transactional: every saved section is read and checked into a staged copy,
// the workers agree (every worker throws the same error if any worker's checkpoint is
// bad), and only then is each section applied. The formats are the algorithms' own:
// section names, sizes and order are exactly what each algorithm wrote before this stage
// existed, so older checkpoints load unchanged.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/crc32c.hpp>
#include <trickle/error.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <istream>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The uses of a section (a bit set).
enum section_use : unsigned {
    saved = 1u,
    sent = 2u,
    hashed = 4u,
    backed_up = 8u,
};

// Sections read but not yet applied, by name.
class staged_sections {
public:
    void put(std::string name, std::string bytes) { items_.emplace_back(std::move(name), std::move(bytes)); }
    const std::string& operator[](const std::string& name) const {
        for (const auto& [n, b] : items_)
            if (n == name) return b;
        throw invalid_argument(concat("checkpoint: section '", name, "' was not read")); // a bug, not bad input
    }
    bool has(const std::string& name) const {
        for (const auto& item : items_)
            if (item.first == name) return true;
        return false;
    }
    // A section read straight into its host memory (replica_state::receive), not staged.
    void mark_placed(std::string name) { placed_.push_back(std::move(name)); }
    bool was_placed(const std::string& name) const {
        for (const auto& n : placed_)
            if (n == name) return true;
        return false;
    }
    // A section's bytes as an array of trivially copyable values (its size was checked).
    template <class V>
    std::vector<V> values(const std::string& name) const {
        const std::string& b = (*this)[name];
        std::vector<V> out(b.size() / sizeof(V));
        if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * sizeof(V));
        return out;
    }
    template <class V>
    V value(const std::string& name) const {
        V v{};
        const std::string& b = (*this)[name];
        std::memcpy(&v, b.data(), b.size() < sizeof v ? b.size() : sizeof v);
        return v;
    }

private:
    std::vector<std::pair<std::string, std::string>> items_;
    std::vector<std::string> placed_;
};

// Bytes of a trivially copyable value or array, as a section's content.
template <class V>
std::string bytes_of(const V* data, std::size_t count) {
    return std::string(reinterpret_cast<const char*>(data), count * sizeof(V));
}
template <class V>
std::string bytes_of(const V& v) {
    return bytes_of(&v, 1);
}
template <class V>
void bytes_to(const std::string& b, V* data, std::size_t count) {
    if (count != 0) std::memcpy(data, b.data(), count * sizeof(V));
}

class replica_state {
public:
    // The size a section of any length declares (read as a blob of at most 1 MiB).
    static constexpr std::uint64_t any_size = std::numeric_limits<std::uint64_t>::max();

    struct section {
        std::string name;
        unsigned use = 0;
        std::function<std::string()> read;                          // the bytes as the algorithm holds them now
        std::function<void(const std::string&)> write;              // applies bytes (sized as `size` says)
        std::function<std::uint64_t(const staged_sections&)> size;  // the bytes it must hold, given the sections
                                                                    // read before it (any_size: a blob)
        std::function<void(const staged_sections&)> check = {};     // throws invalid_argument for bad content
        // Optional, for a large section held in host memory (in_host_memory): its bytes where
        // they lie, which read() copies out and write() copies in with nothing else to do, or
        // an empty span. Saves, transfers and hashes read them there instead of a copy, and a
        // transfer is received straight into them (see receive()).
        std::function<std::span<char>()> host = {};
    };

    // `kind`: the checkpoint's kind ("sparta", "diloco", ...); the transfer's is kind + "-transfer".
    explicit replica_state(std::string kind = {}) : kind_(std::move(kind)) {}

    replica_state& add(section s) {
        sections_.push_back(std::move(s));
        return *this;
    }
    // A section of fixed size.
    replica_state& add(std::string name, unsigned use, std::uint64_t bytes, std::function<std::string()> read,
                       std::function<void(const std::string&)> write,
                       std::function<void(const staged_sections&)> check = {}) {
        return add(section{std::move(name), use, std::move(read), std::move(write),
                           [bytes](const staged_sections&) { return bytes; }, std::move(check)});
    }
    // Says that the section added last lies in host memory as `values()` (a span of trivially
    // copyable values), which its read() copies out and its write() copies in, nothing more:
    // saves, transfers and hashes read it where it lies, and a transfer lands there.
    template <class Values>
    replica_state& in_host_memory(Values values) {
        sections_.back().host = [values] {
            const auto v = values();
            return std::span<char>(reinterpret_cast<char*>(v.data()), v.size_bytes());
        };
        return *this;
    }
    // The configuration hash checkpoints and transfers carry (config_record::serialize, fnv1a).
    void set_config_hash(std::uint64_t h) { config_hash_ = h; }

    // The sections a checkpoint holds that are this worker's own, not kept equal on every
    // replica (saved but not hashed: DiLoCo's error-feedback residual, streaming's fragment
    // state), accounting ("stats": the traffic this worker counted) aside. Where there are
    // none, a checkpoint saved by any one worker restores every worker to the same state.
    std::vector<std::string> own_sections() const {
        std::vector<std::string> out;
        for (const section& s : sections_)
            if ((s.use & saved) && !(s.use & hashed) && s.name != "stats") out.push_back(s.name);
        return out;
    }

    // ---- The checkpoint.
    void save(std::ostream& os) const { write(os, kind_, saved); }

    // Collective: reads a checkpoint into staged sections, then every worker agrees on
    // `record` (what the staged state must match across workers; its error set when this
    // worker's checkpoint was bad) and, when every worker's was good, applies them. On any
    // error every worker throws the same one and nothing changes. `extra` checks the
    // staged sections further (throws invalid_argument).
    template <class Comm, class Record, class Extra = std::nullptr_t>
    void load(Comm& comm, std::istream& is, const std::string& source, checkpoint_trailing trailing, Record&& record,
              Extra&& extra = nullptr) {
        std::string err;
        staged_sections st;
        try {
            if (!is) throw invalid_argument("checkpoint: cannot read " + source);
            checkpoint_reader r(is);
            r.header(kind_, config_hash_);
            read_sections(r, saved, st);
            r.finish(trailing);
            if constexpr (!std::is_same_v<std::remove_cvref_t<Extra>, std::nullptr_t>) extra(st);
        } catch (const error& e) {
            err = e.what();
        }
        config_record rec = record(st, err.empty());
        if (!err.empty()) rec.set_error(err);
        agree(comm, rec);
        comm.synchronize();
        apply(saved, st);
    }

    // ---- Membership: the state a live member sends a joiner, and its hash.
    // Writes the transfer (a checkpoint of the sent sections, kind + "-transfer") to os.
    void send(std::ostream& os) const { write(os, kind_ + "-transfer", sent); }
    // Reads a transfer from is and applies it; throws trickle::error when it is refused. A
    // transfer is received by a joiner only, from its constructor: a refused joiner never
    // becomes an object. So the sections that offer a place are read straight into it (no
    // staged copy of a large state); on a refusal they may hold part of the transfer, and the
    // rest of the state is unchanged. `trailing`: as for a checkpoint (a transfer made of
    // several parts reads all but the last with leave).
    void receive(std::istream& is, checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        checkpoint_reader r(is);
        r.header(kind_ + "-transfer", config_hash_);
        staged_sections st;
        read_sections(r, sent, st, true);
        r.finish(trailing);
        apply(sent, st);
    }
    std::uint32_t hash() const {
        std::uint32_t h = 0;
        std::string copy;
        for (const section& s : sections_)
            if (s.use & hashed) {
                const std::span<const char> b = bytes(s, copy);
                h = crc32c(b.data(), b.size(), h);
            }
        return h;
    }

    // ---- A round's backup and rollback.
    void backup() {
        backup_.clear();
        for (const section& s : sections_)
            if (s.use & backed_up) backup_.push_back(s.read());
    }
    void rollback() {
        std::size_t k = 0;
        for (const section& s : sections_)
            if (s.use & backed_up) s.write(backup_.at(k++));
    }

private:
    // A section's bytes: where they lie in host memory, or its read() kept in `copy`.
    static std::span<const char> bytes(const section& s, std::string& copy) {
        if (s.host) {
            const std::span<const char> v = s.host();
            if (!v.empty()) return v;
        }
        copy = s.read();
        return {copy.data(), copy.size()};
    }
    void write(std::ostream& os, const std::string& kind, unsigned use) const {
        checkpoint_writer w(os);
        w.header(kind, config_hash_);
        std::string copy;
        for (const section& s : sections_)
            if (s.use & use) {
                const std::span<const char> b = bytes(s, copy);
                w.section(s.name, b.data(), b.size());
            }
        w.finish();
    }
    // Reads the sections of `use` into st, in order; with in_place, a section in host memory
    // of that size (without a content check) is read straight into it and marked placed.
    void read_sections(checkpoint_reader& r, unsigned use, staged_sections& st, bool in_place = false) const {
        for (const section& s : sections_) {
            if (!(s.use & use)) continue;
            const std::uint64_t bytes = s.size(st);
            if (in_place && s.host && !s.check && bytes != any_size) {
                const std::span<char> to = s.host();
                if (!to.empty() && to.size() == bytes) {
                    r.section(s.name, to.data(), bytes);
                    st.mark_placed(s.name);
                    continue;
                }
            }
            std::string b;
            if (bytes == any_size) {
                b = r.blob(s.name);
            } else {
                b.assign(bytes, '\0');
                r.section(s.name, b.data(), bytes);
            }
            st.put(s.name, std::move(b));
            if (s.check) s.check(st);
        }
    }
    // Writes the staged sections of `use` (those read in place are there already).
    void apply(unsigned use, const staged_sections& st) const {
        for (const section& s : sections_)
            if ((s.use & use) && !st.was_placed(s.name)) s.write(st[s.name]);
    }

    std::string kind_;
    std::uint64_t config_hash_ = 0;
    std::vector<section> sections_;
    std::vector<std::string> backup_;
};

// The sections every engine keeps for its stats, in this order: "stats", saved and backed
// up (a load keeps this object's `initial`, what its own construction sent; `after_write`
// runs after it is written, to mirror the step on the device), and "counters", the step
// and exchange counts a joiner resumes at (`counters_use`: sent, and hashed where the
// replicas must agree on them; `pending`: steps taken but not yet counted, added when sent).
inline void add_stats_sections(replica_state& rs, exchange_stats& stats, unsigned counters_use,
                               const std::uint64_t* pending = nullptr, std::function<void()> after_write = {}) {
    rs.add("stats", saved | backed_up, sizeof(exchange_stats), [&stats] { return bytes_of(stats); },
           [&stats, after_write](const std::string& b) {
               exchange_stats st{};
               bytes_to(b, &st, 1);
               st.initial = stats.initial;
               stats = st;
               if (after_write) after_write();
           });
    rs.add("counters", counters_use, 2 * sizeof(std::uint64_t),
           [&stats, pending] {
               const std::uint64_t c[2] = {stats.steps + (pending ? *pending : 0), stats.exchanges};
               return bytes_of(c, 2);
           },
           [&stats](const std::string& b) {
               std::uint64_t c[2] = {};
               bytes_to(b, c, 2);
               stats.steps = c[0];
               stats.exchanges = c[1];
           });
}

// The membership protocol's state hooks (algorithm/membership.hpp) of an engine whose
// state is a replica_state: what a donor sends, what a joiner applies, the hash every
// replica must agree on, and a round's backup and rollback, written once for every
// engine. Derived may define state_received(), run after a joiner applied a transfer.
template <class Derived>
class replica_hooks {
public:
    config_record elastic_record() const { return elastic_record_; }
    void send_state(std::ostream& os) const { replica_.send(os); }
    void receive_state(std::istream& is, checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        replica_.receive(is, trailing);
        if constexpr (requires(Derived& d) { d.state_received(); }) static_cast<Derived&>(*this).state_received();
    }
    std::uint32_t global_hash() const { return replica_.hash(); }
    // What this worker's checkpoint holds of its own (replica_state::own_sections).
    std::vector<std::string> own_state() const { return replica_.own_sections(); }
    void round_backup() { replica_.backup(); }
    void round_rollback() { replica_.rollback(); }

protected:
    replica_state replica_;
    config_record elastic_record_; // the configuration a joiner must match (over an elastic communicator)
};

} // namespace detail

TRICKLE_NAMESPACE_END
