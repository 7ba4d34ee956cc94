// trickle/core/config_record.hpp: a configuration as named text fields, which every policy fills in.
//
// Policies (samplers, schedules, topologies, outer optimizers) describe themselves into a
// config_record; the algorithm layer's agree() (algorithm/agreement.hpp) compares the
// records of all workers. The record lives in core so that no policy depends upward on
// the algorithm layer.
//
// Each field has two texts. Its value text, what fields() and serialize() give, is what
// workers compare and what an algorithm hashes into its checkpoints' configuration hash
// (detail::fnv1a(serialize())): numbers in it are written as they always were, with 17
// significant digits, so that checkpoints written by older versions still load. Its shown
// text, shown(i), is what messages print: a floating-point value in its shortest
// round-trip form (0.005 rather than 0.0050000000000000001), anything else as its value
// text.
#pragma once

#include <trickle/config.hpp>
#include <trickle/error.hpp>

#include <cstddef>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// A value as a configuration record's value text: streamed with 17 significant digits.
// This text is hashed into checkpoints; never change it.
template <class V>
std::string record_text(const V& value) {
    std::ostringstream os;
    os.precision(17);
    os << value;
    return os.str();
}

} // namespace detail

// A configuration as ordered (name, value) text fields, plus this rank's own validation
// error (empty when valid).
class config_record {
public:
    config_record() = default;
    explicit config_record(std::string kind) : kind_(std::move(kind)) {}

    template <class V>
    config_record& add(std::string name, const V& value) {
        std::string text = detail::record_text(value);
        std::string shown;
        if constexpr (std::is_floating_point_v<V>) shown = detail::shortest(value);
        return add_text(std::move(name), std::move(text), std::move(shown));
    }

    // A field whose texts the caller built: `text` is compared and hashed, `shown` is what
    // messages print (empty: the same as text). For values that combine numbers, e.g. a
    // schedule's point "step:fraction".
    config_record& add_text(std::string name, std::string text, std::string shown = {}) {
        if (shown == text) shown.clear();
        fields_.emplace_back(std::move(name), std::move(text));
        shown_.push_back(std::move(shown));
        return *this;
    }

    // Every field of `inner`, each name prefixed, with its shown text (a policy that
    // describes a policy it holds: a warmup's `then` schedule, an lr schedule).
    config_record& add_fields(const std::string& prefix, const config_record& inner) {
        for (std::size_t i = 0; i < inner.fields_.size(); ++i)
            add_text(prefix + inner.fields_[i].first, inner.fields_[i].second, inner.shown_[i]);
        return *this;
    }

    // A list compared item by item but not part of the value texts, so not hashed into
    // checkpoints (the layout hash covers it there): when two workers' lists differ, agree()
    // names the first item that differs instead of the field `explains` (say, the model's
    // tensors instead of its layout hash). Items are printed as given; line breaks and the
    // two separator characters the wire uses are replaced by '?'.
    config_record& add_detail(std::string name, std::vector<std::string> items, std::string explains = {}) {
        for (auto& item : items)
            for (char& ch : item)
                if (ch == '\n' || ch == item_separator || ch == part_separator) ch = '?';
        details_.push_back({std::move(name), std::move(explains), std::move(items)});
        return *this;
    }

    struct detail_list {
        std::string name, explains;
        std::vector<std::string> items;
    };
    const std::vector<detail_list>& details() const { return details_; }

    void set_error(std::string message) {
        if (error_.empty()) error_ = std::move(message);
    }

    const std::string& kind() const { return kind_; }
    const std::string& error() const { return error_; }
    const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
    // Field i's value as messages print it (see the top of this file).
    const std::string& shown(std::size_t i) const { return shown_[i].empty() ? fields_[i].second : shown_[i]; }

    // One line per field, then the error: "kind\nname=value\n...\n!error".
    std::string serialize() const {
        std::string s = kind_ + '\n';
        for (const auto& [k, v] : fields_) s += k + '=' + v + '\n';
        s += '!' + error_;
        return s;
    }

    static config_record parse(const std::string& s) {
        config_record rec;
        std::size_t pos = s.find('\n');
        rec.kind_ = s.substr(0, pos);
        while (pos != std::string::npos && pos + 1 < s.size() && s[pos + 1] != '!') {
            const std::size_t end = s.find('\n', pos + 1);
            const std::string line = s.substr(pos + 1, end - pos - 1);
            const std::size_t eq = line.find('=');
            rec.fields_.emplace_back(line.substr(0, eq), eq == std::string::npos ? "" : line.substr(eq + 1));
            pos = end;
        }
        if (pos != std::string::npos && pos + 1 < s.size()) rec.error_ = s.substr(pos + 2);
        rec.shown_.assign(rec.fields_.size(), std::string());
        return rec;
    }

    // What agree() sends between workers: serialize()'s text, then each shown text that
    // differs from its value text, so that a worker can print another's values as that
    // worker would. "<length of serialize()>:<serialize()><index>=<shown>\n...".
    std::string wire() const {
        const std::string body = serialize();
        std::string s = std::to_string(body.size()) + ':' + body;
        for (std::size_t i = 0; i < shown_.size(); ++i)
            if (!shown_[i].empty()) s += std::to_string(i) + '=' + shown_[i] + '\n';
        for (const auto& d : details_) {
            s += '@' + d.name + part_separator + d.explains + part_separator;
            for (std::size_t i = 0; i < d.items.size(); ++i) s += (i ? std::string(1, item_separator) : "") + d.items[i];
            s += '\n';
        }
        return s;
    }

    // Reads wire()'s text. Text that is not in that form (a worker of another version) is
    // read as serialize()'s, without shown texts.
    static config_record from_wire(const std::string& s) {
        const std::size_t colon = s.find(':');
        std::size_t len = 0;
        bool ok = colon != std::string::npos && colon > 0 && colon <= 20;
        for (std::size_t i = 0; ok && i < colon; ++i) {
            ok = s[i] >= '0' && s[i] <= '9';
            len = len * 10 + static_cast<std::size_t>(s[i] - '0');
        }
        if (!ok || len > s.size() - colon - 1) return parse(s);
        config_record rec = parse(s.substr(colon + 1, len));
        std::size_t pos = colon + 1 + len;
        while (pos < s.size()) {
            if (s[pos] == '@') { // a detail list: "@name<part>explains<part>item<item>item...\n"
                const std::size_t end = s.find('\n', pos);
                if (end == std::string::npos) break;
                const std::string line = s.substr(pos + 1, end - pos - 1);
                const std::size_t a = line.find(part_separator), b = line.find(part_separator, a + 1);
                if (a == std::string::npos || b == std::string::npos) break;
                detail_list d{line.substr(0, a), line.substr(a + 1, b - a - 1), {}};
                for (std::size_t from = b + 1; from < line.size();) {
                    std::size_t to = line.find(item_separator, from);
                    if (to == std::string::npos) to = line.size();
                    d.items.push_back(line.substr(from, to - from));
                    from = to + 1;
                }
                rec.details_.push_back(std::move(d));
                pos = end + 1;
                continue;
            }
            const std::size_t eq = s.find('=', pos), end = s.find('\n', pos);
            if (eq == std::string::npos || end == std::string::npos || eq > end) break;
            std::size_t i = 0;
            for (std::size_t k = pos; k < eq; ++k) i = i * 10 + static_cast<std::size_t>(s[k] - '0');
            if (i < rec.shown_.size()) rec.shown_[i] = s.substr(eq + 1, end - eq - 1);
            pos = end + 1;
        }
        return rec;
    }

private:
    static constexpr char item_separator = '\x1f', part_separator = '\x1e';

    std::string kind_;
    std::vector<std::pair<std::string, std::string>> fields_;
    std::vector<std::string> shown_; // per field: its shown text, empty when it is the value text
    std::string error_;
    std::vector<detail_list> details_;
};

TRICKLE_NAMESPACE_END
