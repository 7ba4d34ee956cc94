// comm::stream_writer / stream_reader (comm/byte_stream.hpp): a byte stream from one rank to
// chosen ranks, with large writes received in place.
#include <trickle/comm/byte_stream.hpp>
#include <trickle/comm/local.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

using namespace trickle;

namespace {

// A recognisable byte pattern.
std::string pattern(std::size_t n, unsigned seed) {
    std::string s(n, '\0');
    std::uint32_t x = seed * 2654435761u + 1;
    for (auto& c : s) {
        x = x * 1664525u + 1013904223u;
        c = static_cast<char>(x >> 24);
    }
    return s;
}

// The writes of one stream: small ones, large aligned ones, a large one at an odd address,
// and one whose size is not whole floats.
struct writes {
    std::string head = pattern(37, 1);
    std::vector<float> big = std::vector<float>(300000); // 1.2 MB, above stream_direct_bytes
    std::string odd = pattern(detail::stream_direct_bytes + 7, 3);
    std::string mid = pattern(5, 4);
    std::string tail = pattern(100003, 5);
    writes() {
        for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25f;
    }
    std::string all() const {
        return head + std::string(reinterpret_cast<const char*>(big.data()), big.size() * sizeof(float)) + mid +
               odd.substr(1) + tail;
    }
    void write(std::ostream& os) const {
        os.write(head.data(), static_cast<std::streamsize>(head.size()));
        os.write(reinterpret_cast<const char*>(big.data()), static_cast<std::streamsize>(big.size() * sizeof(float)));
        os.write(mid.data(), static_cast<std::streamsize>(mid.size()));
        os.write(odd.data() + 1, static_cast<std::streamsize>(odd.size() - 1)); // not aligned for floats
        os.write(tail.data(), static_cast<std::streamsize>(tail.size()));
    }
};

} // namespace

TEST_CASE("byte stream: the receivers read every byte, in place or through the buffer; the others move nothing") {
    const writes w;
    const std::string expect = w.all();
    for (int N : {1, 2, 3, 4}) {
        for (int root : {0, N - 1}) {
            std::vector<char> receives(static_cast<std::size_t>(N));
            for (int r = 0; r < N; ++r) receives[static_cast<std::size_t>(r)] = r % 2 == 1 || r == N - 1;
            std::vector<std::string> got(static_cast<std::size_t>(N));
            std::vector<std::vector<float>> big(static_cast<std::size_t>(N));
            std::vector<std::uint64_t> bytes(static_cast<std::size_t>(N)), received(static_cast<std::size_t>(N));
            comm::run_local(N, [&](comm::local& c) {
                const auto me = static_cast<std::size_t>(c.rank());
                if (c.rank() == root) {
                    comm::stream_writer<comm::local> out(c, root, receives);
                    std::ostream os(&out);
                    w.write(os);
                    out.finish();
                    bytes[me] = out.bytes();
                } else {
                    const auto before = c.traffic().bytes_received;
                    comm::stream_reader<comm::local> in(c, root, receives);
                    if (receives[me]) {
                        std::istream is(&in);
                        // The head, then the large write straight into a float array of its
                        // own (in place), then the rest in odd pieces through the buffer.
                        std::string head(w.head.size(), '\0');
                        is.read(head.data(), static_cast<std::streamsize>(head.size()));
                        big[me].assign(w.big.size(), -1.0f);
                        is.read(reinterpret_cast<char*>(big[me].data()),
                                static_cast<std::streamsize>(big[me].size() * sizeof(float)));
                        std::string rest;
                        char buf[4097];
                        while (is.read(buf, sizeof buf) || is.gcount() > 0)
                            rest.append(buf, static_cast<std::size_t>(is.gcount()));
                        got[me] = head + rest;
                    }
                    in.drain();
                    bytes[me] = in.bytes();
                    received[me] = c.traffic().bytes_received - before;
                }
            });
            const std::size_t big_bytes = w.big.size() * sizeof(float);
            for (int r = 0; r < N; ++r) {
                CAPTURE(N);
                CAPTURE(root);
                CAPTURE(r);
                const auto i = static_cast<std::size_t>(r);
                CHECK(bytes[i] == expect.size());
                if (r == root) continue;
                if (receives[i]) {
                    CHECK(big[i] == w.big);
                    CHECK(got[i] == expect.substr(0, w.head.size()) + expect.substr(w.head.size() + big_bytes));
                } else {
                    // Only the small bytes (and the headers) reach a rank that does not receive.
                    CHECK(received[i] < 2 * detail::stream_direct_bytes);
                }
            }
        }
    }
}

TEST_CASE("byte stream: rest() returns the whole stream, drain() ends it early; an empty stream") {
    const writes w;
    for (bool empty : {false, true}) {
        std::vector<std::string> got(3);
        comm::run_local(3, [&](comm::local& c) {
            const std::vector<char> receives{1, 1, 1};
            if (c.rank() == 1) {
                comm::stream_writer<comm::local> out(c, 1, receives);
                std::ostream os(&out);
                if (!empty) w.write(os);
                out.finish();
                CHECK_THROWS_AS(out.finish(), invalid_argument);
            } else {
                comm::stream_reader<comm::local> in(c, 1, receives);
                if (c.rank() == 0) {
                    got[0] = in.rest();
                } else {
                    // Reads a few bytes, then stops: drain() keeps the collectives matched.
                    std::istream is(&in);
                    char b[3] = {};
                    is.read(b, 3);
                    got[2] = std::string(b, static_cast<std::size_t>(is.gcount()));
                    in.drain();
                }
            }
        });
        CHECK(got[0] == (empty ? std::string() : w.all()));
        CHECK(got[2] == (empty ? std::string() : w.all().substr(0, 3)));
    }
}

TEST_CASE("byte stream: a rank that does not receive cannot read; it drains") {
    std::string seen = "unset";
    comm::run_local(2, [&](comm::local& c) {
        const std::vector<char> receives{0, 0};
        const std::string data = pattern(100000, 6);
        if (c.rank() == 0) {
            comm::stream_writer<comm::local> out(c, 0, receives);
            out.sputn(data.data(), static_cast<std::streamsize>(data.size()));
            out.finish();
        } else {
            comm::stream_reader<comm::local> in(c, 0, receives);
            CHECK_THROWS_WITH_AS(in.rest(), doctest::Contains("does not receive"), invalid_argument);
            std::istream is(&in);
            char b[4] = {};
            is.read(b, 4);
            CHECK(is.bad());
            in.drain();
            seen = std::to_string(in.bytes());
        }
    });
    CHECK(seen == "100000");
}

TEST_CASE("byte stream: a root or receiver set that does not fit the communicator is refused") {
    comm::run_local(2, [&](comm::local& c) {
        CHECK_THROWS_AS(comm::stream_writer<comm::local>(c, 2, std::vector<char>{1, 1}), invalid_argument);
        CHECK_THROWS_AS(comm::stream_reader<comm::local>(c, 0, std::vector<char>{1}), invalid_argument);
        CHECK_THROWS_AS(comm::stream_reader<comm::local>(c, -1, std::vector<char>{1, 1}), invalid_argument);
    });
}
