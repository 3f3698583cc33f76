"""Both backends keep crosstune.train.backend's contract (`Backend`, a Protocol the session is written against): each
class of the registry has every method of it with the same signature (parameters, their kinds, defaults and
annotations, and the return annotation) and every attribute it declares, checked without training anything (a
backend built for reading saved runs, recipe None, starts no process and imports no stack)."""

from __future__ import annotations

import inspect

import pytest

from crosstune.train.backend import BACKENDS, Backend, backend_class, get_backend


def contract_breaches(cls: type, instance: object, protocol: type = Backend) -> list[str]:
    """How `cls` (and `instance`, one of it) departs from `protocol`: a method missing or with another signature, a
    declared attribute missing or of another type."""
    breaches = []
    for name, method in vars(protocol).items():
        if name.startswith("_") or not inspect.isfunction(method):
            continue
        mine = getattr(cls, name, None)
        if not inspect.isfunction(mine):
            breaches.append(f"{cls.__name__}.{name}: missing")
        elif inspect.signature(mine) != inspect.signature(method):
            breaches.append(f"{cls.__name__}.{name}{inspect.signature(mine)} is not {name}{inspect.signature(method)}")
    for name, kind in protocol.__annotations__.items():
        if not hasattr(instance, name):
            breaches.append(f"{cls.__name__}.{name}: missing")
        elif type(getattr(instance, name)).__name__ != kind:
            breaches.append(f"{cls.__name__}.{name} is {getattr(instance, name)!r}, not a {kind}")
    return breaches


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_each_backend_keeps_the_contract(name):
    backend = get_backend(name)
    assert type(backend) is backend_class(name) and backend.name == name
    assert contract_breaches(type(backend), backend) == []


def test_the_check_finds_a_missing_method_another_signature_and_a_missing_attribute():
    class Partial:
        name = "partial"
        lead = True

        def data_parallel(self) -> tuple[int, int]:
            return 1, 1

        def setup(self, context, extra: int = 0) -> None:  # another signature
            pass

    breaches = contract_breaches(Partial, Partial())
    assert "Partial.fit: missing" in breaches and "Partial.prepares_data: missing" in breaches
    assert (
        "Partial.setup(self, context, extra: 'int' = 0) -> 'None' is not setup(self, context: 'RunContext') -> 'None'"
        in breaches
    )
    assert not any(b.startswith("Partial.data_parallel") for b in breaches)
