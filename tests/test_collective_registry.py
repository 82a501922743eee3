"""The collective registry (pkit/ops/collective_ops.py) is the one source of each op, on CPU: every entry is whole
(a reference of the right size, a bus factor, kernels that exist in the kernel files), every place that names ops
exposes exactly the registry's, and the launches and copy-engine plans derived from an entry's layout do what its
reference says. docs/collectives.md, "Adding a collective", is the recipe these checks hold."""
import inspect
import re
from types import SimpleNamespace

import numpy as np
import pytest

import pkit
from pkit import dist as pdist
from pkit.compiler import KERNEL_DIR
from pkit.experiments import collectives as experiment
from pkit.experiments.collectives import pytorch as torch_collectives
from pkit.ops import baselines, collective_ops as R, collectives as C
from pkit.widgets import ROOFLINE_COLLECTIVES

ROOT = KERNEL_DIR.parents[1]
ENTRIES = list(R.COLLECTIVES.values())


def _ids(entry):
    return entry.name


def _roots(entry, ranks):
    """The roots a check runs `entry` with on `ranks` ranks: the first, a middle and the last rank for a rooted op,
    else None (no root)."""
    return sorted({0, ranks // 2, ranks - 1}) if entry.rooted else [None]


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
@pytest.mark.parametrize("ranks", [2, 3, 8])
def test_reference_gives_each_rank_its_output_count(entry, ranks):
    """Rank r's reference output from inputs of `counts` elements holds the output count: sums of every rank's
    values for a reduction (all ones: n everywhere), the inputs' values for a move (rank q's input all q; a
    broadcast's: the root's alone); None exactly where a rooted call leaves the rank's output alone (NCCL's reduce
    writes the root's output only)."""
    total = ranks * 24
    inputs, outputs = entry.counts(total, ranks)
    assert entry.per_peer(total, ranks) * max(entry.pieces(ranks)) == max(inputs, outputs) == total
    xs = [np.full(inputs, 1.0 if entry.reduces else q) for q in range(ranks)]
    for root in _roots(entry, ranks):
        for r in range(ranks):
            got = entry.reference(xs, r, *([] if root is None else [root]))
            if not entry.writes(r, root):
                assert got is None and entry.rooted == "sink"
                continue
            assert got.shape == (outputs,)
            assert set(got) == {ranks} if entry.reduces else set(got) <= set(range(ranks))
            if entry.rooted == "source":
                assert set(got) == {root}


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_a_root_is_a_rank_of_the_team_and_only_rooted_ops_take_one(entry):
    if entry.rooted:
        assert entry.root(None, 4) == 0 and entry.root(3, 4) == 3 and entry.writes(3, 3)
        for bad in (4, -1, 1.0, True, "0"):
            with pytest.raises(ValueError, match=rf"^root: expected a rank of the team, 0 to 3, got {bad!r}$"):
                entry.root(bad, 4)
    else:
        assert entry.root(None, 4) is None and all(entry.writes(r, None) for r in range(4))
        with pytest.raises(ValueError, match=rf"^root: expected None \({entry.name} has no root\), got 0$"):
            entry.root(0, 4)


def test_an_entry_names_how_it_is_rooted_and_a_name_that_can_be_a_method():
    with pytest.raises(ValueError, match=r"rooted: expected None or one of \['source', 'sink'\], got 'leaf'"):
        R.CollectiveOp("copy", "", None, None, "", {}, rooted="leaf")
    with pytest.raises(ValueError, match=r"name: expected a Python identifier .*, got 'no-such-op'"):
        R.CollectiveOp("no-such-op", "", None, None, "", {})


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_bus_factor_is_a_share_of_the_message_and_described(entry):
    factors = [entry.bus_factor(n) for n in range(2, 9)]
    assert all(0 < f <= 2 for f in factors) and factors == sorted(factors)
    assert entry.traffic and entry.description
    assert R.bandwidths(entry.name, 10**9, 4, 1.0) == (1.0, entry.bus_factor(4))


def _kernels_in(source: str) -> dict:
    """Kernel name -> whether it is a template, for every __global__ function of a kernel file."""
    text = (KERNEL_DIR / source).read_text()
    return {m.group(2): bool(m.group(1)) for m in re.finditer(r"(template <typename T>\s*)?__global__ void (\w+)\(",
                                                              text)}


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_kernels_exist_in_their_files_one_per_algorithm(entry):
    """Each kernel an entry names is a __global__ function of its family's file, a template exactly when the op
    reduces; a family runs one kernel, or one per algorithm it lists. 'sm' and 'll' run exactly where the entry
    says Collectives has those mechanisms."""
    assert set(entry.kernels) <= set(R.KERNEL_FILES)
    for family, names in entry.kernels.items():
        found = _kernels_in(R.KERNEL_FILES[family])
        assert {n: found.get(n) for n in names} == {n: entry.reduces for n in names}, (family, found)
        assert len(names) == len(entry.algorithms.get(family, (None,))), family
    assert {m for m in entry.mechanisms if m in R.KERNEL_FILES} == {f for f in entry.kernels if f != "staged"}


@pytest.mark.parametrize("family, compiled", [("sm", C.SM_KERNELS), ("ll", C.LL_KERNELS),
                                              ("staged", pdist.STAGED_KERNELS)])
def test_each_module_compiles_every_kernel_of_its_file_once(family, compiled):
    """The name expressions a module hands NVRTC for its family's file: every __global__ function there, none
    twice, a template once per summed C++ type (REDUCIBLE), any other kernel by its bare name."""
    found = _kernels_in(R.KERNEL_FILES[family])
    assert len(set(compiled)) == len(compiled), compiled
    assert set(compiled) == {f"{name}<{ctype}>" if template else name for name, template in found.items()
                             for ctype in (R.REDUCIBLE.values() if template else (None,))}


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_calls_of_torch_nccl_and_the_cpu_path_are_known(entry):
    """The torch.distributed function exists, the NCCL call is one the baseline makes, and a reduction's summands
    are a registered move that gives rank r one part per rank, in rank order."""
    import torch.distributed

    assert entry.torch is None or callable(getattr(torch.distributed, entry.torch))
    assert entry.nccl is None or entry.nccl in baselines.NCCL_CALLS
    if entry.reduces:
        moves = R.collective(entry.summands)
        assert not moves.reduces and moves.input_by_rank == entry.input_by_rank and moves.output_by_rank
    else:
        assert entry.summands is None


def test_every_place_exposes_exactly_the_registry_s_ops():
    names = set(R.COLLECTIVES)
    assert {n for n in names if callable(getattr(C.Collectives, n, None))} == names
    assert set(pdist.OPS) == {n for n, e in R.COLLECTIVES.items() if "staged" in e.kernels}
    assert all(getattr(pdist, n).__name__ == n for n in pdist.OPS)
    assert {n for n in names if hasattr(baselines.NcclCollectives, n)} == {n for n in names if baselines.runs(n)}
    assert set(torch_collectives.TORCH_OPS) == {n for n, e in R.COLLECTIVES.items() if e.torch}
    assert inspect.signature(experiment.sweep).parameters["ops"].default == tuple(R.COLLECTIVES)
    assert C.COLLECTIVES is R.COLLECTIVES
    assert set(ROOFLINE_COLLECTIVES) == {"send", *names}
    for name, entry in R.COLLECTIVES.items():
        assert [ROOFLINE_COLLECTIVES[name][0](n) for n in range(1, 9)] == [entry.bus_factor(n) for n in range(1, 9)]
        assert ROOFLINE_COLLECTIVES[name][1] == entry.traffic


def test_docs_give_the_recipe_with_its_files():
    """docs/collectives.md names every file an op touches: the registry and each kernel family's file."""
    text = (ROOT / "docs" / "collectives.md").read_text()
    recipe = text[text.index("## Adding a collective"):]
    recipe = recipe[:recipe.index("\n## ", 1)] if "\n## " in recipe[1:] else recipe
    for path in ["pkit/ops/collective_ops.py", *(f"pkit/kernels/{f}" for f in R.KERNEL_FILES.values())]:
        assert path in recipe, path


# --- launches and copy-engine plans derived from the layout --------------------------------------------------

class _Team(pkit.Team):
    """pkit.Team on the CPU with `size` ranks, one process driving them; nothing touches a GPU."""

    def __init__(self, size):  # not Team.__init__, which would look for the GPUs
        self.size, self.rank, self.devices, self._rank_streams = size, None, tuple(range(size)), {}


class _Memory:
    """A SymmetricArray stand-in over host memory: rank r's buffer is `ranks[r]` (float32), `[r].data.ptr` its byte
    offset in `flat`."""

    def __init__(self, team, ranks):
        self.team, self.ranks = team, ranks
        self.shape, self.dtype, self.storage_dtype = ranks[0].shape, "float32", np.dtype(np.float32)

    def __getitem__(self, r):
        return SimpleNamespace(data=SimpleNamespace(ptr=r))


class _Engines:
    """The copy engines' two calls, run on _Memory buffers as pkit/ops/copy_engine.py documents them."""

    def move(self, out, inp, nbytes, plan):
        n = len(inp.ranks)
        for r in range(n):
            for q in range(n):
                if (copy := plan(r, q)) is None:
                    continue
                dst, src, dst_off = copy
                out.ranks[dst][dst_off // 4:(dst_off + nbytes) // 4] = inp.ranks[r][src // 4:(src + nbytes) // 4]

    def reduce(self, out, inp, share, kernel, src_offset, out_offset, gather, owners=None):
        n = len(inp.ranks)
        for r in range(n) if owners is None else owners:
            a, b = src_offset(r) // 4, out_offset(r) // 4
            total = sum(inp.ranks[q][a:a + share // 4] for q in range(n))
            for q in range(n) if gather else [r]:
                out.ranks[q][b:b + share // 4] = total


def _run_on_host(entry, ranks, options):
    """Every rank's output of `entry` run by Collectives on host memory, with its launches recorded."""
    team, launches = _Team(ranks), []
    coll = C.Collectives(team)
    coll.__dict__["_copy_engines"] = _Engines()
    coll._kernel = lambda name, module=None: name
    coll._launch = lambda name, inp, out, n16, root=0: launches.append(("sm", name, n16, root))
    coll._launch_ll = lambda name, inp, out, n16, root=0: launches.append(("ll", name, n16, root))
    inputs, outputs = entry.counts(ranks * 64, ranks)
    rng = np.random.default_rng(ranks)
    xs = [rng.standard_normal(inputs).astype(np.float32) for _ in range(ranks)]
    out = _Memory(team, [np.full(outputs, np.nan, np.float32) for _ in range(ranks)])
    coll.run(entry.name, out, _Memory(team, xs), **options)
    return xs, out.ranks, launches


def _root_option(root):
    return {} if root is None else {"root": root}


@pytest.mark.parametrize("ranks", [2, 3, 8])
@pytest.mark.parametrize("entry", [e for e in ENTRIES if "ce" in e.mechanisms], ids=_ids)
def test_copy_engine_plans_give_the_reference_output(entry, ranks):
    """The copy-engine moves and reductions planned from an entry's layout, carried out on host memory, leave
    every rank's output equal to the entry's reference, for every algorithm and root; an output the reference
    leaves alone keeps its poison."""
    for algorithm in entry.algorithms.get("ce", (None,)):
        for root in _roots(entry, ranks):
            options = {"mechanism": "ce", **({"algorithm": algorithm} if algorithm else {}), **_root_option(root)}
            xs, outs, launches = _run_on_host(entry, ranks, options)
            assert launches == []
            for r in range(ranks):
                want = entry.reference(xs, r, *([] if root is None else [root]))
                if want is None:
                    assert np.isnan(outs[r]).all(), f"{options} rank {r} was written"
                else:
                    np.testing.assert_allclose(outs[r], want, rtol=1e-6, err_msg=f"{options} rank {r}")


@pytest.mark.parametrize("ranks", [2, 3, 8])
@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_kernel_launches_send_one_piece_per_peer(entry, ranks):
    """Each 'sm' and 'll' form launches the entry's kernel of that family, compiled into its module, over the packs
    of one piece (two-shot: one share of the whole buffer), with the call's root (0 for an op without one)."""
    piece = entry.per_peer(ranks * 64, ranks) * 4
    for options in [f for f in entry.forms() if f["mechanism"] in ("sm", "ll")]:
        for root in _roots(entry, ranks):
            family, algorithm = options["mechanism"], options.get("algorithm")
            _, _, launches = _run_on_host(entry, ranks, {**options, **_root_option(root)})
            name = entry.kernel(family, "float" if entry.reduces else None, algorithm)
            n16 = (piece // ranks if algorithm == "two_shot" else piece) // 16
            assert launches == [(family, name, n16, root or 0)]
            assert name in (C.SM_KERNELS if family == "sm" else C.LL_KERNELS)
