"""`python -m dlinspect doctor` under torchrun (docs/distributed.md): 4 ranks on gloo with
--tensor-parallel-size 2, every rank reports (host, pid, device), the all-reduces sum right for
the world and both tensor-parallel groups, exit 0; then 2 ranks where rank 1 never joins
(--test-absent): rank 0 names it after the time limit and the job ends, with a failure status,
instead of hanging.

argv: (ignored: the directory the other torch tests of this kind take)"""
import os
import re
import subprocess
import sys


def torchrun(n, *args):
    env = dict(os.environ)
    env.pop("DLINSPECT_COMMUNICATOR", None)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", str(n), "-m", "dlinspect", "doctor", *args],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=600)


failures = []


def check(cond, what, r):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}\n--- stdout:\n{r.stdout[-3000:]}\n--- stderr:\n{r.stderr[-3000:]}")


r = torchrun(4, "--tensor-parallel-size", "2", "--timeout", "60")
print(r.stdout)
check(r.returncode == 0, f"doctor exited {r.returncode}", r)
check("dlinspect doctor: torch.distributed (gloo), 4 rank(s), time limit 60 s per collective"
      in r.stdout, "no header line", r)
pids = set()
for k in range(4):
    m = re.search(rf"^  rank {k}  host \S+  pid (\d+)  device cpu$", r.stdout, re.M)
    check(m is not None, f"rank {k} did not report", r)
    if m:
        pids.add(m.group(1))
check(len(pids) == 4, f"4 distinct pids expected: {pids}", r)
for group, total in (("world [0-3]", 10), ("tensor-parallel group [0, 1]", 3),
                     ("tensor-parallel group [2, 3]", 7)):
    block = re.search(rf"^  {re.escape(group)}\n((?:    .*\n){{3}})", r.stdout, re.M)
    check(block is not None, f"no block for {group}", r)
    if block:
        lines = block.group(1)
        check(re.search(r"roll call \(all-gather, 128 bytes a rank\) +\d+\.\d{3} ms", lines)
              is not None, f"{group}: no roll call line", r)
        check(re.search(rf"all-reduce \(sum of rank \+ 1 = {total}\) +\d+\.\d{{3}} ms", lines)
              is not None, f"{group}: no all-reduce summing to {total}", r)
        check(re.search(r"barrier +\d+\.\d{3} ms", lines) is not None, f"{group}: no barrier", r)
check(r.stdout.rstrip().endswith("ok: every rank answered"), "no ok line", r)

r = torchrun(2, "--timeout", "3", "--test-absent", "1")
check(r.returncode != 0, "doctor passed with rank 1 absent", r)
check("dlinspect doctor: rank 0: the roll call (all-gather) of group [0, 1] timed out after 3 s: "
      "rank(s) 1 did not join" in r.stderr, "rank 0 did not name rank 1", r)
check("ok: every rank answered" not in r.stdout, "an ok line with a rank absent", r)
for line in r.stderr.splitlines():
    if line.startswith("dlinspect doctor:"):
        print(line)

if failures:
    sys.exit(1)
print("ok")
