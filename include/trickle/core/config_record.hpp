// trickle/core/config_record.hpp: a configuration as named text fields, which every policy fills in.
//
// Policies (samplers, schedules, topologies, outer optimizers) describe themselves into a
// config_record; the algorithm layer's agree() (algorithm/agreement.hpp) compares the
// records of all workers. The record lives in core so that no policy depends upward on
// the algorithm layer.
#pragma once

#include <trickle/config.hpp>
#include <trickle/error.hpp>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// A configuration as ordered (name, value) text fields, plus this rank's own validation
// error (empty when valid).
class config_record {
public:
    config_record() = default;
    explicit config_record(std::string kind) : kind_(std::move(kind)) {}

    template <class V>
    config_record& add(std::string name, const V& value) {
        std::ostringstream os;
        os.precision(17);
        os << value;
        fields_.emplace_back(std::move(name), os.str());
        return *this;
    }

    void set_error(std::string message) {
        if (error_.empty()) error_ = std::move(message);
    }

    const std::string& kind() const { return kind_; }
    const std::string& error() const { return error_; }
    const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }

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
        return rec;
    }

private:
    std::string kind_;
    std::vector<std::pair<std::string, std::string>> fields_;
    std::string error_;
};

TRICKLE_NAMESPACE_END
