"""accept / accept_greedy: Triton kernels vs loop reference, and the output distribution
(CPU: TRITON_INTERPRET=1, small sizes)."""

import importlib
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from dspark_sim.kernels import accept, accept_greedy, accept_ref  # noqa: E402
from dspark_sim.kernels.baseline import accept_greedy_torch, accept_torch  # noqa: E402
from dspark_sim.kernels.cases import accept_case  # noqa: E402

accept_mod = importlib.import_module("dspark_sim.kernels.accept")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def assert_same(out, ref):
    torch.testing.assert_close(out[0].cpu(), ref[0].cpu(), rtol=0, atol=0)
    torch.testing.assert_close(out[1].cpu(), ref[1].cpu(), rtol=0, atol=0)


def greedy_args(args):
    return dict(args, draft_probs=None)


@pytest.mark.parametrize(
    "R,block_size,V,logits_dtype",
    [(1, 0, 37, torch.float32), (1, 4, 300, torch.bfloat16), (5, 3, 1000, torch.bfloat16), (6, 5, 777, torch.float32)],
)
def test_sampling_matches_reference(R, block_size, V, logits_dtype):
    args, W = accept_case(R, block_size, V, DEVICE, seed=R * 7 + V, logits_dtype=logits_dtype, ragged=True)
    assert_same(accept(**args, max_window=W), accept_ref(**args, max_window=W))


@pytest.mark.parametrize("R,block_size,V", [(1, 5, 129), (7, 7, 1000)])
def test_greedy_matches_reference_and_target_greedy(R, block_size, V):
    args, W = accept_case(R, block_size, V, DEVICE, seed=V, ragged=True, sharpness=0.3)
    # Drafts that mostly agree with the target argmax, so windows run long.
    top = args["target_logits"].float().argmax(-1)
    flip = torch.rand(top.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE) < 0.15
    args["draft_tokens"] = torch.where(flip, (top + 1) % V, top)
    acc, out = accept_greedy(args["target_logits"], args["indptr"], args["draft_tokens"], max_window=W)
    assert_same((acc, out), accept_ref(**greedy_args(args), max_window=W))
    # Greedy output equals target-only greedy: every emitted token is the target argmax of its row.
    starts = args["indptr"][:-1].tolist()
    for r, start in enumerate(starts):
        emitted = out[r, : int(acc[r]) + 1].tolist()
        assert emitted == top[start : start + len(emitted)].tolist()


def test_mixed_and_extreme_temperatures():
    args, W = accept_case(6, 4, 500, DEVICE, seed=2, ragged=True)
    args["temperature"] = torch.tensor([0.0, 1e-3, 1e3, 1.0, 0.0, 0.7], device=DEVICE)
    assert_same(accept(**args, max_window=W), accept_ref(**args, max_window=W))


def test_everything_accepted_then_bonus():
    args, W = accept_case(3, 4, 300, DEVICE, seed=4)
    args["uniforms"] = torch.zeros_like(args["uniforms"])  # u * q < p whenever p > 0
    acc, out = accept(**args, max_window=W)
    assert acc.tolist() == [4, 4, 4]
    assert_same((acc, out), accept_ref(**args, max_window=W))


def test_first_token_rejected():
    args, W = accept_case(4, 3, 200, DEVICE, seed=5)
    q = torch.full_like(args["draft_probs"], 0.0)
    q[torch.arange(q.shape[0]), args["draft_tokens"]] = 1.0  # a one-hot draft: accepted with prob p(x)
    args["draft_probs"] = q
    args["uniforms"] = torch.full_like(args["uniforms"], 0.999999)
    acc, out = accept(**args, max_window=W)
    assert acc.tolist() == [0, 0, 0, 0]
    assert_same((acc, out), accept_ref(**args, max_window=W))
    # The corrected token never repeats the rejected one-hot draft (its residual mass is 0).
    starts = args["indptr"][:-1]
    assert not torch.any(out[:, 0] == args["draft_tokens"][starts.long()].int())


def test_windows_of_one_row():
    args, W = accept_case(5, 0, 100, DEVICE, seed=6)
    acc, out = accept(**args, max_window=W)
    assert acc.tolist() == [0] * 5 and out.shape == (5, 1)
    assert_same((acc, out), accept_ref(**args, max_window=W))


def _no_rows_args(R: int, V: int) -> dict:
    """accept's arguments for R requests whose windows are all empty (no logit row at all)."""
    return dict(target_logits=torch.empty(0, V, dtype=torch.bfloat16, device=DEVICE),
                indptr=torch.zeros(R + 1, dtype=torch.int32, device=DEVICE),
                draft_tokens=torch.empty(0, dtype=torch.int64, device=DEVICE),
                draft_probs=torch.empty(0, V, device=DEVICE), temperature=torch.ones(R, device=DEVICE),
                uniforms=torch.empty(0, device=DEVICE), resample_uniforms=torch.rand(R, device=DEVICE))


@pytest.mark.parametrize("R", [1, 3])
def test_no_rows_at_all_accepts_nothing(R):
    """A step whose prompt chunks all stop short of their prompts judges no row: N = 0. The
    kernels return no token for every request (as the reference does) and launch nothing
    that could read row -1 - on a GPU that read faulted."""
    args, want = _no_rows_args(R, 300), ([0] * R, [[-1] * 4] * R)
    for fn in (accept, accept_ref, accept_torch):
        acc, out = fn(**args, max_window=4)
        assert (acc.tolist(), out.tolist()) == want
    for fn in (accept_greedy, accept_greedy_torch):
        acc, out = fn(args["target_logits"], args["indptr"], args["draft_tokens"], max_window=4)
        assert (acc.tolist(), out.tolist()) == want


def test_empty_windows_beside_full_ones_match_the_reference():
    """Requests of length 0 (at the start, between others and at the end, where the row
    they would sample lies past the last one) emit nothing; the others are judged as alone."""
    args, W = accept_case(3, 3, 300, DEVICE, seed=11)
    lengths = torch.tensor([0, 4, 0, 4, 4, 0], dtype=torch.int32)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(lengths, 0, dtype=torch.int32)])
    args = dict(args, indptr=indptr.to(DEVICE), temperature=torch.tensor([1.0, 1.0, 0.0, 0.7, 0.0, 1.0], device=DEVICE),
                resample_uniforms=torch.rand(6, device=DEVICE))
    ref = accept_ref(**args, max_window=W)
    assert ref[1][[0, 2, 5]].eq(-1).all()
    assert_same(accept(**args, max_window=W), ref)
    assert_same(accept_greedy(args["target_logits"], args["indptr"], args["draft_tokens"], max_window=W),
                accept_ref(**greedy_args(args), max_window=W))
    assert_same(accept_torch(**args, max_window=W), ref)


def test_default_configs_take_a_shape_with_no_rows():
    from dspark_sim.kernels import autotune

    for kernel, shape in [("accept_row_stats", {"V": 300, "N": 0}), ("accept_residual", {"V": 300, "R": 0})]:
        cfg = autotune.default_config(kernel, shape, 132, interpret=False)
        assert cfg["SPLITS"] >= 1 and cfg["BLOCK_V"] > 0


@pytest.mark.parametrize("splits,block_v", [(1, 64), (3, 64), (4, 128)])
def test_splits_and_blocks_not_dividing_vocab(splits, block_v):
    args, W = accept_case(3, 3, 1000, DEVICE, seed=splits, ragged=True)
    cfg = {"BLOCK_V": block_v, "SPLITS": splits, "num_warps": 4, "num_stages": 1, "PREFETCH": int(splits == 3)}
    ref = accept_ref(**args, max_window=W)
    assert_same(accept_mod.run_accept(args, W, {"row_stats": cfg, "residual": cfg}), ref)
    assert_same(accept_mod.run_accept(greedy_args(args), W, {"row_stats": cfg, "residual": cfg}),
                accept_ref(**greedy_args(args), max_window=W))


def test_deterministic_and_every_output_written():
    args, W = accept_case(4, 5, 400, DEVICE, seed=9, ragged=True)
    first, second = accept(**args, max_window=W), accept(**args, max_window=W)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    lengths = (args["indptr"][1:] - args["indptr"][:-1]).cpu()
    for r in range(4):
        n = int(first[0][r])
        row = first[1][r].tolist()
        assert all(t >= 0 for t in row[: n + 1]) and all(t == -1 for t in row[n + 1 :])
        assert n <= int(lengths[r]) - 1


def test_torch_baseline_matches_reference():
    for seed, (R, block_size, V) in enumerate([(1, 3, 50), (9, 5, 700)]):
        args, W = accept_case(R, block_size, V, "cpu", seed=seed, ragged=True)
        args["temperature"][0] = 0.0
        assert_same(accept_torch(**args, max_window=W), accept_ref(**args, max_window=W))
        greedy = accept_greedy_torch(args["target_logits"], args["indptr"], args["draft_tokens"], max_window=W)
        assert_same(greedy, accept_ref(**greedy_args(args), max_window=W))


def test_output_follows_target_distribution():
    """Chi-square: the first emitted token (accepted draft or residual resample) and the
    bonus token after an accepted draft are both distributed as the target p."""
    scipy_stats = pytest.importorskip("scipy.stats")
    R, V = 160, 4
    g = torch.Generator().manual_seed(123)
    target = torch.tensor([[1.2, 0.2, -0.4, 0.6], [0.0, 1.0, 0.3, -1.0]])
    draft = torch.softmax(torch.tensor([0.0, 1.4, 0.9, -0.5]), 0)
    logits = target.repeat(R, 1)  # rows alternate: judge of draft 1, then the bonus row
    q = draft.repeat(2 * R, 1)
    drafts = torch.multinomial(q, 1, replacement=True, generator=g).view(-1)
    args = dict(
        target_logits=logits.to(DEVICE), indptr=torch.arange(0, 2 * R + 1, 2, dtype=torch.int32, device=DEVICE),
        draft_tokens=drafts.to(DEVICE), draft_probs=q.to(DEVICE), temperature=torch.ones(R, device=DEVICE),
        uniforms=torch.rand(2 * R, generator=g).to(DEVICE), resample_uniforms=torch.rand(R, generator=g).to(DEVICE),
    )
    acc, out = (x.cpu() for x in accept(**args, max_window=2))
    p = torch.softmax(target, -1)

    def pvalue(tokens, probs):
        counts = torch.bincount(tokens.long(), minlength=V).double()
        return scipy_stats.chisquare(counts, probs.double() / probs.double().sum() * counts.sum()).pvalue

    assert pvalue(out[:, 0], p[0]) > 1e-3
    bonus = out[acc == 1, 1]
    assert bonus.numel() > 30
    assert pvalue(bonus, p[1]) > 1e-3
    # Power: the same number of draws from the draft distribution fails the test.
    from_draft = torch.multinomial(draft, R, replacement=True, generator=g)
    assert pvalue(from_draft, p[0]) < 1e-3


def test_argument_errors():
    args, W = accept_case(2, 2, 50, DEVICE, seed=0)
    with pytest.raises(ValueError, match="indptr"):
        accept(**dict(args, indptr=args["indptr"].long()), max_window=W)
    with pytest.raises(ValueError, match="draft_probs"):
        accept(**dict(args, draft_probs=args["draft_probs"][:, :10]), max_window=W)
    with pytest.raises(ValueError, match="temperature"):
        accept(**dict(args, temperature=args["temperature"][:1]), max_window=W)
