"""The fuzzer's checks catch what they look for (in the default suite: no command is run): a canary read through a
link, a canary folder listed, a canary written, the token in a file of the tree; an ending crosstune does not own
(a traceback, exit 2 without a usage error, a refusal of two lines, a kill at the limit); and a case's inputs are a
function of its seed alone."""

from __future__ import annotations

import random

from tests.fuzz import hostile
from tests.fuzz.harness import Outcome
from tests.fuzz.session import shell_word
from tests.fuzz.verdict import Canaries, canary_problems, ending_problems, leaks

USAGE = "Usage: crosstune eval [OPTIONS]\nTry 'crosstune eval --help' for help.\n"
CODES = frozenset({0, 1, 2})


def _canaries(tmp_path) -> Canaries:
    canaries = Canaries(tmp_path / "canary", "CANARY0123")
    canaries.make({"secret.txt": "TOKEN\n", "folder/inner.txt": "TOKEN\n"})
    canaries.age()
    return canaries


def _problems(canaries: Canaries, act) -> list[str]:
    before, digest = canaries.snapshot(), canaries.digest()
    act()
    return canary_problems(canaries, before, canaries.snapshot(), (digest, canaries.digest()))


def test_a_canary_read_through_a_link_listed_or_written_is_seen(tmp_path):
    canaries = _canaries(tmp_path)
    (tmp_path / "link").symlink_to(canaries.root / "secret.txt")
    assert _problems(canaries, lambda: None) == []  # the checks themselves read nothing they report
    assert _problems(canaries, lambda: (tmp_path / "link").read_text()) == [
        f"canary {canaries.root / 'secret.txt'} was read (its atime moved)"
    ]
    canaries.age()
    assert _problems(canaries, lambda: list((canaries.root / "folder").iterdir())) == [
        f"canary {canaries.root / 'folder'} was listed (its atime moved)"
    ]
    canaries.age()
    changed = _problems(canaries, lambda: (canaries.root / "folder" / "inner.txt").write_text("x"))
    assert f"canary {canaries.root / 'folder' / 'inner.txt'} was changed (type, size or mtime)" in changed
    canaries.age()
    assert _problems(canaries, lambda: (canaries.root / "new").write_text("x"))[-1].endswith("new appeared")


def test_the_token_is_found_in_output_in_the_tree_and_in_requests_but_links_are_not_followed(tmp_path):
    canaries = _canaries(tmp_path)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(canaries.root / "secret.txt")
    quiet = Outcome(0, "", "", 1.0)
    assert leaks(canaries.token, quiet, tree, "") == []
    (tree / "out.json").write_text(f'{{"x": "{canaries.token}"}}')
    assert leaks(canaries.token, Outcome(0, canaries.token, "", 1.0), tree, canaries.token) == [
        "the canary token is in the command's stdout",
        "the canary token was sent to the endpoint",
        f"the canary token is in {tree / 'out.json'}",
    ]


def test_an_ending_crosstune_does_not_own_is_named():
    assert ending_problems(Outcome(1, "", "error: x.yaml:3: not valid YAML\n", 1.0), CODES, 60) == []
    assert ending_problems(Outcome(2, "", USAGE + "Error: No such option: --nn\n", 1.0), CODES, 60) == []
    boxed = "│ Invalid value for '--n': Input should be a valid integer, unable to │\n│ parse string │"
    assert ending_problems(Outcome(2, "", USAGE + boxed, 1.0), CODES, 60) == []  # typer's own, in its box
    recipe = "error: r.yaml:3: error at a: bad\nr.yaml:5: error at b: worse\n"
    assert ending_problems(Outcome(1, "", recipe, 1.0), CODES, 60) == []  # one line per problem of a recipe
    spaced = "error: r\\npush: true.yaml:3: warning at a: odd\nr\\npush: true.yaml:5: error at b: bad\n"
    assert ending_problems(Outcome(1, "", spaced, 1.0), CODES, 60) == []  # its file's name with a space in it
    assert ending_problems(Outcome(None, "", "", 60.0), CODES, 60) == [
        "still running after the wall-clock limit of 60 s (killed)"
    ]
    assert ending_problems(Outcome(-9, "", "", 1.0), CODES, 60) == [
        "exit status -9 (signal 9), expected one of [0, 1, 2]"
    ]
    assert ending_problems(Outcome(1, "", "Traceback (most recent call last):\nValueError: x\n", 1.0), CODES, 60) == [
        "a traceback in the output",
        "exit 1 on a bare exception message, not crosstune's `error: ...`",
    ]
    assert ending_problems(Outcome(2, "", USAGE + "Error: --tp must be positive\n", 1.0), CODES, 60) == [
        "exit 2 without one of typer's own usage errors"
    ]
    assert ending_problems(Outcome(1, "", "error: x\nmore about x\n", 1.0), CODES, 60) == [
        "the refusal is not one line (stderr goes on after `error: ...`)"
    ]
    assert ending_problems(Outcome(1, "", "", 1.0), CODES, 60) == ["exit 1 without a word"]
    bug = "error: a bug in crosstune: KeyError: 'x'; its traceback is in /c/crashes/1.txt\n"
    assert ending_problems(Outcome(1, "", bug, 1.0), CODES, 60) == ["a bug line (an unexpected exception)"]


def test_hostile_inputs_are_a_function_of_the_seed(tmp_path):
    def draw(seed: int, folder):
        rng = random.Random(f"{seed}:x:1")
        folder.mkdir()
        (folder / "r.yaml").write_text("a: 1\nb: [1, 2]\nc: {d: x}\n")
        return (
            hostile.write_content(rng, folder / "r.yaml", "yaml"),
            (folder / "r.yaml").read_bytes(),
            [hostile.value(rng) for _ in range(5)],
        )

    assert draw(0, tmp_path / "a") == draw(0, tmp_path / "b")
    assert len({draw(seed, tmp_path / f"s{seed}")[1] for seed in range(8)}) > 1  # not one fixed input


def test_a_reproduction_line_quotes_what_a_shell_would_mangle():
    assert shell_word("a b") == "'a b'" and shell_word("plain") == "plain"
    assert shell_word("a\nb") == "$'a\\x0ab'" and shell_word("\udcff") == "$'\\xff'"


def _walk_everything(root: str) -> None:
    """What a hostile case's command may do (`--problems /`): read every folder and file it can reach."""
    import os

    from tests.fuzz.harness import drop_permission_override

    drop_permission_override()
    for here, _, files in os.walk(root):
        for name in files:
            try:
                with open(os.path.join(here, name), "rb") as f:
                    f.read(1)
            except OSError:
                pass


def test_another_case_walking_everything_reaches_no_case_s_canaries(tmp_path):
    """Verdicts reproduce alone and in parallel: a case's folder sits in an unlisted folder (0311) and every command
    runs with file permissions binding it even as root, so another case's walk of the whole tree (it listed and read
    4 of 11 failing cases' canaries, which then passed alone) reaches none of them."""
    cases = tmp_path / "cases"
    cases.mkdir(mode=0o311)
    cases.chmod(0o311)
    case = cases / "eval-3-0123456789abcdef"
    canaries = Canaries(case / "canary", "CANARY0123")
    canaries.make({"secret.txt": "TOKEN\n", "folder/inner.txt": "TOKEN\n"})
    canaries.age()
    try:
        problems = _problems(canaries, lambda: _in_a_child(_walk_everything, str(tmp_path)))
        assert problems == []
        # the control: the same walk with root's override (a process the fuzzer did not start) reads them
        assert _problems(canaries, lambda: [open(p, "rb").read() for p in case.rglob("*.txt")]) != []
    finally:
        cases.chmod(0o755)


def _in_a_child(target, *args) -> None:
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(60)
    assert child.exitcode == 0
