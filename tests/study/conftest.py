"""Fixtures of the study tests (defined in tests/helpers/)."""

from tests.helpers.fake_vllm import fake_vllm  # noqa: F401 - a fixture, found by pytest through this import
