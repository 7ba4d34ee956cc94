// examples/sim/main.cpp: trickle-sim, train a small language model with simulated workers and compare strategies.
#include "app.hpp"

#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    return trickle_sim::run_cli(args, std::cout, std::cerr);
}
