#!/usr/bin/env python3
"""Reads assembly on stdin and checks that one kernel keeps enough memory
loads in flight: the longest run of `--load` instructions with no `--wait`
between them must be at least `--min`. A kernel that waits for each load
before issuing the next (the combine of the first round) fails it. With
`--ends-at`, only runs that reach an instruction matching it (a barrier,
say) before any wait count: loads issued ahead of that instruction.

Kernels are found by their symbol line (`<name>:` in AMD disassembly, or
`.entry name` in PTX) and end at the next kernel."""
import argparse
import re
import sys


def kernel_lines(text, kernel):
    start = re.compile(r"(<%s>:|\.entry\s+%s\b|^%s:)" % ((re.escape(kernel),) * 3))
    other = re.compile(r"(<\w+>:\s*$|\.entry\s+\w+|^\w+:\s*$)")
    lines, inside = [], False
    for line in text.splitlines():
        if start.search(line):
            inside = True
            continue
        if inside and other.search(line):
            break
        if inside:
            lines.append(line)
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--load", required=True, help="regex of a load")
    parser.add_argument("--wait", required=True, help="regex of an instruction that consumes loads")
    parser.add_argument("--min", type=int, required=True)
    parser.add_argument("--ends-at", help="regex of the instruction a counted run must reach")
    args = parser.parse_args()
    lines = kernel_lines(sys.stdin.read(), args.kernel)
    if not lines:
        sys.exit(f"kernel {args.kernel} not found in the input")
    load, wait = re.compile(args.load), re.compile(args.wait)
    ends_at = re.compile(args.ends_at) if args.ends_at else None
    longest = run = 0
    for line in lines:
        if ends_at and ends_at.search(line):
            longest = max(longest, run)
        if wait.search(line):
            run = 0
        elif load.search(line):
            run += 1
            if not ends_at:
                longest = max(longest, run)
    where = f" before {args.ends_at}" if ends_at else ""
    print(f"{args.kernel}: {longest} loads in flight{where}")
    if longest < args.min:
        sys.exit(f"{args.kernel}: at most {longest} loads in flight{where}, expected at least {args.min}")


if __name__ == "__main__":
    main()
