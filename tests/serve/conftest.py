"""Fixtures of the serving tests (defined in tests/helpers/fake_vllm.py)."""

from tests.helpers.fake_vllm import fake_vllm  # noqa: F401 - a fixture, found by pytest through this import
