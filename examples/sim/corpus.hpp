// examples/sim/corpus.hpp: the simulator's text: a generated corpus or a file, its vocabulary, held-out split and shards.
#pragma once

#include "options.hpp"
#include "rng.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace trickle_sim {

// Training positions are dealt to workers in sequences of this many consecutive targets.
inline constexpr std::size_t shard_sequence = 64;

namespace detail {

// Draws index k of a list with probability proportional to 1 / (k + 1)^s, as word
// frequencies in natural text fall off.
class zipf {
public:
    zipf(std::size_t n, double s) : cumulative_(n) {
        double sum = 0;
        for (std::size_t k = 0; k < n; ++k) cumulative_[k] = sum += 1.0 / std::pow(static_cast<double>(k + 1), s);
        for (auto& c : cumulative_) c /= sum;
    }
    std::size_t operator()(rng& g) const {
        const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), g.uniform());
        return std::min(static_cast<std::size_t>(it - cumulative_.begin()), cumulative_.size() - 1);
    }

private:
    std::vector<double> cumulative_;
};

// A made-up language with English function words: nouns and verbs inflect for number and
// tense, subjects agree with verbs, verbs prefer certain objects, sentences nest phrases and
// clauses. A character model that learns it has to learn spelling, morphology, agreement
// and punctuation, so its loss curve keeps improving over thousands of steps.
class grammar {
public:
    explicit grammar(std::uint64_t seed) : g_(rng::stream(seed, 0x636f72707573ull)) {
        std::set<std::string> used{"the", "a",   "an",  "every", "some", "many", "two",   "this",
                                   "these", "no", "in", "on",  "under", "with", "near",  "over",
                                   "by",  "from", "and", "but", "because", "while", "so", "that",
                                   "said", "does", "do", "did", "not", "very"};
        auto fresh = [&](int min_syl, int max_syl) {
            while (true) {
                std::string w = word(min_syl, max_syl);
                if (used.insert(w).second) return w;
            }
        };
        for (int i = 0; i < 160; ++i) nouns_.push_back(fresh(1, 3));
        for (int i = 0; i < 90; ++i) verbs_.push_back(fresh(1, 2));
        for (int i = 0; i < 60; ++i) adjectives_.push_back(fresh(1, 3));
        for (int i = 0; i < 25; ++i) adverbs_.push_back(adjectives_[static_cast<std::size_t>(i)] + "ly");
        for (int i = 0; i < 24; ++i) {
            std::string n = fresh(2, 3);
            n[0] = static_cast<char>(n[0] - 'a' + 'A');
            names_.push_back(n);
        }
    }

    // At least `chars` characters of paragraphs (one per line), cut to exactly `chars`.
    std::string text(std::size_t chars) {
        std::string out;
        out.reserve(chars + 512);
        while (out.size() < chars) {
            const int sentences = 3 + static_cast<int>(g_.below(6));
            for (int s = 0; s < sentences; ++s) {
                if (s) out += ' ';
                out += sentence();
            }
            out += '\n';
        }
        out.resize(chars);
        return out;
    }

private:
    std::string word(int min_syl, int max_syl) {
        static constexpr const char* onsets[] = {"b", "br", "c", "ch", "d", "dr", "f", "fl", "g", "gl", "h", "k",
                                                 "l", "m", "n", "p", "pl", "r", "s", "sh", "sk", "st", "t", "th",
                                                 "tr", "v", "w", "z", ""};
        static constexpr const char* vowels[] = {"a", "e", "i", "o", "u", "ai", "ea", "ou", "oo", "ie"};
        static constexpr const char* codas[] = {"", "", "", "n", "r", "s", "t", "l", "nd", "st", "ck", "m", "rk"};
        const int syl = min_syl + static_cast<int>(g_.below(static_cast<std::uint64_t>(max_syl - min_syl + 1)));
        std::string w;
        for (int i = 0; i < syl; ++i) {
            w += onsets[g_.below(std::size(onsets))];
            w += vowels[g_.below(std::size(vowels))];
            if (i + 1 == syl || g_.uniform() < 0.3) w += codas[g_.below(std::size(codas))];
        }
        return w;
    }

    static bool sibilant(const std::string& w) {
        return w.ends_with('s') || w.ends_with("sh") || w.ends_with("ch") || w.ends_with('x') || w.ends_with('z');
    }
    static std::string plural(const std::string& n) { return n + (sibilant(n) ? "es" : "s"); }
    static std::string third_person(const std::string& v) { return v + (sibilant(v) ? "es" : "s"); }
    static std::string past(const std::string& v) { return v + (v.ends_with('e') ? "d" : "ed"); }

    template <class List>
    const std::string& pick(const List& list, const zipf& z) {
        return list[z(g_)];
    }

    // A noun phrase; `plural` tells the verb how to agree. `object_of` >= 0 biases the noun
    // towards the objects that verb prefers.
    std::string noun_phrase(int depth, bool& plural_out, int object_of = -1) {
        if (object_of < 0 && g_.uniform() < 0.15) {
            plural_out = false;
            return pick(names_, name_z_);
        }
        const bool pl = g_.uniform() < 0.35;
        plural_out = pl;
        static constexpr const char* singular_det[] = {"the", "the", "the", "a", "every", "this", "no"};
        static constexpr const char* plural_det[] = {"the", "the", "some", "many", "two", "these", "no"};
        std::string det = pl ? plural_det[g_.below(std::size(plural_det))] : singular_det[g_.below(std::size(singular_det))];
        std::string rest;
        const double a = g_.uniform();
        const int adjectives = a < 0.55 ? 0 : a < 0.9 ? 1 : 2;
        for (int i = 0; i < adjectives; ++i) {
            if (g_.uniform() < 0.1) rest += " very";
            rest += ' ' + pick(adjectives_, adjective_z_);
        }
        std::size_t noun = noun_z_(g_);
        if (object_of >= 0) noun = (static_cast<std::size_t>(object_of) * 13 + object_z_(g_)) % nouns_.size();
        rest += ' ' + (pl ? plural(nouns_[noun]) : nouns_[noun]);
        if (det == "a" && std::string_view("aeiou").find(rest[1]) != std::string_view::npos) det = "an";
        std::string np = det + rest;
        if (depth < 1) {
            const double r = g_.uniform();
            if (r < 0.15) {
                bool ignored = false;
                np += ' ' + std::string(prepositions_[g_.below(std::size(prepositions_))]) + ' ' +
                      noun_phrase(depth + 1, ignored);
            } else if (r < 0.23) {
                np += " that " + verb_phrase(depth + 1, pl, g_.uniform() < 0.3);
            }
        }
        return np;
    }

    std::string verb_phrase(int depth, bool plural_subject, bool past_tense) {
        const std::size_t v = verb_z_(g_);
        const std::string& stem = verbs_[v];
        std::string vp = past_tense ? past(stem) : plural_subject ? stem : third_person(stem);
        if (v % 3 != 0) { // two verbs in three take an object
            bool ignored = false;
            vp += ' ' + noun_phrase(depth + 1, ignored, static_cast<int>(v));
        }
        if (g_.uniform() < 0.2) vp += ' ' + pick(adverbs_, adverb_z_);
        if (depth < 1 && g_.uniform() < 0.12) {
            bool ignored = false;
            vp += ' ' + std::string(prepositions_[g_.below(std::size(prepositions_))]) + ' ' +
                  noun_phrase(depth + 1, ignored);
        }
        return vp;
    }

    std::string clause(bool past_tense) {
        bool pl = false;
        std::string subject = noun_phrase(0, pl);
        return subject + ' ' + verb_phrase(0, pl, past_tense);
    }

    std::string sentence() {
        const bool past_tense = g_.uniform() < 0.3;
        std::string s;
        const double kind = g_.uniform();
        if (kind < 0.1) { // question: do-support keeps the bare stem
            bool pl = false;
            std::string subject = noun_phrase(0, pl);
            const std::size_t v = verb_z_(g_);
            s = std::string(past_tense ? "did" : pl ? "do" : "does") + ' ' + subject + ' ' + verbs_[v];
            if (v % 3 != 0) {
                bool ignored = false;
                s += ' ' + noun_phrase(1, ignored, static_cast<int>(v));
            }
            s += '?';
        } else if (kind < 0.16) { // quoted speech
            s = '"' + clause(past_tense);
            s[1] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[1])));
            s += ",\" said " + pick(names_, name_z_) + '.';
            return s;
        } else {
            s = clause(past_tense);
            if (g_.uniform() < 0.25) s += ", " + std::string(conjunctions_[g_.below(std::size(conjunctions_))]) + ' ' + clause(past_tense);
            s += g_.uniform() < 0.06 ? '!' : '.';
        }
        s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
        return s;
    }

    static constexpr const char* prepositions_[] = {"in", "on", "under", "with", "near", "over", "by", "from"};
    static constexpr const char* conjunctions_[] = {"and", "but", "because", "while", "so"};

    rng g_;
    std::vector<std::string> nouns_, verbs_, adjectives_, adverbs_, names_;
    zipf noun_z_{160, 1.05}, verb_z_{90, 1.05}, adjective_z_{60, 1.0}, adverb_z_{25, 1.0}, name_z_{24, 0.9},
        object_z_{20, 1.2};
};

} // namespace detail

// The generated corpus for a seed: deterministic, `chars` characters long.
inline std::string generate_corpus(std::uint64_t seed, std::size_t chars) {
    return detail::grammar(seed).text(chars);
}

// The bytes of a file; usage_error naming --data when it cannot be opened or read (a read
// error such as /proc/self/mem's is told from the end of the file) or is empty. Reading
// stops a byte past the 4 GiB that make_dataset accepts.
inline std::string read_text_file(const std::string& path) {
    const std::string name = quoted_value(path);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw usage_error("--data: file " + name + " does not exist");
    if (!std::filesystem::is_regular_file(path, ec)) throw usage_error("--data: " + name + " is not a regular file");
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!file) throw usage_error("--data: cannot open " + name + ": " + std::strerror(errno));
    std::string text;
    std::vector<char> buffer(std::size_t{1} << 16);
    while (text.size() <= std::size_t{0xffffffffu}) {
        const std::size_t got = std::fread(buffer.data(), 1, buffer.size(), file.get());
        text.append(buffer.data(), got);
        if (got < buffer.size()) break;
    }
    if (std::ferror(file.get())) throw usage_error("--data: cannot read " + name + ": " + std::strerror(errno));
    if (text.empty()) throw usage_error("--data: " + name + " is empty");
    return text;
}

// A text as token ids (one per distinct byte, in byte order), split into training text
// and a held-out tail, with each worker's training positions.
struct dataset {
    std::string source;                      // "generated (seed S)" or the file name
    std::vector<unsigned char> alphabet;     // token id -> byte
    std::vector<std::uint8_t> tokens;        // the whole text
    std::size_t train_end = 0;               // tokens [0, train_end) train, the rest is held out
    std::vector<std::vector<std::uint32_t>> shards;  // per worker: target positions, each >= context
    std::vector<std::uint32_t> eval_positions;       // held-out target positions (gpt: the last of each window)

    int vocab() const { return static_cast<int>(alphabet.size()); }
};

// The smallest text (in bytes) that prepare_data accepts for these settings.
inline std::size_t minimum_text_size(int workers, int context) {
    const std::size_t C = static_cast<std::size_t>(context);
    const std::size_t need_train = C + shard_sequence * static_cast<std::size_t>(workers);
    for (std::size_t n = std::max<std::size_t>(10 * (C + 1), need_train);; ++n)
        if (n / 10 >= C + 1 && n - n / 10 >= need_train) return n;
}

// Tokenizes, splits and shards a text. Throws usage_error (naming `what`, e.g. "--data
// FILE") when it is too small for the workers and context, or has a single distinct byte.
inline dataset make_dataset(const std::string& text, std::string source, const sim_config& cfg,
                            const std::string& what) {
    // One shard per worker id: --workers, plus the new ids --join brings in.
    const int shards = world_capacity(cfg);
    const std::size_t min = minimum_text_size(shards, cfg.model.context);
    if (text.size() < min)
        throw usage_error(what + ": " + std::to_string(text.size()) + " bytes are too few to shard over " +
                          std::to_string(shards) + " workers with context " +
                          std::to_string(cfg.model.context) + " and a 10% held-out split: need at least " +
                          std::to_string(min));
    if (text.size() > std::size_t{0xffffffffu})
        throw usage_error(what + ": " + std::to_string(text.size()) + " bytes are more than the 4 GiB supported");
    dataset d;
    d.source = std::move(source);
    std::array<int, 256> id{};
    id.fill(-1);
    for (unsigned char c : text) id[c] = 0;
    for (int b = 0; b < 256; ++b)
        if (id[static_cast<std::size_t>(b)] == 0) {
            id[static_cast<std::size_t>(b)] = static_cast<int>(d.alphabet.size());
            d.alphabet.push_back(static_cast<unsigned char>(b));
        }
    if (d.alphabet.size() < 2) throw usage_error(what + ": the text has a single distinct byte; nothing to learn");
    d.tokens.reserve(text.size());
    for (unsigned char c : text) d.tokens.push_back(static_cast<std::uint8_t>(id[c]));

    const std::size_t n = text.size();
    const std::size_t C = static_cast<std::size_t>(cfg.model.context);
    d.train_end = n - n / 10;

    // Training targets [C, train_end) in whole sequences; a partial tail is dropped.
    const std::size_t sequences = (d.train_end - C) / shard_sequence;
    std::vector<std::size_t> order(sequences);
    for (std::size_t s = 0; s < sequences; ++s) order[s] = s;
    if (cfg.shards == shard_mode::iid) {
        rng g = rng::stream(cfg.seed, 0x7368617264ull);
        for (std::size_t i = sequences; i > 1; --i) std::swap(order[i - 1], order[g.below(i)]);
    }
    const auto W = static_cast<std::size_t>(shards);
    d.shards.resize(W);
    for (std::size_t w = 0; w < W; ++w) {
        const std::size_t b = w * sequences / W, e = (w + 1) * sequences / W;
        auto& shard = d.shards[w];
        shard.reserve((e - b) * shard_sequence);
        for (std::size_t s = b; s < e; ++s)
            for (std::size_t k = 0; k < shard_sequence; ++k)
                shard.push_back(static_cast<std::uint32_t>(C + order[s] * shard_sequence + k));
    }

    // Held-out targets start C after the split, so no context reaches into training text.
    const std::size_t first = d.train_end + C, available = n - first;
    if (cfg.model.kind == model_kind::gpt) {
        // The GPT predicts every target of a window: consecutive windows of C targets from
        // the start of the held-out text, enough to cover eval_size targets (or all there are).
        const std::size_t windows =
            std::min((available - 1) / C + 1, (static_cast<std::size_t>(cfg.eval_size) + C - 1) / C);
        d.eval_positions.reserve(windows);
        for (std::size_t k = 0; k < windows; ++k) d.eval_positions.push_back(static_cast<std::uint32_t>(first + k * C));
        return d;
    }
    // The MLP: at most eval_size targets, evenly spaced.
    const std::size_t count = std::min<std::size_t>(available, static_cast<std::size_t>(cfg.eval_size));
    d.eval_positions.reserve(count);
    for (std::size_t k = 0; k < count; ++k)
        d.eval_positions.push_back(static_cast<std::uint32_t>(first + k * available / count));
    return d;
}

// The dataset a configuration asks for: --data FILE, or the generated corpus.
inline dataset prepare_data(const sim_config& cfg) {
    if (!cfg.data_file.empty())
        return make_dataset(read_text_file(cfg.data_file), cfg.data_file, cfg, "--data " + printable(cfg.data_file));
    return make_dataset(generate_corpus(cfg.seed, cfg.corpus_chars),
                        "generated corpus (seed " + std::to_string(cfg.seed) + ", " +
                            std::to_string(cfg.corpus_chars) + " chars)",
                        cfg, "--corpus-chars");
}

} // namespace trickle_sim
