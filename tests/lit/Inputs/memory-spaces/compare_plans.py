"""Reads print-plan's output for two cases of one graph (stdin, the second with a tensor moved to host
memory and back) and prints what memory-spaces/plan.gmir checks: the second case's planned device peak
(arena_bytes + persistent_bytes) is below the first's, and its host arena is exactly the moved tensor
(the `arena host` slice), aligned."""
import re
import sys

plans = re.findall(r"^plan \{\n(.*?)^\}", sys.stdin.read(), re.M | re.S)
if len(plans) != 2:
    sys.exit(f"expected two plans, got {len(plans)}")


def figure(plan, name):
    match = re.search(r"^\s+" + name + r" (\d+)", plan, re.M)
    if not match:
        sys.exit(f"no {name} in the plan")
    return int(match.group(1))


def peak(plan):
    return figure(plan, "arena_bytes") + figure(plan, "persistent_bytes")


first, second = plans
print(f"case 1: host arena {figure(first, 'host_arena_bytes')}")
if peak(second) < peak(first):
    print("case 2: device peak below case 1's")
else:
    print(f"case 2: device peak {peak(second)} is not below case 1's {peak(first)}")
host = re.findall(r"^\s+(%\S+) arena host \S+ size (\d+)", second, re.M)
aligned = [(name, (int(size) + 255) // 256 * 256) for name, size in host]
if len(aligned) == 1 and aligned[0][1] == figure(second, "host_arena_bytes"):
    print(f"case 2: host arena holds {aligned[0][0]}, its size")
else:
    print(f"case 2: host slices {host}, host arena {figure(second, 'host_arena_bytes')}")
