"""dlinspect.distributed: dlinspect's communicator over torch.distributed (docs/distributed.md).

A `torchrun` job reduces its statistics through the process groups it already has: initialize()
finds torch.distributed initialized and hands the core a TorchCommunicator, whose collectives are
torch.distributed's (gloo: CPU tensors; NCCL: tensors on the current CUDA device). The core calls
it at dli_step only (the extension takes the GIL for it) through the protocol below, which any
Python object may implement:

    rank, size             this process's rank in dlinspect's world, and the world's size
    name                   what the messages call it ("torch")
    group(ranks)           a group of dlinspect ranks (a sorted tuple holding this rank), made by
                           each member alone: no communication
    allgather(g, data, t)  every member's `data` (bytes, the same length on all), concatenated in
                           group order, within t seconds
    barrier(g, t)          returns when every member entered it, within t seconds

A failure raises CommError: `timed_out`, `broken` (the group failed before) and `missing` (the
members, as indexes into the group's ranks, that did not come).
"""

import datetime
import itertools
import time
import zlib


class CommError(RuntimeError):
    """A collective that failed: `timed_out`, `broken` and `missing` say how and who."""

    def __init__(self, message, *, timed_out=False, broken=False, missing=()):
        super().__init__(message)
        self.timed_out, self.broken, self.missing = timed_out, broken, list(missing)


def _ranks_text(ranks):
    if len(ranks) > 2 and list(ranks) == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"[{ranks[0]}-{ranks[-1]}]"
    return "[" + ", ".join(str(r) for r in ranks) + "]"


class _Group:
    __slots__ = ("members", "globals", "broken", "seq", "key", "tag")

    def __init__(self, members, global_ranks, key, tag):
        self.members, self.globals, self.key, self.tag = members, global_ranks, key, tag
        self.broken, self.seq = False, 0


class _TimedOut(Exception):
    pass


# The n-th TorchCommunicator of a process: every rank makes the same sequence of them (one per
# initialize(), one per doctor run), so the n-th ones of all ranks share their arrival counters.
_sessions = itertools.count()


def default_device(backend):
    """Where the collectives' tensors live for a backend: the current CUDA device for NCCL, the
    CPU for gloo (and for a CPU:gloo,CUDA:nccl pair, whose CPU side is gloo)."""
    import torch
    b = str(backend).lower()
    if "nccl" in b and "gloo" not in b:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class TorchCommunicator:
    """dlinspect's collectives over torch.distributed, for the world of `group` (None: the default
    process group). dlinspect's ranks are the ranks within that group.

    dlinspect talks over one process group of its own spanning its world, made by every rank at
    its first collective (the same point of every rank's sequence of new_group calls, which torch
    requires), so its messages never queue behind or match the host's; its timeout is
    dlinspect's time limit. A group's all-gather is sends and receives between the group's members
    alone (batch_isend_irecv, a tag per group on gloo): a group needs no process group of its own,
    which its members alone could not make in an order every rank agrees on. Each member counts in
    the job's store (the default group's) the collectives it entered: when one fails or times
    out, the members whose count is behind are the ones that did not come."""

    name = "torch"

    def __init__(self, group=None):
        import torch
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "dlinspect: torch.distributed is not initialized: call "
                "torch.distributed.init_process_group() before dlinspect.initialize()")
        self._torch, self._dist = torch, dist
        self._pg = group
        self.rank = dist.get_rank(group) if group is not None else dist.get_rank()
        if self.rank < 0:
            raise ValueError("dlinspect: this process is not a member of the process group given "
                             "as comm")
        self.size = dist.get_world_size(group)
        self.global_ranks = (list(dist.get_process_group_ranks(group)) if group is not None
                             else list(range(self.size)))
        self.backend = str(dist.get_backend(group))
        self.device = default_device(self.backend)
        try:
            self._store = dist.distributed_c10d._get_default_store()
        except Exception:  # an older or newer torch: failures then name nobody
            self._store = None
        self._session = next(_sessions)
        self._groups = {}
        self._pg = None  # dlinspect's process group, made at the first collective
        self._pg_failed = None  # why making it failed: no collective is tried again
        # NCCL has no tags; its sends and receives between a pair match in order, which holds
        # (the core enters a step's groups in one order on every rank).
        self._tags = "nccl" not in self.backend.lower() or "gloo" in self.backend.lower()

    def __repr__(self):
        return (f"TorchCommunicator(rank={self.rank}, size={self.size}, backend={self.backend!r}, "
                f"device={self.device})")

    # ---- The protocol ----

    def group(self, ranks):
        members = tuple(int(r) for r in ranks)
        g = self._groups.get(members)
        if g is None:
            if self.rank not in members or any(not 0 <= r < self.size for r in members):
                raise ValueError(f"group {_ranks_text(members)}: expected ranks of "
                                 f"0..{self.size - 1} holding this rank ({self.rank})")
            globals_ = [self.global_ranks[r] for r in members]
            text = ",".join(map(str, globals_)).encode()
            crc = zlib.crc32(text)
            key = f"dlinspect/comm{self._session}/{len(globals_)}-{crc:08x}"
            g = self._groups[members] = _Group(members, globals_, key, 1 + crc % (1 << 20))
        return g

    def allgather(self, g, data, timeout):
        torch = self._torch
        n, size = len(g.members), len(data)

        def run(pg, deadline):
            dist = self._dist
            me = g.members.index(self.rank)
            send = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            if self.device.type != "cpu":
                send = send.to(self.device)
            out = torch.empty(n * size, dtype=torch.uint8, device=self.device)
            out[me * size:(me + 1) * size].copy_(send)
            tag = g.tag if self._tags else 0
            ops = []
            for i, peer in enumerate(g.globals):
                if i != me:
                    ops.append(dist.P2POp(dist.isend, send, peer, group=pg, tag=tag))
                    ops.append(dist.P2POp(dist.irecv, out[i * size:(i + 1) * size], peer,
                                          group=pg, tag=tag))
            # A send's or receive's work says it completed only from wait() (gloo), which takes
            # the time left and releases the GIL.
            for w in dist.batch_isend_irecv(ops) if ops else []:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _TimedOut()
                w.wait(timeout=datetime.timedelta(seconds=left))
            return bytes(out.cpu().untyped_storage())

        return self._collective(g, timeout, run)

    def barrier(self, g, timeout):
        self.allgather(g, b"\1", timeout)

    # ---- Beyond the protocol (dlinspect doctor) ----

    def allreduce_sum(self, g, value, timeout, pg=None):
        """The sum of every member's `value` (a float) through the backend's own all-reduce, on
        its device, within `timeout` seconds, over `pg` (a process group of g's members; None:
        g must be dlinspect's world); failures as allgather's."""
        torch = self._torch

        def run(world_pg, deadline):
            t = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
            work = self._dist.all_reduce(t, group=pg or world_pg, async_op=True)
            self._wait(work, deadline)
            work.wait()
            return float(t.cpu()[0])

        return self._collective(g, timeout, run)

    # ---- Helpers ----

    def _collective(self, g, timeout, run):
        """run(process_group, deadline) as one collective of g, with the time limit, the arrival
        count and the failure's CommError."""
        if g.broken:
            raise CommError(f"group {_ranks_text(g.members)} timed out or failed before: no "
                            "further collectives on it", broken=True)
        if self._pg_failed:
            raise CommError(f"dlinspect's process group could not be made ({self._pg_failed}): "
                            "no collectives", broken=True)
        g.seq += 1
        deadline = time.monotonic() + timeout
        self._arrive(g)
        try:
            if self._pg is None:
                try:
                    self._pg = self._new_group(timeout)
                except Exception as e:
                    first = (str(e).splitlines() or [""])[0][:120]
                    self._pg_failed = f"{type(e).__name__}: {first}"
                    raise
            return run(self._pg, deadline)
        except Exception as e:  # a KeyboardInterrupt goes through: the core fails the step
            g.broken = True
            missing = self._missing(g)
            late = isinstance(e, _TimedOut) or time.monotonic() >= deadline
            n = len(g.members)
            text = (str(e).strip().splitlines() or [""])[0][:200]
            detail = f"{type(e).__name__}: {text}"
            if late:
                who = (f"{len(missing)} of {n} members did not join" if missing
                       else "time limit reached")
                msg = f"{who} within {timeout:g} s"
                if not isinstance(e, _TimedOut):
                    msg += f" ({self.backend}: {detail})"
            else:
                who = f", {len(missing)} of {n} members did not join" if missing else ""
                msg = f"torch.distributed ({self.backend}) failed{who}: {detail}"
            raise CommError(msg, timed_out=late, missing=missing) from None

    def _new_group(self, timeout):
        return self._dist.new_group(self.global_ranks, timeout=datetime.timedelta(seconds=timeout),
                                    use_local_synchronization=True, group_desc="dlinspect")

    @staticmethod
    def _wait(work, deadline):
        # The time limit is dlinspect's, not the backend's: poll, sleeping with the GIL released.
        pause = 5e-5
        while not work.is_completed():
            if time.monotonic() >= deadline:
                raise _TimedOut()
            time.sleep(pause)
            pause = min(2 * pause, 2e-3)

    def _arrive(self, g):
        if self._store is not None:
            try:
                self._store.add(f"{g.key}/{self.rank}", 1)
            except Exception:
                pass

    def _missing(self, g):
        """The members whose arrival count is behind this rank's: they never entered the
        collective that failed."""
        if self._store is None:
            return []
        out = []
        for i, r in enumerate(g.members):
            if r == self.rank:
                continue
            try:
                if self._store.add(f"{g.key}/{r}", 0) < g.seq:
                    out.append(i)
            except Exception:
                return []
        return out
