"""Where a gang of N slots fits: agents indexed by how many slots they have free.

`SlotIndex.fit` answers in O(slots per agent + agents used), whatever the number of agents:
- one agent when some agent has N free: best fit = the tightest (fewest left over), worst fit =
  the emptiest;
- otherwise the gang spans as few agents as possible (the emptiest ones; with best fit the last
  share goes to the tightest agent that can take it), if the pool has N free in all.
"""

from __future__ import annotations

from collections.abc import Iterable

Fit = list[tuple[str, int]]  # (agent id, how many slots there)


class SlotIndex:
    """Free slots per agent, plus buckets of agents by free count (insertion-ordered dicts)."""

    __slots__ = ("slots", "buckets", "total")

    def __init__(self, max_per_agent: int = 8) -> None:
        self.slots: dict[str, list[int]] = {}  # agent -> sorted free slot indexes
        self.buckets: list[dict[str, None]] = [{} for _ in range(max_per_agent + 1)]
        self.total = 0

    def add_agent(self, agent_id: str, slots: Iterable[int]) -> None:
        lst = sorted(set(slots))
        self.slots[agent_id] = lst
        self._bucket(len(lst))[agent_id] = None
        self.total += len(lst)

    def copy(self) -> SlotIndex:
        other = SlotIndex(0)
        other.slots = {a: lst[:] for a, lst in self.slots.items()}
        other.buckets = [dict(b) for b in self.buckets]
        other.total = self.total
        return other

    def _bucket(self, n: int) -> dict[str, None]:
        while n >= len(self.buckets):
            self.buckets.append({})
        return self.buckets[n]

    def count(self, agent_id: str) -> int:
        lst = self.slots.get(agent_id)
        return 0 if lst is None else len(lst)

    def _moved(self, agent_id: str, old: int, new: int) -> None:
        if old != new:
            b = self.buckets
            del b[old][agent_id]
            (b[new] if new < len(b) else self._bucket(new))[agent_id] = None
            self.total += new - old

    def take(self, agent_id: str, n: int) -> tuple[int, ...]:
        """Remove and return the agent's n lowest free slots."""
        lst = self.slots[agent_id]
        assert n <= len(lst), f"agent {agent_id}: {n} slots asked, {len(lst)} free"
        taken = tuple(lst[:n])
        del lst[:n]
        self._moved(agent_id, len(lst) + n, len(lst))
        return taken

    def remove(self, agent_id: str, slots: Iterable[int]) -> None:
        """Remove these slots where present (used to keep a second index in step)."""
        lst = self.slots.get(agent_id)
        if lst is None:
            return
        old = len(lst)
        for s in slots:
            if s in lst:
                lst.remove(s)
        self._moved(agent_id, old, len(lst))

    def add(self, agent_id: str, slots: Iterable[int]) -> list[int]:
        """Add slots (ignoring ones already present); returns the ones added."""
        lst = self.slots.get(agent_id)
        if lst is None:
            return []
        old = len(lst)
        added = [s for s in slots if s not in lst]
        if added:
            lst.extend(added)
            lst.sort()
            self._moved(agent_id, old, len(lst))
        return added

    def hide(self, agent_id: str) -> list[int]:
        """Take the agent out of the index (until `unhide`); returns its free slots."""
        lst = self.slots.pop(agent_id)
        del self.buckets[len(lst)][agent_id]
        self.total -= len(lst)
        return lst

    def unhide(self, agent_id: str, slots: list[int]) -> None:
        """Put back an agent `hide` took out, with the slots it returned."""
        self.slots[agent_id] = slots
        self._bucket(len(slots))[agent_id] = None
        self.total += len(slots)

    def most_free(self) -> str | None:
        """The agent with the most free slots (for zero-slot requests)."""
        for bucket in reversed(self.buckets):
            if bucket:
                return next(iter(bucket))
        return None

    def fit(self, n: int, worst: bool = False, span: bool = True) -> Fit | None:
        """Where n slots go (agent, count)..., or None when they do not fit now."""
        if n > self.total or n <= 0:
            return None
        b = self.buckets
        top = len(b) - 1
        if worst:
            for c in range(top, n - 1, -1):
                if b[c]:
                    return [(next(iter(b[c])), n)]
        else:
            for c in range(n, top + 1):
                if b[c]:
                    return [(next(iter(b[c])), n)]
        if not span:
            return None
        # No single agent has n free, but the pool does: as few agents as possible, emptiest first.
        chosen: Fit = []
        need = n
        for c in range(min(top, n - 1), 0, -1):
            for agent_id in b[c]:
                if c < need:
                    chosen.append((agent_id, c))
                    need -= c
                    continue
                if worst:
                    chosen.append((agent_id, need))
                    return chosen
                # Best fit: the last share goes to the tightest agent that can take it. Agents
                # already chosen all sit in buckets >= c, so buckets below c hold none of them.
                used = {a for a, _ in chosen}
                for cc in range(need, top + 1):
                    for other in b[cc]:
                        if other not in used:
                            chosen.append((other, need))
                            return chosen
        raise AssertionError("free slot count out of step with the buckets")  # pragma: no cover
