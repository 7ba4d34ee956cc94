// tests/sim/sim_test_support.hpp: tiny simulator configurations that run in well under a second under sanitizers.
#pragma once

#include "options.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace sim_test {

// A model and corpus small enough for Debug + ASan, still big enough to learn something.
inline trickle_sim::sim_config tiny_config(int workers = 3, int steps = 40) {
    trickle_sim::sim_config c;
    c.workers = workers;
    c.steps = steps;
    c.eval_every = 10;
    c.batch = 8;
    c.lr = 1e-2f;
    c.warmup = 0;
    c.model = {.context = 4, .embed = 4, .hidden = 16, .layers = 1};
    c.corpus_chars = 20'000;
    c.eval_size = 256;
    c.quiet = true;
    return c;
}

// A file under the system temporary folder, removed when the object goes.
class temp_file {
public:
    explicit temp_file(const std::string& name, const std::string& contents = {})
        : path_(std::filesystem::temp_directory_path() /
                ("trickle_sim_test_" + std::to_string(::getpid()) + "_" + name)) {
        if (!contents.empty()) std::ofstream(path_, std::ios::binary) << contents;
    }
    ~temp_file() {
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    temp_file(const temp_file&) = delete;
    temp_file& operator=(const temp_file&) = delete;
    std::string path() const { return path_.string(); }

private:
    std::filesystem::path path_;
};

} // namespace sim_test
