"""pass@k's 95 % interval and the paired test between two evaluations, against values worked out by hand."""

from __future__ import annotations

import pytest

from crosstune.evals.judge.scoring import ProblemScore, markdown_report, pass_at_k, summarize
from crosstune.evals.judge.significance import CI_METHOD, bootstrap_interval, paired_permutation_test


def test_interval_of_identical_values_is_the_value():
    assert bootstrap_interval([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert bootstrap_interval([1.0]) == (1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_interval([])


def test_interval_of_half_passing_problems_is_the_binomial_quantiles():
    # 40 problems, 20 pass: a resample's mean is X/40 with X ~ Binomial(40, 1/2). P(X <= 13) = 0.019 and
    # P(X <= 14) = 0.040, so the 2.5 % quantile is 14/40 = 0.35, and by symmetry the 97.5 % one is 26/40 = 0.65.
    # Neither quantile lies near a jump (0.025 is over 4 standard errors of a 10,000-resample CDF away from 0.019
    # and from 0.040), so the seeded bootstrap lands on them exactly.
    assert bootstrap_interval([1.0] * 20 + [0.0] * 20) == (0.35, 0.65)


def test_interval_of_three_problems_spans_the_extremes():
    # [0, 0.5, 1]: all three draws equal the smallest value with probability 1/27 = 3.7 % > 2.5 %, so the lower
    # bound is 0; likewise the upper bound is 1.
    assert bootstrap_interval([0.0, 0.5, 1.0]) == (0.0, 1.0)


def test_paired_test_on_greedy_outcomes_is_exact_mcnemar():
    # 10 problems: A passes 8, B passes 2, and the 6 problems they disagree on all favour A.
    a = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    b = [0, 0, 0, 0, 0, 0, 1, 1, 0, 0]
    test = paired_permutation_test(a, b)
    assert test.p_value == pytest.approx(2 * 0.5**6)  # both all-same-sign patterns of 6 flips: 2/64 = 0.03125
    assert (test.differing, test.exact, test.significant, test.difference) == (6, True, True, pytest.approx(0.6))
    # 5 disagreements favour A, 1 favours B: |sum of 6 signs| >= 4 for 0, 1, 5 or 6 plus signs: (1+6+6+1)/64
    swapped = paired_permutation_test([1, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 1])
    assert swapped.p_value == pytest.approx(14 / 64) and not swapped.significant


def test_paired_test_on_fractional_scores_enumerates_the_sign_patterns():
    # Differences 0.4, 0.2, -0.2, 0.6 (sum 1.0). Of the 16 sign patterns of magnitudes {0.4, 0.2, 0.2, 0.6}, the
    # sums of at least 1.0 are 1.4 and 1.0 (twice: either 0.2 flipped), and as many are <= -1.0: 6/16.
    test = paired_permutation_test([0.8, 0.6, 0.2, 1.0, 0.5], [0.4, 0.4, 0.4, 0.4, 0.5])
    assert test.p_value == pytest.approx(6 / 16) and test.problems == 5 and test.differing == 4


def test_paired_test_samples_sign_flips_beyond_sixteen_differences_and_is_seeded():
    a, b = [1.0] * 30, [0.0] * 30  # exact p would be 2 / 2**30: the seeded sampling reports its floor instead
    first, again = paired_permutation_test(a, b), paired_permutation_test(a, b)
    assert not first.exact and first.resamples == 100_000 and first.p_value == again.p_value < 1e-4
    assert paired_permutation_test([0.3, 0.3], [0.3, 0.3]).p_value == 1.0  # nothing differs
    with pytest.raises(ValueError):
        paired_permutation_test([1.0], [1.0, 0.0])


def test_summary_carries_the_interval_and_its_method():
    scores = [ProblemScore(f"p{i}", list("." if i < 20 else "R")) for i in range(40)]
    summary = summarize(scores, [1], "strict")
    assert summary["pass_at_k"] == {"1": 0.5} and summary["pass_at_k_ci"] == {"1": [0.35, 0.65]}
    assert summary["pass_at_k_ci_method"]["method"] == CI_METHOD and summary["pass_at_k_ci_method"]["level"] == 0.95
    assert "- pass@1: 50.0 % (95 % interval 35.0–65.0 %, percentile bootstrap over problems)" in markdown_report(
        summary
    )
    assert summarize(scores, [5], "strict")["pass_at_k_ci"] == {"5": None}  # k > n: nothing to bound


def test_pass_at_k_with_fewer_samples_than_k_stays_refused():
    with pytest.raises(ValueError, match="need 1 <= k <= n"):
        pass_at_k(3, 1, 5)
