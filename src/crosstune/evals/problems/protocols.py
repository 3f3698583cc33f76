"""Named evaluation protocols: the sampling, prompt and task settings a published number was measured with.

`codev-r1` is what CodeV-R1's benchmark script runs (IPRC-DIP/CodeV-R1 test/benchmark_runner.sh): n = 20,
16,384 new tokens, 0-shot, their <think>/<answer> prompt; T = 1.0 / top_p = 1 on VerilogEval v2 (spec-to-rtl and
code-complete-iccad2023), T = 1 / top_p = 0.95 on RTLLM. `codev-r1-card` is their model card's sampling
(n = 20, T = 0.6, 16,384 tokens; top_p 0.95, see docs/EVAL_SANDBOX.md). Explicit options override a preset;
summary.json records the preset and every setting that departs from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crosstune.evals.problems.benchmark import CODE_COMPLETE, RTLLM, SPEC_TO_RTL
from crosstune.evals.problems.prompt_styles import CODEV

SETTINGS = ("n", "k", "temperature", "top_p", "max_tokens", "prompt_style", "shots")


@dataclass(frozen=True)
class Protocol:
    name: str
    summary: str
    source: str
    n: int
    ks: tuple[int, ...]
    max_tokens: int
    prompt_style: str
    shots: int
    tasks: tuple[str, ...]  # the VerilogEval tasks and RTLLM it covers, in the order they run
    sampling: dict[str, tuple[float, float]] = field(default_factory=dict)  # suite -> (temperature, top_p)

    def settings(self, suite: str) -> dict:
        """The protocol's settings for a problem set of `suite` ("verilogeval" or "rtllm")."""
        temperature, top_p = self.sampling[suite]
        return {
            "n": self.n,
            "k": list(self.ks),
            "temperature": temperature,
            "top_p": top_p,
            "max_tokens": self.max_tokens,
            "prompt_style": self.prompt_style,
            "shots": self.shots,
        }


_CODEV = {"n": 20, "ks": (1, 5, 10), "max_tokens": 16384, "prompt_style": CODEV, "shots": 0,
          "tasks": (SPEC_TO_RTL, CODE_COMPLETE, RTLLM)}  # fmt: skip
PROTOCOLS: dict[str, Protocol] = {
    "codev-r1": Protocol(
        name="codev-r1",
        summary="CodeV-R1's benchmark script: n=20, 16,384 new tokens, 0-shot codev prompt; T=1.0/top_p=1 on "
        "VerilogEval v2 (spec-to-rtl, code-complete-iccad2023), T=1/top_p=0.95 on RTLLM",
        source="IPRC-DIP/CodeV-R1 test/benchmark_runner.sh",
        sampling={"verilogeval": (1.0, 1.0), "rtllm": (1.0, 0.95)},
        **_CODEV,
    ),
    "codev-r1-card": Protocol(
        name="codev-r1-card",
        summary="CodeV-R1's model card: n=20, T=0.6, top_p=0.95, 16,384 new tokens, 0-shot codev prompt",
        source="the CodeV-R1 model card (arXiv 2505.24183)",
        sampling={"verilogeval": (0.6, 0.95), "rtllm": (0.6, 0.95)},
        **_CODEV,
    ),
}


class UnknownProtocol(ValueError):
    pass


def get_protocol(name: str) -> Protocol:
    if name not in PROTOCOLS:
        raise UnknownProtocol(f"unknown protocol {name!r}; choose one of {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def protocol_record(name: str | None, suite: str, used: dict) -> dict:
    """What summary.json says about the protocol: its name ("custom" without one), the settings used, and for a
    preset its source and every setting that departs from it (`follows` is true when none does)."""
    used = {key: used[key] for key in SETTINGS}
    if name is None:
        return {"name": "custom", "settings": used}
    preset = get_protocol(name).settings(suite)
    deviations = {key: {"protocol": preset[key], "used": used[key]} for key in SETTINGS if preset[key] != used[key]}
    return {
        "name": name,
        "source": get_protocol(name).source,
        "settings": used,
        "deviations": deviations,
        "follows": not deviations,
    }
