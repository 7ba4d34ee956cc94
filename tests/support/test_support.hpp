// Helpers shared by trickle's tests.
#pragma once

#include <trickle/comm/local.hpp>

#include <algorithm>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace trickle_test {

// Rank r's value at index i for sum tests: values over many binades, with signed zeros and
// subnormals, so that the order of the additions shows in the rounded sums.
inline float mixed(int r, std::size_t i) {
    if (i % 97 == 5) return -0.0f;
    if (i % 89 == 3) return std::numeric_limits<float>::denorm_min() * static_cast<float>(r + 1);
    const double base = std::sin(0.37 * static_cast<double>(i) + 1.3 * r) * (1.0 + r) + 1e-3 * r;
    const int e = static_cast<int>((i * 7 + static_cast<std::size_t>(r) * 3) % 13) * 3 - 18;
    return static_cast<float>(std::ldexp(base, e));
}

// Bitwise equality of two arrays (distinguishes -0 from +0 and compares NaN payloads).
template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Runs fn(comm) on `workers` threads over one comm::local_world and collects each
// rank's exception message ("" when the rank returned normally).
template <class Fn>
std::vector<std::string> run_collect_errors(int workers, Fn&& fn) {
    trickle::comm::local_world world(workers);
    std::vector<std::string> errors(static_cast<std::size_t>(workers));
    std::vector<std::thread> threads;
    for (int r = 0; r < workers; ++r)
        threads.emplace_back([&, r] {
            auto c = world.rank(r);
            try {
                fn(c);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    return errors;
}

// Rank r's byte j of the block it sends to rank q.
inline unsigned char block_byte(int r, int q, std::size_t j) {
    return static_cast<unsigned char>((r * 31 + q * 7 + static_cast<int>(j % 251)) & 0xff);
}

// Runs all_gather and all_to_all of `bytes` per block on a byte_communicator over host
// memory (every rank at once) and checks them against their definition and the cost
// model. Returns "" or what is wrong.
template <class Comm>
std::string check_byte_collectives(Comm& c, std::size_t bytes) {
    const int N = c.size(), r = c.rank();
    const auto B = bytes;
    const trickle::traffic_counters before = c.traffic();
    std::vector<unsigned char> send(B * static_cast<std::size_t>(N)), recv(B * static_cast<std::size_t>(N), 0);
    for (int q = 0; q < N; ++q)
        for (std::size_t j = 0; j < B; ++j) send[static_cast<std::size_t>(q) * B + j] = block_byte(r, q, j);
    c.all_to_all(send.data(), recv.data(), B);
    for (int q = 0; q < N; ++q)
        for (std::size_t j = 0; j < B; ++j)
            if (recv[static_cast<std::size_t>(q) * B + j] != block_byte(q, r, j))
                return "all_to_all: wrong byte from rank " + std::to_string(q) + " at " + std::to_string(j);
    std::fill(recv.begin(), recv.end(), 0);
    c.all_gather(send.data(), recv.data(), B); // the first block of every rank's send
    for (int q = 0; q < N; ++q)
        for (std::size_t j = 0; j < B; ++j)
            if (recv[static_cast<std::size_t>(q) * B + j] != block_byte(q, 0, j))
                return "all_gather: wrong byte from rank " + std::to_string(q) + " at " + std::to_string(j);
    const trickle::traffic_counters t = c.traffic() - before;
    const std::uint64_t expect = 2 * static_cast<std::uint64_t>(N - 1) * B;
    if (t.bytes_sent != expect || t.bytes_received != expect || t.calls != 2)
        return "traffic: sent " + std::to_string(t.bytes_sent) + ", expected " + std::to_string(expect);
    return "";
}

} // namespace trickle_test
