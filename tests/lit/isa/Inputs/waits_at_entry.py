#!/usr/bin/env python3
"""Reads PTX on stdin and checks programmatic dependent launch at every
kernel's entry: each `.entry` issues griddepcontrol.launch_dependents and
griddepcontrol.wait before its first memory access other than a parameter
load. A kernel that touched memory first could read what the kernel before
it on the stream has not finished writing, once the runtime launches it
before that kernel ends. Prints the kernels checked; fails naming the first
that does not."""
import re
import sys

ENTRY = re.compile(r"\.entry\s+(\w+)")
MEMORY = re.compile(r"^\s*(@!?%\w+\s+)?(ld|st|atom|red|cp\.async|prefetch)\.(?!param)")


def main():
    kernels, name, seen = [], None, set()
    for line in sys.stdin.read().splitlines():
        entry = ENTRY.search(line)
        if entry:
            name, seen = entry.group(1), set()
            kernels.append(name)
            continue
        if name is None:
            continue
        for marker in ("griddepcontrol.launch_dependents", "griddepcontrol.wait"):
            if marker in line:
                seen.add(marker)
        if MEMORY.search(line) and "griddepcontrol.wait" not in seen:
            sys.exit("%s: memory access before griddepcontrol.wait: %s" % (name, line.strip()))
        if MEMORY.search(line) and "griddepcontrol.launch_dependents" not in seen:
            sys.exit("%s: no griddepcontrol.launch_dependents before its first access" % name)
    if not kernels:
        sys.exit("no .entry in the input")
    print("waits at entry: " + " ".join(kernels))


if __name__ == "__main__":
    main()
