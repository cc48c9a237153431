"""Free-capacity index and gang placement (pure).

Nodes are grouped into pools by (resource type, GPU type). Inside a pool, schedulable nodes
sit in buckets by their number of free GPUs, each bucket ordered by preference, so "the
tightest node with at least g free GPUs" and "the largest free block" are found by walking
at most one bucket per distinct free count (9 for 8-GPU nodes) instead of scanning every
node for every job. The index is mutable working state private to one `plan()` call.

Placement rule (docs/scheduling.md: gang, pack, don't fragment whole nodes):
- all workers of a job are placed or none (`find` chooses without changing anything);
- as few nodes as possible: while no single node can host the remaining workers, take the
  node that hosts the most of them;
- best fit: the node that hosts the rest is the one with the fewest free GPUs that still
  fits, partly used nodes before untouched ones, then by natural name order;
- GPU indices lowest first.
"""

import re
from bisect import insort
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from policy.scheduler.model import NodeSnap, Placement, PoolKey

type Shape = tuple[int, int, int, int]  # workers, GPUs, CPUs, memory GB per worker


@lru_cache(maxsize=1 << 16)  # node names repeat every cycle: parse each once per process
def natural_key(name: str) -> tuple:
    """node-2 before node-10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


@dataclass(slots=True)
class NodeState:
    """A node's remaining capacity while one plan is being built."""

    snap: NodeSnap
    order: int  # position in natural name order; lower is preferred
    free: list[int]
    cpus: int
    memory_gb: int

    @property
    def partly_used(self) -> bool:
        return len(self.free) < self.snap.gpus

    def sort_key(self) -> tuple[int, int]:
        # Buckets are sorted ascending and read from the end, so the best node is last
        # and taking it is an O(1) pop: partly used first, then lower name order.
        return (int(self.partly_used), -self.order)

    def capacity(self, gpus: int, cpus: int, memory_gb: int, limit: int) -> int:
        """How many workers of this size fit here, at most `limit`."""
        fit = limit
        if gpus:
            fit = min(fit, len(self.free) // gpus)
        if cpus:
            fit = min(fit, self.cpus // cpus)
        if memory_gb:
            fit = min(fit, self.memory_gb // memory_gb)
        return max(fit, 0)


class PoolIndex:
    """The schedulable nodes of one pool, bucketed by free GPU count."""

    def __init__(self, key: PoolKey, nodes: list[NodeSnap]) -> None:
        self.key = key
        ordered = sorted(nodes, key=lambda n: (natural_key(n.name), n.id))
        self.nodes = [
            NodeState(n, i, sorted(n.free_gpu_indices), n.free_cpus, n.free_memory_gb)
            for i, n in enumerate(ordered)
        ]
        self.max_node_gpus = max((n.gpus for n in nodes), default=0)
        self._buckets: dict[int, list[tuple[tuple[int, int], int]]] = {}
        self._sorted_counts: list[int] | None = None  # sorted bucket keys, rebuilt lazily
        for pos, node in enumerate(self.nodes):  # one sort per bucket, not an insort per node
            self._buckets.setdefault(len(node.free), []).append((node.sort_key(), pos))
        for bucket in self._buckets.values():
            bucket.sort()
        # Shapes known not to fit. Valid because capacity only shrinks inside one plan
        # (preemption frees GPUs only in a later cycle, once the victims have exited).
        self.infeasible: set[Shape] = set()
        self.pos_of = {node.snap.id: pos for pos, node in enumerate(self.nodes)}
        # Nodes held back for a starving head job or a preemptor: no one else gets them.
        self.reserved: set[int] = set()
        self._sizes: Counter[int] | None = None  # node size → count (hosts_when_drained)

    # -- bucket maintenance -------------------------------------------------------------
    def _insert(self, pos: int, node: NodeState) -> None:
        if len(node.free) not in self._buckets:
            self._buckets[len(node.free)] = []
            self._sorted_counts = None
        insort(self._buckets[len(node.free)], (node.sort_key(), pos))

    def _remove(self, pos: int, node: NodeState) -> None:
        bucket = self._buckets[len(node.free)]
        entry = (node.sort_key(), pos)
        if bucket and bucket[-1] == entry:
            bucket.pop()
        else:
            bucket.remove(entry)
        if not bucket:
            del self._buckets[len(node.free)]
            self._sorted_counts = None

    def _free_counts(self, at_least: int, descending: bool = False) -> list[int]:
        if self._sorted_counts is None:
            self._sorted_counts = sorted(self._buckets)
        counts = [f for f in self._sorted_counts if f >= at_least]
        return counts[::-1] if descending else counts

    def _in_bucket(self, free: int):
        """Positions of the nodes with `free` free GPUs, best first."""
        for _, pos in reversed(self._buckets.get(free, ())):
            yield pos

    # -- questions (no change) ----------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.nodes)

    def largest_free_block(self) -> int:
        counts = self._free_counts(0)
        return counts[-1] if counts else 0

    def placeable_by_gpus(self, gpus: int, limit: int) -> int:
        """Workers of `gpus` GPUs that fit by GPU count alone (O(distinct free counts))."""
        if gpus == 0:
            return limit if len(self.reserved) < len(self.nodes) else 0
        total = 0
        for free in self._free_counts(gpus):
            total += len(self._buckets[free]) * (free // gpus)
            if total >= limit:
                return limit
        return total

    def placeable(self, shape: Shape) -> int:
        """Workers that fit counting CPUs and memory too (a scan: used for diagnosis)."""
        workers, gpus, cpus, memory_gb = shape
        total = 0
        for pos, node in enumerate(self.nodes):
            if pos in self.reserved:
                continue
            total += node.capacity(gpus, cpus, memory_gb, workers)
            if total >= workers:
                return workers
        return total

    def placeable_with(
        self, freed: dict[int, int], gpus: int, workers: int, excluded: frozenset[int] = frozenset()
    ) -> bool:
        """Would `workers` of `gpus` GPUs fit by GPU count once `freed` (node id → GPUs)
        are released? Used to check a preemptor's eligibility after subtracting victims.
        Nodes in `excluded` (the job must avoid them) count for nothing."""
        if gpus == 0:
            return len(self.reserved) < len(self.nodes)
        total = self.placeable_by_gpus(gpus, 1 << 30)
        skip = self.excluded_positions(excluded) if excluded else set()
        for pos in skip:
            total -= len(self.nodes[pos].free) // gpus
        for node_id, extra in freed.items():
            pos = self.pos_of.get(node_id)
            if pos is None or pos in self.reserved or pos in skip:
                continue  # unschedulable, held for someone else, or excluded for this job
            free = len(self.nodes[pos].free)
            total += (free + extra) // gpus - free // gpus
        return total >= workers

    def hosts_when_drained(self, gpus: int, excluded: frozenset[int] = frozenset()) -> int:
        """Workers of `gpus` GPUs this pool could host once every running job has ended:
        the most that capacity which will free up can ever satisfy. Unhealthy GPUs are
        counted as healthy (a repair frees them too); unschedulable nodes are not pools'."""
        if gpus == 0:
            return 1 << 30 if self.nodes else 0
        if self._sizes is None:  # node sizes never change inside a plan: count them once
            self._sizes = Counter(node.snap.gpus for node in self.nodes)
        hosts = sum(count * (size // gpus) for size, count in self._sizes.items())
        for node_id in excluded:
            pos = self.pos_of.get(node_id)
            if pos is not None:
                hosts -= self.nodes[pos].snap.gpus // gpus
        return hosts

    def reserve(self, node_ids) -> None:
        """Take nodes out of play for the rest of this plan (capacity only shrinks)."""
        for node_id in node_ids:
            pos = self.pos_of.get(node_id)
            if pos is not None and pos not in self.reserved:
                self._remove(pos, self.nodes[pos])
                self.reserved.add(pos)

    def hold_for(self, freed: dict[int, int], shape: Shape, excluded: frozenset[int]) -> None:
        """Keep, for a preemptor, the free GPUs it counts on besides its victims' (`freed`:
        node id → GPUs they release): on the victims' nodes first, the most freed first, then
        a placement of its other workers on free GPUs elsewhere. Only those GPUs leave play:
        the rest of a victims' node stays free for others (a whole node of 60 GPUs held for
        a job of 20 stalled every other quota's job in the Kueue baseline). Its workers' CPUs
        and memory there are kept too (the victims' own are not known here: not counted)."""
        workers, gpus, cpus, memory_gb = shape
        if not gpus:  # CPU-only: whole nodes, as before (rare)
            self.reserve(freed)
            return
        skip = self.excluded_positions(excluded) if excluded else set()
        remaining = workers
        for node_id, extra in sorted(freed.items(), key=lambda item: (-item[1], item[0])):
            pos = self.pos_of.get(node_id)
            if remaining <= 0 or pos is None or pos in self.reserved or pos in skip:
                continue
            node = self.nodes[pos]
            use = min((len(node.free) + extra) // gpus, remaining)
            keep = min(max(use * gpus - extra, 0), len(node.free))
            self._remove(pos, node)
            del node.free[:keep]
            node.cpus -= min(node.cpus, use * cpus)
            node.memory_gb -= min(node.memory_gb, use * memory_gb)
            self._insert(pos, node)
            remaining -= use
        if remaining > 0:
            rest = (remaining, gpus, cpus, memory_gb)
            chosen = self.find(rest, excluded)
            if chosen is not None:
                self.take(chosen, rest)

    def reserve_for(self, shape: Shape) -> list[int]:
        """Reserve the nodes a starving gang will start on once they drain: the emptiest
        first, until their whole size hosts every worker. Returns the node ids."""
        workers, gpus, _, _ = shape
        if not gpus:
            return []
        picked: list[int] = []
        hosts = 0
        for free in self._free_counts(0, descending=True):
            for pos in list(self._in_bucket(free)):
                node = self.nodes[pos]
                if node.snap.gpus < gpus:
                    continue
                picked.append(node.snap.id)
                hosts += node.snap.gpus // gpus
                if hosts >= workers:
                    self.reserve(picked)
                    return picked
        return []  # the pool can never host it: nothing to hold

    def excluded_positions(self, node_ids: frozenset[int]) -> set[int]:
        """Positions of the given nodes that are in this pool and still in play."""
        return {
            pos
            for pos in (self.pos_of.get(node_id) for node_id in node_ids)
            if pos is not None and pos not in self.reserved
        }

    def find(
        self, shape: Shape, excluded: frozenset[int] = frozenset()
    ) -> list[tuple[int, int]] | None:
        """Where the whole gang would go: [(node position, workers)], or None. No change.
        `excluded`: node ids this job must avoid (rare; skipped like nodes already taken)."""
        workers, gpus, _, _ = shape
        if workers <= 0 or shape in self.infeasible:
            return None
        if gpus and self.placeable_by_gpus(gpus, workers) < workers:
            self.infeasible.add(shape)
            return None
        chosen: list[tuple[int, int]] = []
        taken = self.excluded_positions(excluded) if excluded else set()
        # A miss with exclusions says nothing about the shape for other jobs: not memoised.
        memo = not taken
        remaining = workers
        while remaining:
            pick = self._tightest(shape, remaining, taken)
            if pick is not None:
                chosen.append((pick, remaining))
                return chosen
            pos, fit = self._roomiest(shape, remaining, taken)
            if pos is None:
                if memo:
                    self.infeasible.add(shape)
                return None
            chosen.append((pos, fit))
            taken.add(pos)
            remaining -= fit
        return chosen

    def _walk(self, gpus: int, at_least: int, descending: bool):
        """(free GPUs, [positions best first]) per bucket with at least `at_least` free."""
        if gpus == 0:
            # CPU-only workers fit any node still in play (a reserved node is out of the
            # buckets and must stay out: `take` re-buckets what it books); rare, so one
            # plain walk in preference order.
            ordered = sorted(
                (p for p in range(len(self.nodes)) if p not in self.reserved),
                key=lambda p: (self.nodes[p].cpus, self.nodes[p].memory_gb, self.nodes[p].order),
                reverse=descending,
            )
            yield 0, ordered
            return
        for free in self._free_counts(at_least, descending):
            yield free, self._in_bucket(free)

    def _tightest(self, shape: Shape, remaining: int, taken: set[int]) -> int | None:
        """The best-fitting node that hosts all remaining workers."""
        _, gpus, cpus, memory_gb = shape
        for _, positions in self._walk(gpus, gpus * remaining, descending=False):
            for pos in positions:
                if pos in taken:
                    continue
                if self.nodes[pos].capacity(gpus, cpus, memory_gb, remaining) >= remaining:
                    return pos
        return None

    def _roomiest(self, shape: Shape, remaining: int, taken: set[int]) -> tuple[int | None, int]:
        """The node hosting the most workers (fewest nodes overall); tighter among equals."""
        _, gpus, cpus, memory_gb = shape
        best, best_fit, best_free = None, 0, 0
        for free, positions in self._walk(gpus, max(gpus, 1), descending=True):
            ceiling = free // gpus if gpus else remaining
            if ceiling < best_fit:
                break  # no node from here down can host more
            for pos in positions:
                if pos in taken:
                    continue
                fit = self.nodes[pos].capacity(gpus, cpus, memory_gb, remaining)
                if fit > best_fit or (fit == best_fit > 0 and free < best_free):
                    # An equal fit in a bucket further down is a tighter node: prefer it.
                    best, best_fit, best_free = pos, fit, free
                if fit == ceiling:
                    break  # the rest of this bucket is no better
        return best, best_fit

    # -- change -------------------------------------------------------------------------
    def take(self, chosen: list[tuple[int, int]], shape: Shape) -> tuple[Placement, ...]:
        """Book the chosen capacity; ranks follow the order of `chosen`."""
        _, gpus, cpus, memory_gb = shape
        placements: list[Placement] = []
        for pos, count in chosen:
            node = self.nodes[pos]
            self._remove(pos, node)
            for _ in range(count):
                indices = tuple(node.free[:gpus])
                del node.free[:gpus]
                node.cpus -= cpus
                node.memory_gb -= memory_gb
                placements.append(Placement(len(placements), node.snap.id, indices))
            self._insert(pos, node)
        return tuple(placements)


class CapacityIndex:
    """All pools of a snapshot, plus what is unschedulable in each (for diagnosis)."""

    def __init__(self, nodes: tuple[NodeSnap, ...] | list[NodeSnap]) -> None:
        by_pool: dict[PoolKey, list[NodeSnap]] = {}
        self.unschedulable: dict[PoolKey, Counter[str]] = {}
        for node in nodes:
            if node.schedulable:
                by_pool.setdefault(node.pool, []).append(node)
            else:
                why = node.unschedulable_reason or "unschedulable"
                self.unschedulable.setdefault(node.pool, Counter())[why] += 1
        self.pools = {key: PoolIndex(key, members) for key, members in by_pool.items()}
        self.names = {node.id: node.name for node in nodes}

    def pool(self, key: PoolKey) -> PoolIndex | None:
        return self.pools.get(key)
