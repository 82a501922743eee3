"""The lesson on multi-GPU communication (notebooks/08_lesson_multi_gpu_communication.ipynb): its steps, their
checks, the NumPy diagnosis behind them, its recorded tables and its figure.

Every step of the lesson (`STEPS`) has a check, `check_<step>(source, team=None)`. It compiles the learner's kernel
source, runs it on fresh random inputs with NaN-poisoned outputs on every rank of a team (any size from 2 to 8; the
flag step uses ranks 0 and 1), and returns a `Verdict`. When the answer is wrong, the verdict says which rank and
which elements are wrong, and gives a likely cause. Without a GPU a check compiles the source for sm_90a and reports
that it did not run (`Verdict.ok is None`). `solution(step)` returns the reference kernel,
pkit/kernels/lesson_<step>.cu. In IPython, importing this package registers the `%%cuda NAME` cell magic that the
notebook's exercise cells use (`pkit.lesson.magic`).

One job per module: `verdict` (a check's answer), `diagnose` (plain NumPy over the outputs: runs anywhere),
`runners` (what each check launches on the GPUs), `checks` (compile, run, report), `steps` (the steps and their
answers), `records` and `plots` (the recorded tables and the timeline figure), `magic` (the `%%cuda` cells).

Example:
    >>> import numpy as np
    >>> want = [np.arange(8, dtype=np.float32)] * 2
    >>> got = [want[0], np.r_[want[1][:4], [np.nan] * 4].astype(np.float32)]
    >>> print(diagnose_copy(got, want))
    ✗ rank 1 elements 4..7 still hold the poison value (nan): the kernel never wrote them — is the grid covering n?
    >>> from pkit import lesson
    >>> lesson.check_copy(lesson.solution("copy"))                      # doctest: +SKIP
    ✓ all 2 ranks hold the expected 24676 elements
"""
from .checks import (OFFLINE_ARCH, check_addressing, check_barrier, check_copy, check_flag, check_overlap,
                     check_ring)
from .diagnose import COPY_CAUSES, RING_UNWRITTEN, UNWRITTEN_WORD, diagnose_copy, diagnose_flag, diagnose_ring
from .magic import load_ipython_extension, register_in_ipython
from .plots import draw_timeline
from .records import recorded
from .runners import BARRIER_CAUSES, LATE_START_NS, OVERLAP_CAUSES, LESSON_THREADS
from .steps import STEPS, Step, solution
from .verdict import Verdict

__all__ = ["BARRIER_CAUSES", "COPY_CAUSES", "LATE_START_NS", "OFFLINE_ARCH", "OVERLAP_CAUSES", "RING_UNWRITTEN",
           "STEPS", "LESSON_THREADS",
           "UNWRITTEN_WORD", "Step", "Verdict", "check_addressing", "check_barrier", "check_copy",
           "check_flag", "check_overlap", "check_ring", "diagnose_copy", "diagnose_flag", "diagnose_ring",
           "draw_timeline", "load_ipython_extension", "recorded", "solution"]

register_in_ipython()
