"""How sure a pass@k is: a bootstrap interval over problems, and a paired test between two evaluations of the same
problems. scipy.stats does the resampling; this module fixes the choices (level, resamples, seed) and names them.

Both treat the problem as the unit. pass@k is a mean of N per-problem estimates, so resampling problems measures
its spread, and each estimate already carries the noise of its own n samples: the interval answers "how would
this model score on another problem set drawn like this one". Two models on the same problems are compared
problem by problem (a paired test), which takes the problems' own difficulty out of the comparison. numpy and
scipy are imported when first used: the simulation workers import this package and never need them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

CI_LEVEL = 0.95
CI_RESAMPLES = 10_000
CI_SEED = 0
CI_METHOD = "percentile bootstrap over problems"
TEST_NAME = "paired permutation test over problems"
TEST_RESAMPLES = 100_000
TEST_EXACT_UP_TO = 16  # problems that differ: up to 2**16 sign patterns are enumerated, beyond that sampled
SIGNIFICANCE = 0.05


def interval_method() -> dict:
    """What summary.json says about its pass_at_k_ci."""
    return {
        "method": CI_METHOD,
        "level": CI_LEVEL,
        "resamples": CI_RESAMPLES,
        "seed": CI_SEED,
        "unit": "problem (per-problem pass@k, as averaged by pass_at_k)",
    }


def bootstrap_interval(
    values: Sequence[float], level: float = CI_LEVEL, resamples: int = CI_RESAMPLES, seed: int = CI_SEED
) -> tuple[float, float]:
    """[low, high] of the mean of `values` at `level`: the percentile bootstrap, resampling the values (problems)
    with replacement `resamples` times from a generator seeded with `seed` (the same inputs give the same bounds)."""
    import numpy as np
    from scipy import stats

    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("a confidence interval needs at least one value")
    if np.all(data == data[0]):  # every resample has the same mean (scipy warns on such degenerate data)
        return float(data[0]), float(data[0])
    result = stats.bootstrap(
        (data,),
        np.mean,
        n_resamples=resamples,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison of two evaluations' per-problem scores (a minus b)."""

    test: str
    problems: int
    differing: int  # problems whose scores differ: only these carry information
    mean_a: float
    mean_b: float
    difference: float
    p_value: float
    exact: bool  # every sign pattern enumerated (else `resamples` sampled ones)
    resamples: int | None

    @property
    def significant(self) -> bool:
        return self.p_value < SIGNIFICANCE

    def to_dict(self) -> dict:
        return {**asdict(self), "significant_at": SIGNIFICANCE, "significant": self.significant}


def _mean(x, axis: int = -1):
    import numpy as np

    return np.mean(x, axis=axis)


def paired_permutation_test(
    a: Sequence[float], b: Sequence[float], resamples: int = TEST_RESAMPLES, seed: int = CI_SEED
) -> PairedTest:
    """Two-sided test that two evaluations score the same on average, from their scores on the same problems.

    Under the null hypothesis each problem's difference a_i - b_i is as likely positive as negative, so the
    statistic (the mean difference) is compared with its values under every flip of the differences' signs:
    exactly when at most TEST_EXACT_UP_TO problems differ, else over `resamples` random flips (seeded). Problems
    with equal scores cannot flip anything and are left out, which changes no p-value. For 0/1 scores (greedy
    pass@1) this is the exact McNemar test.
    """
    import numpy as np
    from scipy import stats

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"a paired test needs two equally long, non-empty score lists, got {x.size} and {y.size}")
    differences = x - y
    nonzero = differences[differences != 0]
    exact = nonzero.size <= TEST_EXACT_UP_TO
    if nonzero.size <= 1:  # one problem differs: its two signs give |statistic| = observed both times
        p_value = 1.0
    else:
        result = stats.permutation_test(
            (nonzero,),
            _mean,
            permutation_type="samples",
            alternative="two-sided",
            n_resamples=np.inf if exact else resamples,
            rng=np.random.default_rng(seed),
        )
        p_value = float(result.pvalue)
    return PairedTest(
        test=TEST_NAME,
        problems=int(x.size),
        differing=int(nonzero.size),
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        difference=float(differences.mean()),
        p_value=min(1.0, p_value),
        exact=exact,
        resamples=None if exact else resamples,
    )
