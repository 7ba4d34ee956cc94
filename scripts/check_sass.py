#!/usr/bin/env python3
"""Static check of the CUDA agents' machine code, without a GPU.

Reads the SASS (cuobjdump -sass) of the object compiled from tests/cuda/sass_probe.cu and
the ptxas -v log of that compilation, and requires, for every architecture in the object:

  - the block sampler's tile gather and scatter (fp32, bf16) and the DiLoCo stream passes
    (snapshot, restore, delta, update with nesterov's rule; fp32, and bf16 where present)
    each contain at least one 128-bit global load (LDG.E.128, LDG.E.128.CONSTANT, ...)
    and one 128-bit global store (STG.E.128);
  - none of them touches local memory: "0 bytes spill stores" and "0 bytes spill loads"
    in the ptxas log, and no LDL / STL instruction in the SASS;
  - the encoded all-reduce's warp-cooperative passes of int8_block (encode, sum, decode:
    lane_group_kernel), and the encode and decode of DiLoCo's fused outer step (the outer
    gradient as the source, the update as the sink; fp32 and bf16), touch no local memory
    either (their accesses are 4-byte quads, so no 128-bit access is required of them).

It prints a table of registers (and stack, spills, 128-bit accesses) per kernel and
architecture, for every kernel in the object. Exit status: 0 when everything passes, 1 on
any failure (each one explained), 77 (ctest: skipped) when cuobjdump or nvdisasm cannot be
found; they come from PyPI (scripts/deps.sh installs them when nvcc is present):

    python3 -m pip install --target build/tools/pypi nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm

Usage:
    check_sass.py --object OBJ --ptxas-log LOG [--arch 80 --arch 90]
    check_sass.py --capture LOG -- COMPILER ARGS...   (CMake compiler launcher: runs the
        compile, writes everything it printed to LOG and echoes it)
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYPI_DIR = os.path.join(ROOT, "build", "tools", "pypi")
INSTALL_HINT = (
    "install them from PyPI with\n"
    "    python3 -m pip install --target %s nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm\n"
    "(or run scripts/deps.sh's trickle_install_cuda_tools, which scripts/test.sh calls in its CUDA stage),\n"
    "or put a CUDA toolkit's cuobjdump and nvdisasm on PATH" % PYPI_DIR
)


# ---------------------------------------------------------------- finding the tools

def candidate_dirs():
    """Directories that may hold cuobjdump / nvdisasm, most specific first."""
    dirs = []
    for var in ("TRICKLE_CUDA_TOOLS_DIR",):
        if os.environ.get(var):
            dirs.append(os.environ[var])
    dirs += os.environ.get("PATH", "").split(os.pathsep)
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc:
        dirs.append(os.path.dirname(os.path.realpath(nvcc)))
    # PyPI wheels: nvidia/cu13/bin (CUDA 13), nvidia/cuda_cuobjdump/bin, nvidia/cuda_nvdisasm/bin (CUDA 12).
    roots = [PYPI_DIR] + [p for p in sys.path if p and os.path.isdir(p)]
    for r in roots:
        dirs += sorted(glob.glob(os.path.join(r, "nvidia", "*", "bin")))
    seen, out = set(), []
    for d in dirs:
        if d and d not in seen:
            seen.add(d)
            out.append(d)
    return out


def find_tool(name, override=None):
    if override:
        return override if os.access(override, os.X_OK) else None
    env = os.environ.get("TRICKLE_" + name.upper())
    if env and os.access(env, os.X_OK):
        return env
    for d in candidate_dirs():
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


# ---------------------------------------------------------------- parsing

SASS_ARCH = re.compile(r"^\s*code for (sm_\d+)")
SASS_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
OPCODE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def parse_sass(text):
    """{(arch, mangled name): [opcodes]} from cuobjdump -sass output."""
    funcs, arch, name = {}, None, None
    for line in text.splitlines():
        m = SASS_ARCH.match(line)
        if m:
            arch, name = m.group(1), None
            continue
        m = SASS_FUNC.match(line)
        if m:
            name = m.group(1)
            funcs.setdefault((arch, name), [])
            continue
        if name is None:
            continue
        m = OPCODE.match(line)
        if m:
            funcs[(arch, name)].append(m.group(1))
    return funcs


PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
PTXAS_PROPS = re.compile(r"Function properties for (\S+)")
PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
PTXAS_USED = re.compile(r"Used (\d+) registers")


def parse_ptxas(text):
    """{(arch, mangled name): {'regs', 'stack', 'spill_stores', 'spill_loads'}} from ptxas -v output."""
    out, entry, arch, props = {}, None, None, None
    for line in text.splitlines():
        m = PTXAS_ENTRY.search(line)
        if m:
            entry, arch, props = m.group(1), m.group(2), None
            out.setdefault((arch, entry), {})
            continue
        m = PTXAS_PROPS.search(line)
        if m:
            props = m.group(1)
            continue
        m = PTXAS_FRAME.search(line)
        if m and arch is not None and props is not None:
            rec = out.setdefault((arch, props), {})
            rec["stack"], rec["spill_stores"], rec["spill_loads"] = (int(g) for g in m.groups())
            continue
        m = PTXAS_USED.search(line)
        if m and entry is not None:
            out[(arch, entry)]["regs"] = int(m.group(1))
    return out


# ---------------------------------------------------------------- which kernel is which

PIECES = [("14snapshot_piece", "snapshot"), ("13restore_piece", "restore"), ("11delta_piece", "delta"),
          ("12update_piece", "update")]


def describe(mangled):
    """(family, label) of a kernel from its mangled name; family is None for kernels not checked."""
    dtype = "bf16" if "8bfloat16" in mangled else "fp16" if "4half" in mangled else "fp32"
    if "11tile_kernelILb1E" in mangled:
        return "tile", "tile gather %s" % dtype
    if "11tile_kernelILb0E" in mangled:
        return "tile", "tile scatter %s" % dtype
    if "13stream_kernel" in mangled:
        for key, piece in PIECES:
            if key in mangled:
                rule = ""
                if piece == "update":
                    rule = "<nesterov>" if "13momentum_ruleILb1E" in mangled else "<momentum>" if "13momentum_rule" in mangled else "<rule>"
                return "stream", "stream %s%s %s" % (piece, rule, dtype)
        return "stream", "stream ? %s" % dtype
    if "17lane_group_kernel" in mangled:
        for key, what in (("18encode_slots_lanes", "encode"), ("15sum_slots_lanes", "sum"),
                          ("18decode_slots_lanes", "decode")):
            if key in mangled:
                codec = "int8_block" if "9int_blockILj8E" in mangled else "int4_block" if "9int_blockILj4E" in mangled \
                    else "sign2_block" if "11sign2_block" in mangled else "fp8_block" if "9fp8_block" in mangled else "?"
                fused = "<delta %s>" % dtype if "18outer_delta_source" in mangled else \
                    "<update %s>" % dtype if "17outer_update_sink" in mangled else ""
                return "lanes", "lanes %s%s %s" % (what, fused, codec)
        return "lanes", "lanes ?"
    for key, what in (("13random_kernel", "random"), ("16increment_kernel", "increment"),
                      ("21for_each_index_kernel", "for_each_index")):
        if key in mangled:
            extra = ""
            if what == "random":
                extra = (" gather" if "ILb1E" in mangled else " scatter") + (" u32" if "EjLi" in mangled else " u64")
            return None, "%s%s %s" % (what, extra, dtype)
    return None, mangled[:60]


# What the probe instantiates and the check therefore requires on every architecture.
REQUIRED = ["tile gather fp32", "tile scatter fp32", "tile gather bf16", "tile scatter bf16",
            "stream snapshot fp32", "stream restore fp32", "stream delta fp32", "stream update<nesterov> fp32",
            "lanes encode int8_block", "lanes sum int8_block", "lanes decode int8_block",
            "lanes encode<delta fp32> int8_block", "lanes decode<update fp32> int8_block",
            "lanes encode<delta bf16> int8_block", "lanes decode<update bf16> int8_block"]

# Families whose accesses are narrower than 16 bytes by design (4-byte quads of a codec
# block): they must spill nothing and touch no local memory, but need no 128-bit access.
NARROW = {"lanes"}

WIDE_LOAD = re.compile(r"^LDG(\.[A-Z0-9_]+)*\.128(\.[A-Z0-9_]+)*$")
WIDE_STORE = re.compile(r"^STG(\.[A-Z0-9_]+)*\.128(\.[A-Z0-9_]+)*$")
LOCAL = re.compile(r"^(LDL|STL)(\.|$)")


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {}
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return dict(zip(names, out.splitlines()))


# ---------------------------------------------------------------- modes

def capture(log, cmd):
    """Compiler launcher: run cmd, write what it printed to log, return its status."""
    if not cmd:
        print("check_sass.py --capture: no command after --", file=sys.stderr)
        return 2
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    with open(log, "w") as f:
        f.write(proc.stdout)
    # Echo what is not ptxas's resource report (warnings, errors); the check prints the report.
    for line in proc.stdout.splitlines(keepends=True):
        if proc.returncode != 0 or not (line.startswith("ptxas info") or PTXAS_FRAME.search(line)):
            sys.stdout.write(line)
    return proc.returncode


def check(args):
    if not os.path.isfile(args.object):
        print("check_sass: FAILED: no object file %s (build the target trickle_sass_probe first)" % args.object)
        return 1
    if not os.path.isfile(args.ptxas_log):
        print("check_sass: FAILED: no ptxas log %s (it is written when the probe object is compiled; "
              "delete the object and build trickle_sass_probe again)" % args.ptxas_log)
        return 1
    cuobjdump = find_tool("cuobjdump", args.cuobjdump)
    nvdisasm = find_tool("nvdisasm", args.nvdisasm)
    if not cuobjdump or not nvdisasm:
        missing = " and ".join(n for n, p in (("cuobjdump", cuobjdump), ("nvdisasm", nvdisasm)) if not p)
        print("SKIPPED: check_sass needs %s (not in the CUDA toolkit found here); %s" % (missing, INSTALL_HINT))
        return SKIP
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(nvdisasm) + os.pathsep + env.get("PATH", "")  # cuobjdump -sass runs nvdisasm
    proc = subprocess.run([cuobjdump, "-sass", args.object], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        print("check_sass: FAILED: %s -sass %s exited %d:\n%s" % (cuobjdump, args.object, proc.returncode,
                                                                   proc.stderr.strip()))
        return 1
    sass = parse_sass(proc.stdout)
    with open(args.ptxas_log) as f:
        ptxas = parse_ptxas(f.read())
    print("check_sass: %s (%s), %s" % (cuobjdump, nvdisasm, args.object))

    archs = sorted({a for a, _ in sass})
    wanted = ["sm_%s" % a.replace("sm_", "") for a in args.arch] if args.arch else archs
    failures = []
    for a in wanted:
        if a not in archs:
            failures.append("%s: the object holds no SASS for %s (it has %s)" % (a, a, ", ".join(archs) or "none"))

    rows = []
    seen = {}
    for (arch, name), ops in sorted(sass.items(), key=lambda kv: (kv[0][0], describe(kv[0][1])[1])):
        family, label = describe(name)
        info = ptxas.get((arch, name), {})
        loads = sum(1 for o in ops if WIDE_LOAD.match(o))
        stores = sum(1 for o in ops if WIDE_STORE.match(o))
        local = sorted({o for o in ops if LOCAL.match(o)})
        problems = []
        if family is not None:
            seen.setdefault(arch, set()).add(label)
            if not info or "spill_stores" not in info:
                problems.append("not in the ptxas log %s" % args.ptxas_log)
            else:
                if info["spill_stores"] or info["spill_loads"]:
                    problems.append("%d bytes spill stores, %d bytes spill loads" % (info["spill_stores"],
                                                                                   info["spill_loads"]))
            if loads == 0 and family not in NARROW:
                problems.append("no 128-bit global load (LDG.E.128*)")
            if stores == 0 and family not in NARROW:
                problems.append("no 128-bit global store (STG.E.128*)")
            if local:
                problems.append("local memory instructions %s" % ", ".join(local))
        verdict = "-" if family is None else ("ok" if not problems else "FAIL")
        rows.append((label, arch, info.get("regs", "?"), info.get("stack", "?"),
                     "%s/%s" % (info.get("spill_stores", "?"), info.get("spill_loads", "?")), loads, stores,
                     verdict))
        for p in problems:
            failures.append((arch, label, name, p))

    for a in wanted:
        for label in REQUIRED:
            if label not in seen.get(a, set()):
                failures.append("%s: %s is not in the object (tests/cuda/sass_probe.cu must instantiate it)" % (a, label))

    head = ("kernel", "arch", "registers", "stack", "spill st/ld", "LDG.128", "STG.128", "check")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    fmt = "  ".join("{:<%d}" % w if i == 0 else "{:>%d}" % w for i, w in enumerate(widths))
    print(fmt.format(*head))
    print(fmt.format(*("-" * w for w in widths)))
    for r in rows:
        print(fmt.format(*(str(c) for c in r)))

    checked = sum(1 for r in rows if r[-1] != "-")
    if failures:
        names = demangle(sorted({f[2] for f in failures if isinstance(f, tuple)}))
        print("\ncheck_sass: FAILED (%d problem%s):" % (len(failures), "" if len(failures) == 1 else "s"))
        for f in failures:
            if isinstance(f, tuple):
                arch, label, name, p = f
                print("  %s %s: %s\n      %s" % (arch, label, p, names.get(name, name)))
            else:
                print("  " + f)
        return 1
    print("\ncheck_sass: passed: %d tile, stream and lane-group kernels on %s spill nothing to local memory, and "
          "the tile and stream ones use 128-bit global loads and stores" % (checked, ", ".join(wanted)))
    return 0


def main(argv):
    if "--capture" in argv:
        i = argv.index("--capture")
        if i + 1 >= len(argv) or "--" not in argv:
            print("usage: check_sass.py --capture LOG -- COMPILER ARGS...", file=sys.stderr)
            return 2
        sep = argv.index("--")
        return capture(argv[i + 1], argv[sep + 1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--object", required=True, help="object compiled from tests/cuda/sass_probe.cu")
    ap.add_argument("--ptxas-log", required=True, help="what nvcc -Xptxas=-v printed while compiling it")
    ap.add_argument("--arch", action="append", default=[], help="an architecture that must be present (80, sm_90, ...)")
    ap.add_argument("--cuobjdump", help="path of cuobjdump (default: searched)")
    ap.add_argument("--nvdisasm", help="path of nvdisasm (default: searched)")
    return check(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
