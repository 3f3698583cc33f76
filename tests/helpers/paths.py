"""Where the tests' inputs are: the repository, its recipes and the test fixtures."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
FIXTURES = REPO / "tests" / "fixtures"
HELPERS = Path(__file__).resolve().parent
