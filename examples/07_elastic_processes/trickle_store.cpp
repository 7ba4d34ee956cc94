// trickle-store: the key-value store an elastic job keeps its view in, as a process of its
// own that outlives every worker (a c10d::TCPStore server, the store torchrun and
// torch.distributed use).
//
//   trickle-store --port 29600            serves until SIGINT or SIGTERM
//   trickle-store --port 0                any free port; the first line printed names it
//
// Workers reach it with comm::connect_store(host, port) (C++) or
// torch.distributed.TCPStore(host, port, is_master=False) (Python).
#include <trickle/torch/elastic_group.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {
std::atomic<bool> stop{false};
void on_signal(int) { stop = true; }
} // namespace

int main(int argc, char** argv) {
    int port = 29600;
    for (int i = 1; i < argc; ++i) {
        const std::string f = argv[i];
        if (f == "--port" && i + 1 < argc) {
            const std::string v = argv[++i];
            char* end = nullptr;
            const long p = std::strtol(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || p < 0 || p > 65535) {
                std::fprintf(stderr, "trickle-store: --port needs a port in [0, 65535], got '%s'\n", v.c_str());
                return 2;
            }
            port = static_cast<int>(p);
        } else {
            std::fprintf(stderr, "trickle-store: unknown option '%s'\nusage: trickle-store [--port P]\n", f.c_str());
            return 2;
        }
    }
    try {
        auto store = trickle::comm::host_store(port);
        std::printf("trickle-store: serving on port %d\n", static_cast<int>(store->getPort()));
        std::fflush(stdout);
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
        while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "trickle-store: %s\n", e.what());
        return 1;
    }
}
