"""python -m dlinspect doctor: can the ranks of a torchrun job talk? (docs/distributed.md)

    torchrun --nproc_per_node N -m dlinspect doctor [--timeout S] [--tensor-parallel-size T]
             [--backend gloo|nccl]

Every rank joins torch.distributed (unless the caller did), then, for the world and for its
tensor-parallel group (T consecutive ranks, as the config's tensor_parallel_size), does a roll
call (an all-gather of rank, host, pid and device through the calls the statistics reduction
makes, from C with the GIL released), an all-reduce (the backend's own, on its device: the sum of
rank + 1, checked) and a barrier, each timed and each with the time limit. Rank 0 prints the
report. A rank that does not come is named by the others after the time limit; exit status 0 when
every rank answered, 1 otherwise, 2 for bad arguments.
"""

import argparse
import datetime
import os
import socket
import struct
import sys
import time

_WHO = struct.Struct("<ii56s64s")  # rank, pid, host, device
_TIMES = struct.Struct("<iiddd")   # TP group's first rank, its size, three times in ms


class _Failed(Exception):
    pass


def _device_text(device):
    if device.type == "cuda":
        import torch
        return f"cuda:{device.index} ({torch.cuda.get_device_name(device.index)})"
    return str(device)


def _names(ranks, missing):
    return ", ".join(str(ranks[i]) for i in missing) if missing else "?"


def _step(rank, what, ranks, fn, timeout):
    """One timed collective; on failure says on stderr which ranks did not come."""
    from . import Error
    from .distributed import CommError, _ranks_text
    t0 = time.perf_counter()
    try:
        out = fn()
    except (Error, CommError) as e:
        missing = getattr(e, "missing", [])
        code = getattr(e, "code", None)
        timed_out = getattr(e, "timed_out", False) or code == -110  # -ETIMEDOUT
        group = _ranks_text(ranks)
        if timed_out:
            print(f"dlinspect doctor: rank {rank}: the {what} of group {group} timed out after "
                  f"{timeout:g} s: rank(s) {_names(ranks, missing)} did not join: "
                  f"{getattr(e, 'message', str(e))}", file=sys.stderr, flush=True)
        else:
            print(f"dlinspect doctor: rank {rank}: the {what} of group {group} failed"
                  f"{': rank(s) ' + _names(ranks, missing) + ' did not join' if missing else ''}: "
                  f"{getattr(e, 'message', str(e))}", file=sys.stderr, flush=True)
        raise _Failed() from None
    return out, 1e3 * (time.perf_counter() - t0)


def _check_group(comm, ranks, timeout, rank, pg=None):
    """Roll call, all-reduce and barrier over `ranks`: (records, times in ms)."""
    from . import _dlinspect as _c
    me = _WHO.pack(comm.rank, os.getpid(), socket.gethostname().encode()[:55],
                   _device_text(comm.device).encode()[:63])
    members = tuple(ranks)
    raw, t_who = _step(rank, "roll call (all-gather)", members,
                       lambda: _c._comm_allgather(comm, members, me, timeout), timeout)
    who = [_WHO.unpack_from(raw, i * _WHO.size) for i in range(len(members))]
    total, t_sum = _step(rank, "all-reduce", members,
                         lambda: comm.allreduce_sum(comm.group(members), comm.rank + 1, timeout,
                                                    pg),
                         timeout)
    want = float(sum(r + 1 for r in members))
    if total != want:
        print(f"dlinspect doctor: rank {rank}: the all-reduce over {list(members)} gave {total:g}, "
              f"expected {want:g}", file=sys.stderr, flush=True)
        raise _Failed()
    _, t_bar = _step(rank, "barrier", members,
                     lambda: _c._comm_barrier(comm, members, timeout), timeout)
    return who, (t_who, t_sum, t_bar), want


def doctor(timeout=30.0, tensor_parallel_size=1, backend=None, out=None, _test_absent=None):
    """Runs the self-test on this rank (every rank of the job must call it); True when every rank
    answered. Rank 0 writes the report to `out` (sys.stdout)."""
    import torch
    import torch.distributed as dist
    from .distributed import TorchCommunicator, _ranks_text
    out = out or sys.stdout
    made = False
    if not dist.is_initialized():
        if "RANK" not in os.environ or "MASTER_ADDR" not in os.environ:
            raise RuntimeError("dlinspect doctor: not under torchrun (RANK and MASTER_ADDR are "
                               "unset) and torch.distributed is not initialized")
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if "nccl" in backend:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
        made = True
    comm = TorchCommunicator()
    rank, n = comm.rank, comm.size
    if rank == _test_absent:
        return True  # a test's stand-in for a rank that hangs: it never joins
    tp = tensor_parallel_size
    if tp < 1 or n % tp:
        raise ValueError(f"--tensor-parallel-size {tp} does not divide the {n} ranks")
    first = rank - rank % tp
    tp_pg = None
    if 1 < tp < n:
        # The backend's all-reduce needs a process group per TP group: every rank makes all of
        # them, in one order, as torch requires.
        try:
            for f in range(0, n, tp):
                pg = dist.new_group(list(range(f, f + tp)),
                                    timeout=datetime.timedelta(seconds=timeout))
                if f == first:
                    tp_pg = pg
        except Exception as e:
            print(f"dlinspect doctor: rank {rank}: making the tensor-parallel groups failed: "
                  f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}", file=sys.stderr,
                  flush=True)
            return False
    try:
        world = tuple(range(n))
        who, t_world, total = _check_group(comm, world, timeout, rank)
        t_tp = (0.0, 0.0, 0.0)
        if 1 < tp < n:
            _, t_tp, _ = _check_group(comm, tuple(range(first, first + tp)), timeout, rank,
                                      tp_pg)
        # Rank 0 prints every TP group's times: one more gather of the world.
        from . import _dlinspect as _c
        raw, _ = _step(rank, "report (all-gather)", world,
                       lambda: _c._comm_allgather(comm, world, _TIMES.pack(first, tp, *t_tp),
                                                  timeout), timeout)
    except _Failed:
        return False
    if rank == 0:
        w = out.write
        w(f"dlinspect doctor: torch.distributed ({comm.backend}), {n} rank(s), time limit "
          f"{timeout:g} s per collective\n")
        for r, pid, host, dev in who:
            w(f"  rank {r}  host {host.rstrip(bytes(1)).decode()}  pid {pid}  device "
              f"{dev.rstrip(bytes(1)).decode()}\n")

        def times(label, t, size, total):
            w(f"  {label}\n")
            for what, ms in ((f"roll call (all-gather, {_WHO.size} bytes a rank)", t[0]),
                             (f"all-reduce (sum of rank + 1 = {total:g})", t[1]),
                             ("barrier", t[2])):
                w(f"    {what:<44}{ms:9.3f} ms\n")
        times(f"world {_ranks_text(world)}", t_world, n, total)
        if 1 < tp < n:
            for i in range(0, n, tp):
                f, size, *t = _TIMES.unpack_from(raw, i * _TIMES.size)
                times(f"tensor-parallel group {_ranks_text(range(f, f + size))}", t, size,
                      float(sum(r + 1 for r in range(f, f + size))))
        w("ok: every rank answered\n")
        out.flush()
    if made:
        dist.destroy_process_group()
    return True


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m dlinspect doctor",
                                description="Checks that the ranks of a torchrun job can talk.")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="time limit per collective, in seconds (default 30)")
    p.add_argument("--tensor-parallel-size", type=int, default=1,
                   help="also check the groups of this many consecutive ranks")
    p.add_argument("--backend", default=None,
                   help="torch.distributed backend (default: nccl with CUDA, else gloo)")
    p.add_argument("--test-absent", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if not a.timeout > 0 or a.timeout == float("inf"):
        p.error(f"--timeout {a.timeout}: expected a positive number of seconds")
    try:
        ok = doctor(a.timeout, a.tensor_parallel_size, a.backend, _test_absent=a.test_absent)
    except (RuntimeError, ValueError) as e:
        print(str(e), file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    if not ok:
        # A collective that timed out may still hold the backend's threads: leave without
        # waiting for them (the job's other ranks said who did not come).
        os._exit(1)
    return 0
