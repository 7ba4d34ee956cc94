#!/usr/bin/env python3
"""docs/simulator.md's table of options against trickle-sim --help, the simulator's own
list (examples/sim/options.hpp): every option the simulator accepts is in the table, every
option in the table is accepted, and where both give a default they give the same one.

    tests/sim/check_docs.py path/to/trickle-sim docs/simulator.md

Registered with ctest as sim_docs (label sim); prints each discrepancy and exits 1.
"""
import re
import subprocess
import sys


def help_options(sim):
    """{--flag: its help text} from trickle-sim --help (an option's entry starts at column 2)."""
    text = subprocess.run([sim, "--help"], check=True, capture_output=True, text=True).stdout
    out, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^  (--[a-z0-9-]+)", line)
        if m:
            current = m.group(1)
            out[current] = line
        elif current and line.startswith("   "):
            out[current] += " " + line.strip()
        else:
            current = None
    return out


def doc_options(path):
    """{--flag: (line number, default cell)} from the table rows | `--flag ARG` | default | ... |."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = re.match(r"^\| `(--[a-z0-9-]+)[^`]*` \|([^|]*)\|", line)
            if m:
                out[m.group(1)] = (number, m.group(2).strip().strip("`").strip())
    return out


def leading(value):
    """The value a default text starts with: '32 (gpt: 4)' and '32; gpt: 4' both give '32'."""
    m = re.match(r"[^\s;(]+", value.strip().strip("`"))
    return m.group(0).rstrip(",:.").lower() if m else ""


def same_default(documented, helped):
    """The table's default is --help's: the same leading value, or a word (like measured)
    that --help's default text uses."""
    d = leading(documented)
    return d == leading(helped) or (d.isalpha() and d in re.findall(r"[a-z]+", helped.lower()))


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    sim, doc = argv[1], argv[2]
    accepted, documented = help_options(sim), doc_options(doc)
    problems = []
    if len(accepted) < 20 or len(documented) < 20:
        problems.append(f"read {len(accepted)} options from --help and {len(documented)} from {doc}: has a format changed?")
    for flag in sorted(set(accepted) - set(documented)):
        problems.append(f"{flag}: trickle-sim accepts it, {doc} has no row for it")
    for flag in sorted(set(documented) - set(accepted)):
        problems.append(f"{doc}:{documented[flag][0]}: {flag} is not an option of trickle-sim")
    compared = 0
    for flag in sorted(set(accepted) & set(documented)):
        m = re.search(r"\(default:? ([^)]*)\)", accepted[flag])
        number, cell = documented[flag]
        if not m or not cell or cell in ("—", "-"):
            continue
        compared += 1
        if not same_default(cell, m.group(1)):
            problems.append(f"{doc}:{number}: {flag} documented with default {cell!r}, --help says {m.group(1)!r}")
    for p in problems:
        print("sim_docs:", p)
    print(f"sim_docs: {len(accepted)} options, {len(documented)} rows, {compared} defaults compared, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
