"""Repository invariants: every role default is documented in argument_specs with the same
default, every variable carries its role's prefix, and the README keeps its two commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (REPO / "roles").glob("*") if (p / "defaults" / "main.yml").is_file())

pytestmark = pytest.mark.skipif(not ROLES, reason="run from a checkout of the whole repository")


def _specs(role: Path) -> dict[str, Any]:
    data = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options: dict[str, Any] = data["argument_specs"]["main"]["options"]
    return options


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_argument_specs_equal_defaults(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    specs = _specs(role)
    assert set(defaults) == set(specs), (
        f"{role.name}: only in defaults {sorted(set(defaults) - set(specs))}, "
        f"only in argument_specs {sorted(set(specs) - set(defaults))}"
    )
    for name, value in defaults.items():
        spec = specs[name]
        assert spec.get("description"), f"{role.name}: {name} has no description"
        if isinstance(value, str) and "{{" in value:
            continue  # a templated default is documented in words
        assert spec.get("default") == value, f"{role.name}: default of {name} differs"


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_variables_are_prefixed(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    bad = [k for k in defaults if not k.startswith(role.name + "_")]
    assert not bad, f"{role.name}: variables without the role prefix: {bad}"


def test_readme_has_the_two_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert "make site" in text and "make test" in text
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_tags_select_every_part_of_a_role(role: Path) -> None:
    """`--tags <role>` (and a part's own tag) must reach the role's tasks. A static import inherits
    the tags of the task that imports it; a dynamic include passes on none by itself, so every
    `include_tasks` of the role carries the role's tag in its `apply` (in main.yml also on the
    include itself, so that the include runs)."""
    main = yaml.safe_load((role / "tasks" / "main.yml").read_text()) or []
    for task in main:
        for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
            if key in task:
                assert role.name in task.get("tags", []), f"{role.name}: {task.get('name')!r}"
    for path in sorted((role / "tasks").glob("*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            inc = task.get("ansible.builtin.include_tasks")
            if inc is None:
                continue
            applied = inc.get("apply", {}).get("tags", []) if isinstance(inc, dict) else []
            assert role.name in applied, (
                f"{role.name}/{path.name}: include_tasks {task.get('name')!r} applies no "
                f"{role.name} tag: with --tags its tasks would be skipped"
            )
