// The doctest entry point of CUDA test binaries: runs the suites when a CUDA device is
// present, and otherwise says so and exits 77, which ctest reports as "Skipped".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
    int devices = 0;
    const cudaError_t rc = cudaGetDeviceCount(&devices);
    if (rc != cudaSuccess || devices == 0) {
        std::printf("SKIPPED: no CUDA device on this machine (%s); the CUDA tests in %s were compiled "
                    "but not run\n",
                    rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices", argc > 0 ? argv[0] : "?");
        return 77;
    }
    doctest::Context context;
    context.applyCommandLine(argc, argv);
    return context.run();
}
