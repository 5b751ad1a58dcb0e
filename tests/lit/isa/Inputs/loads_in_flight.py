#!/usr/bin/env python3
"""Reads assembly on stdin and checks that one kernel keeps enough memory
loads in flight: the longest run of `--load` instructions with no `--wait`
between them must be at least `--min`. A kernel that waits for each load
before issuing the next (the combine of the first round) fails it.

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
    args = parser.parse_args()
    lines = kernel_lines(sys.stdin.read(), args.kernel)
    if not lines:
        sys.exit(f"kernel {args.kernel} not found in the input")
    load, wait = re.compile(args.load), re.compile(args.wait)
    longest = run = 0
    for line in lines:
        if wait.search(line):
            run = 0
        elif load.search(line):
            run += 1
            longest = max(longest, run)
    print(f"{args.kernel}: {longest} loads in flight")
    if longest < args.min:
        sys.exit(f"{args.kernel}: at most {longest} loads in flight, expected at least {args.min}")


if __name__ == "__main__":
    main()
