"""A job's gang from its annotations: one reading for every place jobs come from.

Members name their gang in annotations (Armada's ``armadaproject.io/gangId``
and ``gangCardinality``), optionally with an elastic minimum
(``flotilla.io/gang-min-available``) and a topology constraint
(``armadaproject.io/gangNodeUniformityLabel``). State files, job files
submitted to the service, pods made in the cluster and Flotilla's own pods
read back all carry them; :func:`read_gang_annotations` is the one rule for
what they mean and what is wrong with them, so no entry point ignores one
the others honour.

A problem is ``(annotation key, message)``: each caller puts its own path
in front (``jobs[3].annotations.``, ``metadata.annotations.``). A job that
is a gang by another word (a job of several pods, a PodGroup) passes its
size as ``size``, so a minimum or a uniformity label is checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from flotilla.core.model import (GANG_CARDINALITY_ANNOTATION, GANG_ID_ANNOTATION, GANG_MIN_AVAILABLE_ANNOTATION,
                                 GANG_NODE_UNIFORMITY_LABEL_ANNOTATION, Gang, parse_min_available)
from flotilla.core.topology import uniformity_label_problem

#: Every annotation :func:`read_gang_annotations` reads.
GANG_ANNOTATIONS = (GANG_ID_ANNOTATION, GANG_CARDINALITY_ANNOTATION, GANG_MIN_AVAILABLE_ANNOTATION,
                    GANG_NODE_UNIFORMITY_LABEL_ANNOTATION)


@dataclass(frozen=True, slots=True)
class GangAnnotations:
    """What a job's annotations say of its gang; each field empty (None, 0, "") where they say nothing or are wrong."""

    id: str | None = None
    cardinality: int | None = None
    #: The elastic minimum; 0 when not given or equal to the gang's size.
    min_available: int = 0
    uniformity_label: str = ""
    problems: tuple[tuple[str, str], ...] = ()

    def gang(self) -> Gang | None:
        """The core gang these annotations name, or None (no gang, or an id or cardinality in error)."""
        if self.id is None or self.cardinality is None:
            return None
        return Gang(self.id, self.cardinality, self.min_available, self.uniformity_label)


_NOTHING = GangAnnotations()


def read_gang_annotations(annotations: Mapping[str, str], *, unit: str = "jobs", size: int = 0,
                          grouped_by: str = "a gang") -> GangAnnotations:
    """The gang ``annotations`` name, with every problem of them (see the module docstring).

    ``unit`` words the cardinality's message (jobs, pods); ``size`` is the
    gang the job is by another word (its pods, its PodGroup), or 0, and
    ``grouped_by`` names what may carry a minimum or a uniformity label.
    """
    if not any(key in annotations for key in GANG_ANNOTATIONS):
        return _NOTHING
    problems: list[tuple[str, str]] = []
    gang_id = annotations.get(GANG_ID_ANNOTATION)
    text = annotations.get(GANG_CARDINALITY_ANNOTATION)
    cardinality = None
    if gang_id is not None or text is not None:
        if not gang_id:
            problems.append((GANG_ID_ANNOTATION, f"a gang needs both {GANG_ID_ANNOTATION} and "
                                                 f"{GANG_CARDINALITY_ANNOTATION}; gangId is missing"))
            gang_id = None
        try:
            cardinality = int(text) if text is not None else None
        except (TypeError, ValueError):
            cardinality = None
        if cardinality is None or cardinality < 1:
            problems.append((GANG_CARDINALITY_ANNOTATION, f"gang cardinality must be a whole number of {unit}, at "
                                                          f"least 1; got {text!r}"))
            cardinality = None
    grouped = gang_id is not None or text is not None or size >= 2
    whole = cardinality or size
    minimum = 0
    min_text = annotations.get(GANG_MIN_AVAILABLE_ANNOTATION)
    if min_text is not None:
        if not grouped:
            problems.append((GANG_MIN_AVAILABLE_ANNOTATION, f"only {grouped_by} has a minimum; set {GANG_ID_ANNOTATION} too"))
        elif whole:
            parsed = parse_min_available(min_text, whole)
            if isinstance(parsed, str):
                problems.append((GANG_MIN_AVAILABLE_ANNOTATION, parsed))
            else:
                minimum = parsed
    label = annotations.get(GANG_NODE_UNIFORMITY_LABEL_ANNOTATION)
    if label is not None:
        why = uniformity_label_problem(label) if grouped else \
            f"only {grouped_by} runs in one domain of a label; set {GANG_ID_ANNOTATION} too"
        if why is not None:
            problems.append((GANG_NODE_UNIFORMITY_LABEL_ANNOTATION, why))
            label = None
    return GangAnnotations(gang_id, cardinality, minimum, label or "", tuple(problems))


__all__ = ["GANG_ANNOTATIONS", "GangAnnotations", "read_gang_annotations"]
