"""The one table of Gemma releases by name (crosstune.families.identity) agrees with the families: every released
size it names is a size the family has a spec for, and each one's hub name comes back as that family and size."""

from __future__ import annotations

from crosstune.families import FAMILIES, identity


def test_every_released_size_is_a_family_size_and_its_name_identifies_it():
    assert set(identity.RELEASED) == set(FAMILIES)
    for family, sizes in identity.RELEASED.items():
        for size in sizes:
            assert size in FAMILIES[family].sizes
            name = f"google/gemma-{family[-1]}-{size.upper() if family == 'gemma4' else size}-it"
            found = identity.by_name(name)
            assert (found.family, found.size, found.refused) == (family, size, ""), name
    assert identity.TRAINED == ("crosstune trains Gemma 3 (1B, 4B, 12B, 27B) and Gemma 4 (E2B, E4B, 26B-A4B, 12B, 31B)")


def test_a_name_is_matched_piece_by_piece():
    assert identity.by_name("google/medgemma-4b-it").what == "MedGemma 4B (a Gemma 3 4B)"
    assert identity.by_name("acme/gemma-4b") is None  # neither Gemma 4 nor a size
    assert identity.by_name("acme/megagemma-3-4b") is None
    assert identity.by_name("acme/gemma-4-fine-tune") == identity.Identity("Gemma 4", "gemma4", None)
    # a recipe writes a hub id hf://OWNER/NAME (crosstune.hub): the same model by the same name
    assert identity.by_name("hf://google/gemma-4-12B-it") == identity.by_name("google/gemma-4-12B-it")
    assert identity.by_name("hf://google/gemma-4-12B-it") == identity.Identity("Gemma 4 12B", "gemma4", "12b")


def test_a_config_json_says_what_the_model_is():
    assert identity.by_config({"model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text"}}, FAMILIES) == (
        identity.Identity("Gemma 3n", refused="config.json's model_type is 'gemma3n_text'")
    )
    assert identity.by_config({"model_type": "qwen2"}, FAMILIES) == identity.Identity("a 'qwen2' model")
    assert identity.by_config([1, 2], FAMILIES).family is None  # not an object: refused, never an AttributeError
    medgemma = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}}
    assert identity.by_config(medgemma, FAMILIES) == identity.Identity("Gemma 3", "gemma3")
