#!/usr/bin/env python3
"""Fails when a trickle header includes a header of a higher layer.

The layers, lowest first (docs/concepts.md, "Layers"):
  core      config.hpp, error.hpp, core.hpp, core/
  exec      exec.hpp, exec/
  kernels   kernels.hpp, kernels/ (and the pass families' folders under it)
  comm      comm.hpp, comm/
  policies  sampler, schedule, topology, outer, codec, aggregate (each folder and its umbrella header)
  algorithm algorithm.hpp, algorithm/
  umbrella  trickle.hpp
  adapter   torch.hpp, torch/ (built on the whole library; nothing in it includes them)
A header belongs to the layer of its top folder under include/trickle/, however deep it
sits (kernels/exchange/agent.hpp is in kernels). A header may include its own layer and
the layers below it. Inside the policies layer, each family (sampler, schedule, topology,
outer, codec) includes only itself and the layers below: helpers that several families
use (the Philox stream tags, the Feistel permutation, Philox lanes, fraction counts) live
in core/. The one family that another builds on is named in FAMILY_USES with its reason.
Usage: check_layers.py [include-dir]   (default: include/ beside this script)
"""
import pathlib
import re
import sys

LAYERS = ["core", "exec", "kernels", "comm", "policies", "algorithm", "umbrella", "adapter"]
POLICIES = {"sampler", "schedule", "topology", "outer", "codec", "aggregate"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]trickle/([^>"]+)[>"]', re.M)
# (family, family it may include): why. Every other include between families is refused.
FAMILY_USES = {
    ("outer", "schedule"): "outer::lr_scheduled takes any schedule policy as its learning-rate multiplier",
}


def layer_of(rel: str) -> str:
    """The layer of a header path relative to include/trickle/."""
    top = rel.split("/", 1)[0]
    stem = top[:-4] if top.endswith(".hpp") else top
    if stem in ("config", "error", "core"):
        return "core"
    if stem in POLICIES:
        return "policies"
    if stem == "trickle":
        return "umbrella"
    if stem == "torch":
        return "adapter"
    if stem in LAYERS:
        return stem
    raise SystemExit(f"check_layers: {rel} belongs to no known layer; add it to scripts/check_layers.py")


def family_of(rel: str) -> str:
    """The policy family of a header in the policies layer ("codec" for codec/ and codec.hpp)."""
    top = rel.split("/", 1)[0]
    return top[:-4] if top.endswith(".hpp") else top


def main() -> int:
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "include"
    base = root / "trickle"
    if not base.is_dir():
        print(f"check_layers: no trickle headers under {root}", file=sys.stderr)
        return 2
    bad = []
    sideways = []
    headers = sorted(base.rglob("*.hpp")) + sorted(base.rglob("*.cuh"))
    for path in headers:
        rel = path.relative_to(base).as_posix()
        mine = LAYERS.index(layer_of(rel))
        for m in INCLUDE.finditer(path.read_text()):
            target = m.group(1)
            theirs = LAYERS.index(layer_of(target))
            if theirs > mine:
                bad.append(f"{rel} ({LAYERS[mine]}) includes {target} ({LAYERS[theirs]})")
            elif LAYERS[mine] == "policies" and LAYERS[theirs] == "policies":
                a, b = family_of(rel), family_of(target)
                if a != b and (a, b) not in FAMILY_USES:
                    sideways.append(f"{rel} ({a}) includes {target} ({b})")
    if bad:
        print("check_layers: includes that point up the layer order core -> exec -> kernels -> comm -> "
              "policies -> algorithm:")
        for b in bad:
            print("  " + b)
    if sideways:
        print("check_layers: a policy family includes another (move what both use to core/, or name the "
              "dependency in FAMILY_USES with its reason):")
        for b in sideways:
            print("  " + b)
    if bad or sideways:
        return 1
    print(f"check_layers: {len(headers)} headers, every include points down or stays in its policy family")
    return 0


if __name__ == "__main__":
    sys.exit(main())
