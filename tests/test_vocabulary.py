"""pkit's words for what moves bytes (pkit.vocabulary): every registry that names a mechanism speaks them."""
import pytest

from pkit import vocabulary as V
from pkit.analysis import DETECTED_MECHANISMS
from pkit.experiments.hierarchy.matrix import TESTCASES
from pkit.ops import transfers
from pkit.ops.collective_ops import COLLECTIVE_MECHANISMS
from pkit.ops.overlap_patterns import schedules


def test_every_registry_names_mechanisms_in_the_vocabulary():
    assert {V.family(m) for m in transfers.ALL_MECHANISMS} == {"ce", "sm", "tma"}
    assert set(transfers.ROUTE_MECHANISMS) == set(V.ROUTE_KINDS)
    assert {m for m in transfers.MECHANISMS if m != "ce"} == {V.mechanism(f, d) for f in ("sm", "tma")
                                                               for d in V.DIRECTIONS}
    assert set(COLLECTIVE_MECHANISMS) - {"auto"} <= set(V.FAMILIES)
    assert {t.engine for t in TESTCASES.values()} == {"ce", "sm"}
    moved = {s.transfer for s in schedules().values()} - {"nccl", ""}  # NCCL's and PyTorch's own
    assert moved and moved <= set(transfers.ALL_MECHANISMS)
    # what the analysis finds in candidates' code: pkit's families where they are the same thing
    assert {"ce", "sm", "tma"} <= set(DETECTED_MECHANISMS) and not set(DETECTED_MECHANISMS) & {"sm_push", "sm_pull", "ll"}


def test_words_are_checked():
    assert V.mechanism("tma") == "tma" and V.mechanism("sm", "push") == "sm_push" and V.family("ce") == "ce"
    with pytest.raises(ValueError, match="families: expected names from"):
        V.mechanism("nvlink", "push")
    with pytest.raises(ValueError, match="direction: expected one of"):
        V.mechanism("sm", "sideways")
