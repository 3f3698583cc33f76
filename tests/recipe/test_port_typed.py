"""An imported config is untrusted input, read once through its format's key table into typed, bounded values before
any arithmetic: a wrong-typed key is one line naming the file, line, key and the type it should be (never "a bug in
crosstune"), a string is never multiplied, and what the tools themselves accept from YAML (a number as text, YAML
1.1's yes) reads the same. The three tables and their importers agree: every key a table declares is read by the
mapping or ignored with a reason, and every key an export writes is one its table declares."""

from __future__ import annotations

import time

import pytest

from crosstune.errors import CrosstuneError
from crosstune.recipe.convert import FORMATS, import_config
from crosstune.recipe.porting.typed import ForeignValueError

AXOLOTL = """\
base_model: google/gemma-3-4b-it
adapter: lora
datasets:
  - path: acme/verilog-chat
    type: chat_template
learning_rate: 2.0e-4
"""
TRL = "model_name_or_path: google/gemma-3-4b-it\nuse_peft: true\ndataset_name: acme/verilog-chat\n"
LLAMAFACTORY = "model_name_or_path: google/gemma-3-4b-it\nfinetuning_type: lora\ndataset: x\ndataset_dir: ONLINE\n"
BASES = {"axolotl": AXOLOTL, "trl": TRL, "llamafactory": LLAMAFACTORY}


def refusal(tmp_path, text: str) -> str:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    with pytest.raises(CrosstuneError) as e:
        import_config(config, tmp_path / "r.yaml")
    assert "\n" not in str(e.value)
    return str(e.value).replace(str(config), "CONFIG")


@pytest.mark.parametrize(
    "tool, extra, said",
    [
        (
            "axolotl",
            "lora_r: sixteen\n",
            "CONFIG:7: lora_r: 'sixteen' is not a whole number (LoRA rank: more than 0, at most 4,096)",
        ),
        (
            "axolotl",
            "micro_batch_size: [1]\n",
            "CONFIG:7: micro_batch_size: [1] is not a whole number (rows per device: more than 0, at most 65,536)",
        ),
        ("axolotl", "sample_packing: maybe\n", "CONFIG:7: sample_packing: 'maybe' is not true or false"),
        (
            "axolotl",
            "lora_dropout: 1.5\n",
            "CONFIG:7: lora_dropout: 1.5 is not a number (LoRA dropout probability: at least 0, less than 1)",
        ),
        # what `make fuzz FUZZ_SEED=48` found (docs/BENCHMARKS.md, recipe-import #9, #36, #38): a
        # mapping or a string at lora_dropout ended as "a bug in crosstune"
        (
            "axolotl",
            "lora_dropout: {}\n",
            "CONFIG:7: lora_dropout: {} is not a number (LoRA dropout probability: at least 0, less than 1)",
        ),
        (
            "axolotl",
            "lora_dropout: ../../..\n",
            "CONFIG:7: lora_dropout: '../../..' is not a number (LoRA dropout probability: at least 0, less than 1)",
        ),
        (
            "axolotl",
            "lora_dropout: acme/gemmä\n",
            "CONFIG:7: lora_dropout: 'acme/gemmä' is not a number (LoRA dropout probability: at least 0, less than 1)",
        ),
        (
            "axolotl",
            "chat_template: 5\n",
            "CONFIG:7: chat_template: 5 is not text (quote it if YAML reads it as a number or a switch)",
        ),
        (
            "trl",
            "per_device_train_batch_size: '8x'\n",
            "CONFIG:4: per_device_train_batch_size: '8x' is not a whole "
            "number (rows per device: more than 0, at most 65,536)",
        ),
        (
            "trl",
            "learning_rate: {a: 1}\n",
            "CONFIG:4: learning_rate: {'a': 1} is not a number (learning rate: more than 0, at most 10)",
        ),
        (
            "trl",
            "datasets:\n  - path: 5\n",
            "CONFIG:5: datasets[0].path: 5 is not text (quote it if YAML reads it as a number or a switch)",
        ),
        (
            "trl",
            "num_processes: 0\n",
            "CONFIG:4: num_processes: 0 is not a whole number (processes: one per GPU: at least 1, at most 65,536)",
        ),
        (
            "trl",
            "fsdp_config: {activation_checkpointing: 3}\n",
            "CONFIG:4: fsdp_config.activation_checkpointing: 3 is not true or false",
        ),
        (
            "llamafactory",
            "lora_rank: 1.5\n",
            "CONFIG:5: lora_rank: 1.5 is not a whole number (LoRA rank: more than 0, at most 4,096)",
        ),
        (
            "llamafactory",
            "cutoff_len: -1\n",
            "CONFIG:5: cutoff_len: -1 is not a whole number (tokens: more than 0, at most 10,000,000)",
        ),
        (
            "trl",
            "torch_dtype: bfloat16\ndtype: float32\n",
            "CONFIG:4: torch_dtype and dtype both given: torch_dtype is the older name of dtype, keep that one",
        ),
    ],
)
def test_a_wrong_type_is_one_line_naming_the_key_and_the_type(tool, extra, said, hub_cache, tmp_path):
    assert refusal(tmp_path, BASES[tool] + extra) == said


def test_a_string_is_never_multiplied(hub_cache, tmp_path):
    """The batch of a 1 KB config once multiplied a string by the accumulation: 78 s and 685 MB."""
    start = time.perf_counter()
    said = refusal(tmp_path, AXOLOTL + f"micro_batch_size: {'x' * 900}\ngradient_accumulation_steps: 100000000\n")
    assert time.perf_counter() - start < 5
    assert said.startswith("CONFIG:7: micro_batch_size: 'xxxxxxxx") and said.endswith(
        "is not a whole number (rows per device: more than 0, at most 65,536)"
    )
    assert "gradient_accumulation_steps: 100000000 is not a whole number" in refusal(
        tmp_path, AXOLOTL + "gradient_accumulation_steps: 100000000\n"
    )


def test_what_the_tools_accept_from_yaml_reads_the_same(hub_cache, tmp_path):
    """YAML 1.1 (the tools' PyYAML) reads `2e-4` as text and `yes` as true; the tools convert a number's text."""
    config = tmp_path / "axolotl.yaml"
    config.write_text(AXOLOTL.replace("2.0e-4", '"2e-4"') + "lora_r: '32'\nsample_packing: yes\nnum_epochs: '2'\n")
    recipe = import_config(config, tmp_path / "r.yaml").recipe
    assert (recipe.train.learning_rate, recipe.lora.rank, recipe.data.packing, recipe.train.epochs) == (
        2e-4,
        32,
        True,
        2.0,
    )


@pytest.mark.parametrize("tool", sorted(FORMATS))
def test_every_key_of_a_table_is_read_or_ignored_by_its_importer(tool):
    """A row the importer never reads (and the table does not mark ignored) would be dead weight: the key would be
    listed as one "crosstune's mapping does not carry" although the table declares it."""
    keys = FORMATS[tool].keys
    declared = {k for k, row in keys.items() if not row.ignored and not row.alias_of}
    assert declared - _read_by(tool) == set()


def _read_by(tool: str) -> set[str]:
    """Every key name the importer's modules read (take("...") / take.has / take.null), from their source."""
    import inspect
    import re

    from crosstune.recipe.porting import (
        from_axolotl,
        from_llamafactory,
        from_trl,
        named_model,
        target,
        training,
    )
    from crosstune.recipe.porting.axolotl_keys import ATTENTION_SWITCHES, KERNELS, LIGER, MULTIMODAL, OTHER_ATTENTION
    from crosstune.recipe.porting.llamafactory_keys import MEDIA, OTHER_METHODS

    mine = {"axolotl": from_axolotl, "trl": from_trl, "llamafactory": from_llamafactory}[tool]
    text = "".join(inspect.getsource(m) for m in (mine, named_model, target, training))
    found = set(re.findall(r"""take(?:\.has|\.null)?\(\s*["']([a-z0-9_]+)["']""", text))
    found |= set(re.findall(r"""["']([a-z0-9_]+)["'],?\s*(?:\)|,)""", text)) & set(FORMATS[tool].keys)  # in tuples
    groups = {
        "axolotl": (*ATTENTION_SWITCHES, *OTHER_ATTENTION, *LIGER, *KERNELS, *MULTIMODAL),
        "llamafactory": (*MEDIA, *OTHER_METHODS),
    }
    return found | set(groups.get(tool, ())) | {row for row, k in FORMATS[tool].keys.items() if k.recipe}


def test_an_export_writes_only_keys_its_table_declares():
    from crosstune.recipe.porting.trl_keys import KEYS
    from crosstune.recipe.porting.typed import in_table_order

    assert list(in_table_order({"packing": True, "model_name_or_path": "m"}, KEYS)) == ["model_name_or_path", "packing"]
    with pytest.raises(ValueError, match=r"an export writes keys its format's table lacks: \['pakcing'\]"):
        in_table_order({"pakcing": True}, KEYS)


def test_a_foreign_value_error_is_an_input_error():
    from crosstune.errors import InputError

    assert issubclass(ForeignValueError, InputError)


def test_a_wrong_value_deep_in_a_dataset_definition_is_named_at_its_path(hub_cache, tmp_path):
    """LLaMA-Factory's dataset_info.json is typed like the config: a wrong value inside an entry's own mapping is named
    at its whole path (found by the fuzzer's LLaMA-Factory cases, which named the entry instead)."""
    (tmp_path / "data").mkdir()
    info = tmp_path / "data" / "dataset_info.json"
    config = "model_name_or_path: google/gemma-3-4b-it\nfinetuning_type: lora\ndataset: d\n"
    for columns, said in (
        ('["x"]', "d.columns: ['x'] is not a mapping of keys"),
        ('{"prompt": 5}', "d.columns.prompt: 5 is not text (quote it if YAML reads it as a number or a switch)"),
    ):
        info.write_text(f'{{"d": {{"file_name": "train.jsonl", "columns": {columns}}}}}')
        assert refusal(tmp_path, config) == f"{info}: {said}"
