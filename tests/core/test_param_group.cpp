// param_group: named tensors as one flat index space, validated on every add.
#include <trickle/core/param_group.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace trickle;

TEST_CASE("param_group: offsets, lookup and flat index") {
    std::vector<float> a(10), b(0), c(7);
    param_group<float> g;
    g.add("a", a.data(), a.size()).add("b", b.data(), 0).add("c", c.data(), c.size());
    CHECK(g.tensor_count() == 3);
    CHECK(g.total_size() == 17);
    CHECK(g.total_bytes() == 68);
    CHECK(g[2].offset == 10);
    CHECK(g.find("c")->view.data() == c.data());
    CHECK(g.find("zz") == nullptr);
    CHECK(g.tensor_of(0) == 0);
    CHECK(g.tensor_of(9) == 0);
    CHECK(g.tensor_of(10) == 2); // the empty tensor holds no index
    CHECK(g.tensor_of(16) == 2);
    CHECK_THROWS_AS(g.tensor_of(17), invalid_argument);
}

TEST_CASE("param_group: initializer list") {
    std::vector<bfloat16> a(3), b(4);
    param_group<bfloat16> g{{"a", a.data(), 3}, {"b", b.data(), 4}};
    CHECK(g.total_size() == 7);
}

TEST_CASE("param_group: layout hash depends on names, sizes and dtype, not on addresses") {
    std::vector<float> a(10), b(5), a2(10), b2(5);
    param_group<float> g1, g2, g3, g4;
    g1.add("a", a.data(), 10).add("b", b.data(), 5);
    g2.add("a", a2.data(), 10).add("b", b2.data(), 5);
    g3.add("a", a2.data(), 10).add("c", b2.data(), 5);
    g4.add("a", a2.data(), 10).add("b", b2.data(), 4);
    CHECK(g1.layout_hash() == g2.layout_hash());
    CHECK(g1.layout_hash() != g3.layout_hash());
    CHECK(g1.layout_hash() != g4.layout_hash());
    std::vector<half> h(10), h2(5);
    param_group<half> gh;
    gh.add("a", h.data(), 10).add("b", h2.data(), 5);
    CHECK(gh.layout_hash() != g1.layout_hash());
}

TEST_CASE("param_group: bad input throws and leaves the group unchanged") {
    std::vector<float> a(10), b(10);
    param_group<float> g;
    g.add("a", a.data(), 10);
    const auto before = g.layout_hash();
    SUBCASE("empty name") { CHECK_THROWS_WITH_AS(g.add("", b.data(), 10), doctest::Contains("name is empty"), invalid_argument); }
    SUBCASE("duplicate name") { CHECK_THROWS_WITH_AS(g.add("a", b.data(), 10), doctest::Contains("duplicate"), invalid_argument); }
    SUBCASE("null pointer with elements") {
        CHECK_THROWS_WITH_AS(g.add("n", nullptr, 3), doctest::Contains("null pointer"), invalid_argument);
    }
    SUBCASE("overlapping memory") {
        CHECK_THROWS_WITH_AS(g.add("o", a.data() + 5, 10), doctest::Contains("overlaps tensor 'a'"), invalid_argument);
        CHECK_THROWS_AS(g.add("o2", a.data() + 9, 1), invalid_argument);
    }
    CHECK(g.tensor_count() == 1);
    CHECK(g.total_size() == 10);
    CHECK(g.layout_hash() == before);
}

TEST_CASE("param_group: adjacent tensors in one allocation are not overlap") {
    std::vector<float> storage(20);
    param_group<float> g;
    g.add("lo", storage.data(), 10);
    CHECK_NOTHROW(g.add("hi", storage.data() + 10, 10));
    CHECK(g.total_size() == 20);
}

#if !TRICKLE_HAS_CUDA
TEST_CASE("param_group: CUDA memory cannot be declared in a build without the CUDA runtime") {
    std::vector<float> a(4);
    param_group<float, cuda_space> g;
    CHECK_THROWS_WITH_AS(g.add("a", a.data(), 4), doctest::Contains("no CUDA runtime"), invalid_argument);
    CHECK(g.tensor_count() == 0);
}
#endif
