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
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Iterator

from flotilla.core.model import Job

#: (priority, submitted, seq, job): seq is unique, so jobs are never compared. Orders built for one
#: cycle from a plugin's job order have entries (*sort key, job), the key ending with seq.
Entry = tuple

_CLASS = attrgetter("priority_class")
_JOB = itemgetter(-1)


class QueueOrder:
    __slots__ = ("entries", "heap", "head", "hpos", "prefix", "count", "classes", "dead")

    def __init__(self, entries: dict[str, Entry] | None = None, initial: list[Entry] | None = None,
                 classes: Counter[str] | None = None):
        initial = initial or []
        #: id(job) -> its live entry, shared by all the queues of one state.
        self.entries: dict[int, Entry] = entries if entries is not None else dict(zip(map(id, map(_JOB, initial)),
                                                                                       initial))
        self.heap: list[Entry] = initial
        heapq.heapify(self.heap)
        self.head: list[Entry] = []
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

    def settle(self, placed: set[str], taken: dict[str, Entry]) -> None:
        """End of a cycle: what was reached leads the next head; placed jobs leave (their entries into ``taken``)."""
        entries = self.entries
        kept = []
        for entry in self.prefix:
            job = entry[-1]
            if job.id in placed and entries.get(id(job)) is entry:
                del entries[id(job)]
                taken[job.id] = entry
                self.count -= 1
                self.classes[job.priority_class] -= 1
            else:
                kept.append(entry)
        kept.extend(self.head[self.hpos:])
        self.head, self.hpos, self.prefix = kept, 0, []
        if self.dead > 64 and self.dead > self.count:
            self.heap = self.live_entries()
            heapq.heapify(self.heap)
            self.head, self.dead = [], 0
