# scripts/sim_corpus.sh: sourced by the experiment scripts. trickle_sim_and_corpus sets
#   SIM     the trickle-sim binary: $SIM if given, else the Release preset's, built here
#           (installing what the build needs first);
#   CORPUS  the license-text corpus: every license text Debian ships, concatenated in name
#           order (303,076 bytes on Debian 12), written to /tmp/licenses.txt.
trickle_sim_and_corpus() {
    if [ -z "${SIM:-}" ]; then
        source scripts/deps.sh
        trickle_install_deps
        cmake --preset host-release >/dev/null
        cmake --build --preset host-release -j "$(trickle_jobs)" --target trickle-sim >/dev/null
        SIM=build/host-release/examples/sim/trickle-sim
    fi
    CORPUS=/tmp/licenses.txt
    cat /usr/share/common-licenses/* > "$CORPUS"
}
