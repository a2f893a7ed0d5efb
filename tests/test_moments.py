"""``coordcheck.record.moments``: the one definition of the moments both probes reduce, checked against torch
directly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coordcheck.record.moments import (
    ABSMAX, MEAN, MOMENTS, N, VAR, batched_moments, masked_moments, moment_rows, moment_terms, moments, needed_moments,
    pool_calls, pool_moments, stats_from_moments,
)

STATS = ["std", "l1", "rms", "mean", "absmax"]


def _rows(x: torch.Tensor, which=MOMENTS) -> np.ndarray:
    return moment_rows(np.array([x.numel()]), moments(x, which).double().numpy(), which)


def _want(x: torch.Tensor) -> list[float]:
    """std as torch.std (with n - 1, like the probes), then l1, rms, mean, absmax."""
    x = x.double()
    return [x.std().item(), x.abs().mean().item(), x.square().mean().sqrt().item(), x.mean().item(),
            x.abs().max().item()]


def test_statistics_from_moments_match_torch():
    x = torch.randn(4, 7, generator=torch.Generator().manual_seed(0)) * 3 + 100  # a large mean: the shift matters
    np.testing.assert_allclose(stats_from_moments(_rows(x), STATS)[0], _want(x), rtol=1e-5)


def test_a_probe_reduces_only_the_moments_its_statistics_need():
    which = needed_moments(["l1"])
    assert set(which) < set(MOMENTS) and "abssum" in which
    x = torch.randn(10)
    row = _rows(x, which)
    assert row[0, N] == 10 and np.isnan(row[0, MEAN]) and np.isnan(row[0, ABSMAX])
    assert stats_from_moments(row, ["l1"])[0, 0] == pytest.approx(x.abs().mean().item(), rel=1e-6)


def test_pooled_moments_are_the_moments_of_the_union():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, generator=g), torch.randn(9, generator=g) + 2
    pooled = pool_moments(_rows(a)[0], _rows(b)[0])
    np.testing.assert_allclose(pooled, _rows(torch.cat([a, b]))[0], rtol=1e-5)
    keys, rows = pool_calls(["fc", "fc", "head"], np.stack([_rows(a)[0], _rows(b)[0], _rows(b)[0]]))
    assert keys == ["fc", "head"] and rows[0, N] == 14 and rows[1, N] == 9


def test_masked_moments_see_only_the_kept_entries():
    x = torch.tensor([[1.0, -2.0, -1e9], [3.0, -1e9, -1e9]])
    keep = x > -1e4
    m = masked_moments(x, keep).double().numpy()
    kept = x[keep].double()
    assert m[N] == 3 and m[MEAN] == pytest.approx(kept.mean().item())
    assert m[VAR] == pytest.approx(kept.var(unbiased=False).item()) and m[ABSMAX] == 3.0


def test_batched_moments_equal_one_tensor_at_a_time():
    g = torch.Generator().manual_seed(2)
    flats = [torch.randn(n, generator=g) * s for n, s in ((1, 1.0), (17, 5.0), (64, 0.01))]
    torch.testing.assert_close(batched_moments(flats), torch.stack([moments(f) for f in flats]), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("which", [MOMENTS, needed_moments(["l1"]), needed_moments(["mean", "absmax"])])
def test_moment_terms_in_a_scratch_buffer_equal_fresh_ones_and_own_their_values(which):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(6, 5, generator=g) * 2 - 1).t()  # not contiguous
    fresh = moments(x, which)
    scratch = torch.full((x.numel(),), float("nan"))
    terms = moment_terms(x, which, scratch)
    x.zero_()  # an in-place op after the reduction (a ReLU(inplace=True) after the hook)
    scratch.fill_(7.0)  # the next tensor's temporaries
    assert all(t.shape == (1,) for t in terms)
    assert torch.equal(torch.cat(terms), fresh)


@pytest.mark.parametrize("which", [MOMENTS, needed_moments(["l1"]), needed_moments(["std", "absmax"])])
def test_moment_terms_through_a_shaped_scratch_view_are_bit_identical_to_the_flat_path(which):
    g = torch.Generator().manual_seed(4)
    for x in (torch.randn(3, 7, 5, generator=g) * 3 + 2, (torch.randn(6, 5, generator=g) - 1).t(),  # not contiguous
              torch.randn(40, generator=g), torch.full((4, 4), 0.1)):
        scratch = torch.full((x.numel(),), float("nan"))
        flat = torch.cat(moment_terms(x, which, scratch))
        shaped = moment_terms(x, which, scratch, scratch.view(x.shape))
        assert all(t.shape == (1,) for t in shaped)
        assert torch.equal(torch.cat(shaped), flat)
        assert torch.equal(flat, moments(x, which))
    x = torch.randn(8, 8, generator=g)
    scratch = torch.empty(64)
    before = moment_terms(x, which, scratch, scratch.view(8, 8))
    want = torch.cat(before).clone()
    x.zero_()  # no term is a view of x
    assert torch.equal(torch.cat(before), want)
