// trickle/algorithm/agreement.hpp: checks at construction that all workers agree on a configuration.
//
// Workers that disagree about the seed, the fraction or the tensor list would average
// unrelated values without any error. Each algorithm describes its configuration as
// named text fields; agree() gathers every rank's description and throws on every rank,
// naming each field that differs, or the first rank whose own validation failed. All
// ranks always take part in the same two collectives, so a bad rank never hangs the rest.
#pragma once

#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/error.hpp>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// What differs between rank ra's record (rank 0's by default) and rank rb's, as
// "field: rank ra has X, rank rb has Y". Values are printed as their records show them
// (config_record::shown: the shortest form of a number); two different values that would
// print alike are printed as their full value texts.
// The first item where two detail lists differ, as "name: rank ra has K items, rank rb
// has M; the first that differs is item i: rank ra has 'x', rank rb has 'y'" ("" when equal).
inline std::string detail_difference(const config_record::detail_list& a, const config_record::detail_list& b, int rb,
                                     int ra) {
    std::size_t i = 0;
    while (i < a.items.size() && i < b.items.size() && a.items[i] == b.items[i]) ++i;
    if (i == a.items.size() && i == b.items.size()) return {};
    auto item = [](const config_record::detail_list& d, std::size_t k) {
        return k < d.items.size() ? concat("'", d.items[k], "'") : std::string("none (its list ends there)");
    };
    return concat(a.name, ": rank ", ra, " has ", a.items.size(), ", rank ", rb, " has ", b.items.size(),
                  "; the first that differs is number ", i, ": rank ", ra, " has ", item(a, i), ", rank ", rb, " has ",
                  item(b, i));
}

inline std::vector<std::string> record_differences(const config_record& a, const config_record& b, int rb, int ra = 0) {
    std::vector<std::string> out;
    // Detail lists first; a field a differing detail explains is not listed again.
    std::vector<std::string> explained;
    for (const auto& da : a.details())
        for (const auto& db : b.details())
            if (da.name == db.name) {
                std::string d = detail_difference(da, db, rb, ra);
                if (d.empty()) continue;
                out.push_back(std::move(d));
                if (!da.explains.empty()) explained.push_back(da.explains);
            }
    auto is_explained = [&](const std::string& name) {
        for (const auto& e : explained)
            if (e == name) return true;
        return false;
    };
    if (a.kind() != b.kind())
        out.push_back(concat("algorithm: rank ", ra, " has '", a.kind(), "', rank ", rb, " has '", b.kind(), "'"));
    const auto& fa = a.fields();
    const auto& fb = b.fields();
    for (std::size_t i = 0; i < fa.size(); ++i) {
        const auto& [name, va] = fa[i];
        std::size_t j = fb.size();
        for (std::size_t k = 0; k < fb.size(); ++k)
            if (fb[k].first == name) j = k;
        if (j == fb.size()) {
            out.push_back(concat(name, ": rank ", ra, " has ", a.shown(i), ", rank ", rb, " does not set it"));
        } else if (fb[j].second != va && !is_explained(name)) {
            const bool alike = a.shown(i) == b.shown(j);
            out.push_back(concat(name, ": rank ", ra, " has ", alike ? va : a.shown(i), ", rank ", rb, " has ",
                                 alike ? fb[j].second : b.shown(j)));
        }
    }
    for (std::size_t k = 0; k < fb.size(); ++k) {
        bool found = false;
        for (const auto& [na, va] : fa) found = found || na == fb[k].first;
        if (!found) out.push_back(concat(fb[k].first, ": rank ", rb, " has ", b.shown(k), ", rank ", ra, " does not set it"));
    }
    return out;
}

} // namespace detail

namespace detail {

// Collective: every rank's record, in rank order (two all_gather_bytes calls).
template <communicator Comm>
std::vector<config_record> gather_records(Comm& comm, const config_record& mine) {
    const std::string blob = mine.wire();
    const int N = comm.size();
    std::vector<std::uint64_t> lengths(static_cast<std::size_t>(N));
    const std::uint64_t my_len = blob.size();
    comm.all_gather_bytes(&my_len, lengths.data(), sizeof my_len);
    std::uint64_t width = 0;
    for (auto l : lengths) width = l > width ? l : width;
    std::vector<char> padded(width, '\0');
    std::memcpy(padded.data(), blob.data(), blob.size());
    std::vector<char> all(width * static_cast<std::size_t>(N));
    comm.all_gather_bytes(padded.data(), all.data(), width);
    std::vector<config_record> records;
    for (int r = 0; r < N; ++r)
        records.push_back(config_record::from_wire(
            std::string(all.data() + r * width, lengths[static_cast<std::size_t>(r)])));
    return records;
}

} // namespace detail

// Collective: gathers every rank's record. Throws trickle::invalid_argument on every rank
// if any rank reported a validation error (naming the lowest such rank), and
// trickle::mismatch_error on every rank if any field differs from rank 0's.
// Uses host memory; communicators over device memory provide agree_bytes for this.
template <communicator Comm>
void agree(Comm& comm, const config_record& mine) {
    const int N = comm.size();
    const std::vector<config_record> records = detail::gather_records(comm, mine);
    for (int r = 0; r < N; ++r)
        if (!records[r].error().empty())
            throw invalid_argument(N > 1 ? detail::concat("rank ", r, ": ", records[r].error())
                                         : records[r].error());
    std::vector<std::string> diffs;
    for (int r = 1; r < N; ++r)
        for (auto& d : detail::record_differences(records[0], records[r], r)) diffs.push_back(std::move(d));
    if (!diffs.empty()) {
        std::string msg = "workers disagree on the " + mine.kind() + " configuration: ";
        for (std::size_t i = 0; i < diffs.size(); ++i) msg += (i ? "; " : "") + diffs[i];
        throw mismatch_error(msg);
    }
}

TRICKLE_NAMESPACE_END
