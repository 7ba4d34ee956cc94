// tests/support/forwarding_elastic.hpp: an elastic communicator that forwards every call to a
// comm::elastic_local and carries no trainer state (comm::elastic_communicator does not ask
// for one). Tests derive from it to inject a failure into one call (a derived member hides
// the forwarded one), or use it as it is where a communicator without a trainer state is the
// point.
#pragma once

#include <trickle/comm/elastic.hpp>

#include <cstddef>
#include <cstdint>

namespace trickle_test {

struct forwarding_elastic {
    using memory_space = trickle::host_space;
    trickle::comm::elastic_local& c;
    int id() const { return c.id(); }
    std::uint64_t epoch() const { return c.epoch(); }
    int rank() const { return c.rank(); }
    int size() const { return c.size(); }
    trickle::traffic_counters traffic() const { return c.traffic(); }
    void synchronize() {}
    void all_reduce_sum(float* d, std::size_t n) { c.all_reduce_sum(d, n); }
    void all_gather_bytes(const void* s, void* r, std::size_t b) { c.all_gather_bytes(s, r, b); }
    void all_gather(const void* s, void* r, std::size_t b) { c.all_gather(s, r, b); }
    void all_to_all(const void* s, void* r, std::size_t b) { c.all_to_all(s, r, b); }
    void send_recv(const float* s, std::size_t n, int dst, float* r, std::size_t m, int src) {
        c.send_recv(s, n, dst, r, m, src);
    }
    void broadcast(float* d, std::size_t n, int root) { c.broadcast(d, n, root); }
    void barrier() { c.barrier(); }
    trickle::comm::membership_change renew() { return c.renew(); }
    trickle::comm::membership_change join() { return c.join(); }
    void leave() { c.leave(); }
};
static_assert(trickle::comm::elastic_communicator<forwarding_elastic>);

} // namespace trickle_test
