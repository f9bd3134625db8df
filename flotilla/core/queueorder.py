"""A queue's queued jobs in job order, kept between cycles and read lazily.

Allocate only ever needs a queue's head: the next job in order (priority,
then submission time, then the order the jobs were first seen). A
:class:`QueueOrder` keeps the queue between cycles as two parts: ``head``,
a sorted list of the entries earlier cycles reached, and ``heap``, the
rest. Entries are ``(priority, submitted, seq, job)``.

* A cycle reads the queue through :meth:`QueueOrder.__iter__`, a merge of
  ``head`` and ``heap`` that goes only as far as the cycle goes and records
  what it produced in ``prefix``, so a later action (``preempt`` after
  ``allocate``) walks the same order again for free.
* :meth:`settle` ends the cycle: the prefix, less the jobs the cycle placed,
  becomes the front of the next head (a list slice, not a heap push per
  entry).
* A queue whose entries arrive already in order (the snapshot lists jobs as
  they were submitted) starts as all head and no heap: reading it is a list
  walk, not a heap pop per job.
* Which entries are live is one dict shared by the state's queues
  (``id(job)`` -> entry); a job that leaves between cycles is removed from it and its
  entry is dropped when the merge comes to it; the queue is compacted when
  dead entries outnumber live ones.

So a queue of a million jobs costs, per cycle, what the cycle reaches plus
what changed, not a million. Per priority class counts tell ``preempt``
without a look at any job whether a queue holds anything urgent.
"""

from __future__ import annotations

import heapq
from collections import Counter
from bisect import bisect_left
from itertools import chain, compress, islice
from operator import attrgetter, is_, itemgetter, le
from typing import Iterator

from flotilla.core.model import Job

#: (priority, submitted, seq, job): seq is unique, so jobs are never compared. Orders built for one
#: cycle from a plugin's job order have entries (*sort key, job), the key ending with seq.
Entry = tuple

_CLASS = attrgetter("priority_class")
_JOB = itemgetter(-1)
_ID = attrgetter("id")


class QueueOrder:
    __slots__ = ("entries", "heap", "head", "hpos", "prefix", "count", "classes", "dead")

    def __init__(self, entries: dict[str, Entry] | None = None, initial: list[Entry] | None = None,
                 classes: Counter[str] | None = None):
        initial = initial or []
        #: id(job) -> its live entry, shared by all the queues of one state.
        self.entries: dict[int, Entry] = entries if entries is not None else dict(zip(map(id, map(_JOB, initial)),
                                                                                       initial))
        # Entries already in order (jobs listed as submitted, the usual case) become the head as they
        # are: one C-level pass of comparisons instead of a heapify and a heap pop per job read.
        if all(map(le, initial, islice(initial, 1, None))):
            self.heap: list[Entry] = []
            self.head: list[Entry] = initial
        else:
            self.heap = initial
            heapq.heapify(self.heap)
            self.head = []
        self.hpos = 0
        self.prefix: list[Entry] = []
        self.count = len(initial)
        #: queued jobs per priority class (given when the caller counted them already)
        self.classes: Counter[str] = classes if classes is not None else Counter(map(_CLASS, map(_JOB, initial)))
        self.dead = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    # -- changes between cycles (the caller keeps ``entries`` up to date) -----------------
    def add(self, entry: Entry) -> None:
        heapq.heappush(self.heap, entry)
        self.count += 1
        self.classes[entry[-1].priority_class] += 1

    def remove(self, entry: Entry) -> None:
        """``entry`` left ``entries``: forget it here (its slot is dropped lazily)."""
        self.count -= 1
        self.classes[entry[-1].priority_class] -= 1
        self.dead += 1

    def has_class(self, names) -> bool:
        """Whether a queued job's priority class is one of ``names``."""
        classes = self.classes
        return any(classes.get(name) for name in names)

    # -- reading --------------------------------------------------------------------------
    def live_entries(self) -> list[Entry]:
        """The live entries, in no particular order."""
        entries = self.entries
        return [e for e in chain(self.prefix, self.head[self.hpos:], self.heap) if entries.get(id(e[-1])) is e]

    def jobs(self) -> list[Job]:
        """The queued jobs, in no particular order."""
        return list(map(_JOB, self.live_entries()))

    def __iter__(self) -> Iterator[Job]:
        prefix, heap, head, entries = self.prefix, self.heap, self.head, self.entries
        position = 0
        while True:
            if position < len(prefix):
                entry = prefix[position]
            else:
                # The smaller of the head's next entry and the heap's top; dead ones are dropped.
                while True:
                    hpos = self.hpos
                    if hpos < len(head) and (not heap or head[hpos] < heap[0]):
                        entry = head[hpos]
                        self.hpos = hpos + 1
                    elif heap:
                        entry = heapq.heappop(heap)
                    else:
                        return
                    if entries.get(id(entry[-1])) is entry:
                        break
                    self.dead -= 1
                prefix.append(entry)
            position += 1
            yield entry[-1]

    def at(self, position: int) -> Entry | None:
        """The entry at ``position`` of this cycle's reading (what :meth:`__iter__` yields there), or None at the end.

        Readers walk positions in order; reading a new position takes the
        next live entry of the merge into ``prefix``.
        """
        prefix = self.prefix
        if position < len(prefix):
            return prefix[position]
        heap, head, entries = self.heap, self.head, self.entries
        while True:
            hpos = self.hpos
            if hpos < len(head) and (not heap or head[hpos] < heap[0]):
                entry = head[hpos]
                self.hpos = hpos + 1
            elif heap:
                entry = heapq.heappop(heap)
            else:
                return None
            if entries.get(id(entry[-1])) is entry:
                prefix.append(entry)
                return entry
            self.dead -= 1

    def peek(self, position: int, n: int) -> list[Entry]:
        """Up to ``n`` entries from ``position`` on, read ahead in bulk where the head allows.

        A run of the sorted head that sorts before the heap's top moves into
        ``prefix`` in one slice (dead entries dropped by C-level passes), so
        passing over a long run of known misfits costs no Python step per
        entry. Reading ahead changes nothing: the prefix is the merge order,
        and :meth:`settle` puts what was read back at the head's front.
        """
        prefix = self.prefix
        want = position + n
        head, heap = self.head, self.heap
        while len(prefix) < want:
            hpos = self.hpos
            if hpos < len(head) and (not heap or head[hpos] < heap[0]):
                end = min(len(head), hpos + want - len(prefix))
                if heap:
                    end = bisect_left(head, heap[0], hpos, end)
                chunk = head[hpos:end]
                self.hpos = end
                if not self.dead:  # no job of this queue left since its entries were filed: all live
                    prefix += chunk
                    continue
                entries = self.entries
                live = list(map(is_, map(entries.get, map(id, map(_JOB, chunk))), chunk))
                if all(live):
                    prefix += chunk
                else:
                    prefix.extend(compress(chunk, live))
                    self.dead -= live.count(False)
            elif self.at(len(prefix)) is None:
                break
        return prefix[position:want]

    def settle(self, placed: set[str], taken: dict[str, Entry]) -> None:
        """End of a cycle: what was reached leads the next head; placed jobs leave (their entries into ``taken``)."""
        entries = self.entries
        prefix = self.prefix
        # Which of the read entries were placed, in C-level passes (most cycles place few of them).
        hits = list(map(placed.__contains__, map(_ID, map(_JOB, prefix)))) if placed else ()
        if True in hits:
            kept = []
            for entry, hit in zip(prefix, hits):
                job = entry[-1]
                if hit and entries.get(id(job)) is entry:
                    del entries[id(job)]
                    taken[job.id] = entry
                    self.count -= 1
                    self.classes[job.priority_class] -= 1
                else:
                    kept.append(entry)
        else:
            kept = prefix
        # The head's unread part stays where it is (one pointer move, no copy): the kept prefix
        # replaces what was read, and every entry in it sorts before every unread one.
        self.head[:self.hpos] = kept
        self.hpos, self.prefix = 0, []
        if self.dead > 64 and self.dead > self.count:
            self.heap = self.live_entries()
            heapq.heapify(self.heap)
            self.head, self.dead = [], 0
