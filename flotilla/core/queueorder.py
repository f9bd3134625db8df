"""A queue's queued jobs in job order, kept between cycles and read lazily.

Allocate only ever needs a queue's head: the next job in order (priority,
then submission time, then the order the jobs were first seen). A
:class:`QueueOrder` keeps the queue as a heap of ``(priority, submitted,
seq, job)`` entries that lives across cycles:

* a cycle reads it through :meth:`QueueOrder.__iter__`, which pops entries
  only as far as the cycle goes and remembers them in ``prefix`` so that a
  later action (``preempt`` after ``allocate``) walks the same order again;
* :meth:`settle` ends the cycle: the entries reached go back on the heap,
  except those of the jobs the cycle placed;
* jobs that leave the queue between cycles are deleted lazily (their entry is
  dropped when it comes up), and the heap is compacted when dead entries
  outnumber live ones.

So a queue of a million jobs costs, per cycle, what the cycle reaches plus
what changed, not a million.
"""

from __future__ import annotations

import heapq
from operator import attrgetter, itemgetter
from typing import Iterable, Iterator

from flotilla.core.model import Job

#: (priority, submitted, seq, job): seq is unique, so jobs are never compared. Orders built for one
#: cycle from a plugin's job order have entries (*sort key, job), the key ending with seq.
Entry = tuple

_ID = attrgetter("id")
_JOB = itemgetter(-1)


class QueueOrder:
    __slots__ = ("heap", "live", "prefix", "dead")

    def __init__(self, entries: list[Entry] | None = None):
        self.heap: list[Entry] = entries or []
        heapq.heapify(self.heap)
        #: job id -> its live entry; also what tells a queue with jobs from an empty one.
        self.live: dict[str, Entry] = dict(zip(map(_ID, map(_JOB, self.heap)), self.heap))
        self.prefix: list[Entry] = []
        self.dead = 0

    def __len__(self) -> int:
        return len(self.live)

    def __bool__(self) -> bool:
        return bool(self.live)

    def add(self, job: Job, seq: int) -> None:
        self.restore((job.priority, job.submitted, seq, job))

    def restore(self, entry: Entry) -> None:
        """Put an entry (new, or one :meth:`settle` took out) in the queue."""
        job = entry[-1]
        if self.live.get(job.id) is not None:
            self.dead += 1
        self.live[job.id] = entry
        heapq.heappush(self.heap, entry)

    def discard(self, job_id: str) -> None:
        if self.live.pop(job_id, None) is not None:
            self.dead += 1

    def jobs(self) -> Iterable[Job]:
        """The queued jobs, in no particular order."""
        return (entry[-1] for entry in self.live.values())

    def __iter__(self) -> Iterator[Job]:
        prefix, heap, live = self.prefix, self.heap, self.live
        position = 0
        while True:
            if position < len(prefix):
                entry = prefix[position]
            else:
                while heap:
                    entry = heapq.heappop(heap)
                    if live.get(entry[-1].id) is entry:
                        break
                    self.dead -= 1
                else:
                    return
                prefix.append(entry)
            position += 1
            yield entry[-1]

    def settle(self, placed: set[str], taken: dict[str, Entry]) -> None:
        """End of a cycle: entries reached go back, placed jobs leave the queue (their entries into ``taken``)."""
        live, heap = self.live, self.heap
        for entry in self.prefix:
            job_id = entry[-1].id
            if live.get(job_id) is not entry:
                continue
            if job_id in placed:
                del live[job_id]
                taken[job_id] = entry
            else:
                heapq.heappush(heap, entry)
        self.prefix = []
        if self.dead > 64 and self.dead > len(live):
            self.heap = list(live.values())
            heapq.heapify(self.heap)
            self.dead = 0
