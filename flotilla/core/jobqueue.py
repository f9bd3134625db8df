"""A queue's queued jobs in job order, kept between cycles and read lazily.

Allocate only ever needs a queue's head: the next job in order (priority,
then submission time, then the order the jobs were first seen). A
:class:`JobQueue` keeps the queue between cycles as three parts: ``head``,
a sorted list of the entries earlier cycles reached, ``lazy``, jobs in order
after it that have no entry yet (a queue whose jobs were listed as submitted
starts as that alone: no tuple per job it never reaches), and ``heap``, the
rest. Entries are ``(priority, submitted, seq, job)``.

* A cycle reads the queue through :meth:`JobQueue.at` (or ``__iter__``), a merge of
  ``head``, ``lazy`` and ``heap`` that goes only as far as the cycle goes and records
  what it produced in ``prefix``, so a later action (``preempt`` after
  ``allocate``) walks the same order again for free.
* :meth:`settle` ends the cycle: the prefix, less the jobs the cycle placed,
  becomes the front of the next head (a list slice, not a heap push per
  entry).
* A queue whose entries arrive already in order (the snapshot lists jobs as
  they were submitted) starts as all head and no heap: reading it is a list
  walk, not a heap pop per job.
* Which entries are live is one dict shared by the state's queues
  (``id(job)`` -> entry, or the job while it has none); a job that leaves between cycles is removed from it and its
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
from operator import attrgetter, is_, itemgetter, le, not_, or_
from typing import Iterator

from flotilla.core.model import Job

#: (priority, submitted, seq, job): seq is unique, so jobs are never compared. Orders built for one
#: cycle from a plugin's job order have entries (*sort key, job), the key ending with seq.
Entry = tuple

_CLASS = attrgetter("priority_class")
_PRIORITY = attrgetter("priority")
_SUBMITTED = attrgetter("submitted")
_JOB = itemgetter(-1)
_ID = attrgetter("id")


def _live(entries: dict, entry: Entry) -> bool:
    """Whether ``entry`` is its job's live one: ``entries`` holds it, or the job itself while the job has
    no entry of its own yet (read from ``lazy``)."""
    job = entry[-1]
    value = entries.get(id(job))
    return value is entry or value is job


class JobQueue:
    __slots__ = ("entries", "heap", "head", "hpos", "lazy", "lpos", "prefix", "count", "_classes", "dead", "offered")

    def __init__(self, entries: dict[int, object] | None = None, initial: list[Entry] | None = None,
                 classes: Counter[str] | None = None, ordered: bool = False, lazy: list[Job] | None = None):
        initial = initial or []
        #: id(job) -> its live entry, or the job itself when its entry is made as it is read (``lazy``);
        #: shared by all the queues of one state.
        self.entries: dict[int, object] = entries if entries is not None else dict(zip(map(id, map(_JOB, initial)),
                                                                                        initial))
        # Entries already in order (jobs listed as submitted, the usual case) become the head as they
        # are: one C-level pass of comparisons instead of a heapify and a heap pop per job read. The
        # caller may know it already (``ordered``: the whole snapshot is in order).
        if ordered or all(map(le, initial, islice(initial, 1, None))):
            self.heap: list[Entry] = []
            self.head: list[Entry] = initial
        else:
            self.heap = initial
            heapq.heapify(self.heap)
            self.head = []
        self.hpos = 0
        #: Jobs in order after the head, without entries: the entry of ``lazy[k]`` is
        #: ``(priority, submitted, k, job)``, made when it is read. A queue of a million jobs whose
        #: jobs arrive in order keeps no tuple per job it never reaches.
        self.lazy: list[Job] = lazy if lazy is not None else []
        self.lpos = 0
        self.prefix: list[Entry] = []
        #: Positions in ``prefix`` handed out as units this cycle (:class:`~flotilla.core.units.QueueUnits`):
        #: where :meth:`settle` looks for the placed jobs first.
        self.offered: list[int] = []
        self.count = len(initial) + len(self.lazy)
        #: queued jobs per priority class, counted when first asked (given when the caller counted them)
        self._classes: Counter[str] | None = classes
        self.dead = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    @property
    def classes(self) -> Counter[str]:
        """Queued jobs per priority class: counted at first use (``preempt`` asks; a first cycle with
        nothing running never does), then kept up to date."""
        if self._classes is None:
            if self.dead:
                jobs = map(_JOB, self.live_entries())
            else:
                jobs = chain(map(_JOB, chain(self.prefix, self.head[self.hpos:], self.heap)), self.lazy[self.lpos:])
            self._classes = Counter(map(_CLASS, jobs))
        return self._classes

    # -- changes between cycles (the caller keeps ``entries`` up to date) -----------------
    def add(self, entry: Entry) -> None:
        heapq.heappush(self.heap, entry)
        self.count += 1
        if self._classes is not None:
            self._classes[entry[-1].priority_class] += 1

    def remove(self, job: Job) -> None:
        """``job`` left ``entries``: forget it here (its slot is dropped lazily)."""
        self.count -= 1
        if self._classes is not None:
            self._classes[job.priority_class] -= 1
        self.dead += 1

    def has_class(self, names) -> bool:
        """Whether a queued job's priority class is one of ``names``."""
        classes = self.classes
        return any(classes.get(name) for name in names)

    # -- reading --------------------------------------------------------------------------
    def _lazy_entries(self, start: int, end: int) -> list[Entry]:
        """Entries of ``lazy[start:end]``, made in C-level passes."""
        jobs = self.lazy[start:end]
        return list(zip(map(_PRIORITY, jobs), map(_SUBMITTED, jobs), range(start, start + len(jobs)), jobs))

    def live_entries(self) -> list[Entry]:
        """The live entries, in no particular order."""
        entries = self.entries
        every = chain(self.prefix, self.head[self.hpos:], self._lazy_entries(self.lpos, len(self.lazy)), self.heap)
        if not self.dead:
            return list(every)
        return [e for e in every if _live(entries, e)]

    def live_jobs(self) -> list[Job]:
        """The queued jobs, in no particular order, without making entries for ``lazy``."""
        if self.dead:
            return self.jobs()
        return list(chain(map(_JOB, chain(self.prefix, self.head[self.hpos:], self.heap)), self.lazy[self.lpos:]))

    def jobs(self) -> list[Job]:
        """The queued jobs, in no particular order."""
        return list(map(_JOB, self.live_entries()))

    def __iter__(self) -> Iterator[Job]:
        position = 0
        while (entry := self.at(position)) is not None:
            position += 1
            yield entry[-1]

    def _next_sorted(self) -> Entry | None:
        """The sorted part's next entry (head, then lazy), not yet taken."""
        hpos = self.hpos
        if hpos < len(self.head):
            return self.head[hpos]
        lpos = self.lpos
        if lpos < len(self.lazy):
            job = self.lazy[lpos]
            return job.priority, job.submitted, lpos, job
        return None

    def at(self, position: int) -> Entry | None:
        """The entry at ``position`` of this cycle's reading, or None at the end.

        Readers walk positions in order; reading a new position takes the
        next live entry of the merge (sorted part against the heap) into ``prefix``.
        """
        prefix = self.prefix
        if position < len(prefix):
            return prefix[position]
        heap, entries = self.heap, self.entries
        while True:
            entry = self._next_sorted()
            if entry is not None and (not heap or entry < heap[0]):
                if self.hpos < len(self.head):
                    self.hpos += 1
                else:
                    self.lpos += 1
            elif heap:
                entry = heapq.heappop(heap)
            else:
                return None
            if not self.dead or _live(entries, entry):
                prefix.append(entry)
                return entry
            self.dead -= 1

    def peek(self, position: int, n: int) -> list[Entry]:
        """Up to ``n`` entries from ``position`` on, read ahead in bulk where the sorted part allows.

        A run of the sorted part (head, then lazy) that sorts before the
        heap's top moves into ``prefix`` in one slice (dead entries dropped
        by C-level passes), so passing over a long run of known misfits costs
        no Python step per entry. Reading ahead changes nothing: the prefix
        is the merge order, and :meth:`settle` puts what was read back at the
        head's front.
        """
        prefix = self.prefix
        want = position + n
        head, heap = self.head, self.heap
        while len(prefix) < want:
            hpos = self.hpos
            if hpos < len(head):
                end = min(len(head), hpos + want - len(prefix))
                chunk = head[hpos:end]
            elif self.lpos < len(self.lazy):
                chunk = self._lazy_entries(self.lpos, self.lpos + want - len(prefix))
            else:
                chunk = None
            if chunk and heap:
                chunk = chunk[:bisect_left(chunk, heap[0])]
            if not chunk:
                if self.at(len(prefix)) is None:
                    break
                continue
            if hpos < len(head):
                self.hpos = hpos + len(chunk)
            else:
                self.lpos += len(chunk)
            if not self.dead:  # no job of this queue left since its entries were filed: all live
                prefix += chunk
                continue
            entries = self.entries
            jobs = list(map(_JOB, chunk))
            values = list(map(entries.get, map(id, jobs)))
            live = list(map(or_, map(is_, values, chunk), map(is_, values, jobs)))
            if all(live):
                prefix += chunk
            else:
                prefix.extend(compress(chunk, live))
                self.dead -= live.count(False)
        return prefix[position:want]

    def settle(self, placed: set[int], taken: dict[str, Entry], placed_here: int = -1) -> None:
        """End of a cycle: what was reached leads the next head; placed jobs leave (their entries into ``taken``).

        ``placed`` holds the placed job objects' ``id()``: the queue holds the very objects that were placed,
        and an int needs no hashing of a job id string per entry read. ``placed_here``, how many of them
        are this queue's: when all are found among the positions handed out as units, nothing else read
        (known misfits passed over, most of it) is looked at.
        """
        entries = self.entries
        prefix = self.prefix
        hits = ()
        if placed_here > 0 and self.offered:
            found = [k for k in set(self.offered) if id(prefix[k][-1]) in placed]
            if len(found) == placed_here:
                hits = [False] * len(prefix)
                for k in found:
                    hits[k] = True
        if not hits and placed and placed_here != 0:
            # Which of the read entries were placed, in C-level passes (most cycles place few of them).
            hits = list(map(placed.__contains__, map(id, map(_JOB, prefix))))
        # ``entries`` not filled yet (empty; see CycleState.entries): every entry is live, none to take out.
        if True in hits and (not entries or all(_live(entries, entry) for entry in compress(prefix, hits))):
            # Placed entries are live (read this cycle): the rest is kept in a C-level pass.
            kept = list(compress(prefix, map(not_, hits)))
            for entry in compress(prefix, hits):
                job = entry[-1]
                if entries:
                    del entries[id(job)]
                taken[job.id] = entry
                self.count -= 1
                if self._classes is not None:
                    self._classes[job.priority_class] -= 1
        elif True in hits:
            kept = []
            for entry, hit in zip(prefix, hits):
                job = entry[-1]
                if hit and _live(entries, entry):
                    del entries[id(job)]
                    taken[job.id] = entry
                    self.count -= 1
                    if self._classes is not None:
                        self._classes[job.priority_class] -= 1
                else:
                    kept.append(entry)
        else:
            kept = prefix
        # The head's unread part stays where it is (one pointer move, no copy): the kept prefix
        # replaces what was read, and every entry in it sorts before every unread one (head and lazy).
        self.head[:self.hpos] = kept
        self.hpos, self.prefix, self.offered = 0, [], []
        if self.dead > 64 and self.dead > self.count:
            self.heap = self.live_entries()
            heapq.heapify(self.heap)
            self.head, self.lazy, self.lpos, self.dead = [], [], 0, 0
