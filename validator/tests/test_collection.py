"""The repository is the llamafleet.fleet collection: one version with the validator, one
plugins/ (no role keeps a library/, filter_plugins/, action_plugins/ or module_utils/ of its
own), every module documented as ansible-doc reads it, and the artifact `ansible-galaxy
collection build` makes installs into an empty project whose playbook uses the collection's
modules, filters and roles by FQCN. (That a team's project converges a real host from the
installed tarball is the default scenario's workstation run, molecule/default/workstation.yml.)"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import yaml

import llamafleet
from conftest import PLUGINS, REPO, load_ansible_plugin

GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text(encoding="utf-8"))
BIN = Path(sys.executable).parent


def _env(home: Path) -> dict[str, str]:
    """An environment with nothing of this checkout in it: no ANSIBLE_* variable, no PYTHONPATH,
    its own HOME."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"
    }
    return env | {"HOME": str(home), "ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:/usr/bin:/bin"}


def _tool(
    name: str, *args: str, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """One of Ansible's programs from the Python running the tests."""
    return subprocess.run(
        [str(BIN / name), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_one_version_for_the_collection_the_validator_and_the_changelog() -> None:
    pyproject = (REPO / "validator" / "pyproject.toml").read_text(encoding="utf-8")
    (packaged,) = re.findall(r'^version = "([^"]+)"', pyproject, re.M)
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    newest = re.findall(r"^## ([0-9][^\s]*)", changelog, re.M)[0]
    assert GALAXY["version"] == llamafleet.__version__ == packaged == newest


def test_requires_ansible_is_the_tested_range() -> None:
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    dev = (REPO / "requirements-dev.txt").read_text(encoding="utf-8")
    (core,) = re.findall(r"^ansible-core(\S+)", dev, re.M)
    lows = re.findall(r">=\s*([0-9.]+)", core) + re.findall(
        r">=\s*([0-9.]+)", runtime["requires_ansible"]
    )
    highs = re.findall(r"<\s*([0-9.]+)", core) + re.findall(
        r"<\s*([0-9.]+)", runtime["requires_ansible"]
    )

    def norm(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in [*v.split("."), "0", "0"][:3])

    assert len(lows) == 2 and norm(lows[0]) == norm(lows[1]), (core, runtime)
    assert len(highs) == 2 and norm(highs[0]) == norm(highs[1]), (core, runtime)
    # the README's install commands pin the ansible range requirements-dev.txt tests, and the
    # debian13 scenario installs a release inside it
    (ansible,) = re.findall(r"^ansible(>=\S+)", dev, re.M)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    pins = re.findall(r"pip install '?ansible([<>=][^' ]*)'? ", readme)
    assert pins and set(pins) == {ansible}, (pins, ansible)
    converge = (REPO / "molecule" / "debian13" / "converge.yml").read_text(encoding="utf-8")
    (spec,) = re.findall(r'_ws_pip_spec: \["ansible>=(\d+),<(\d+)"\]', converge)
    low, high = re.findall(r">=(\d+),<(\d+)", ansible)[0]
    assert int(low) <= int(spec[0]) and int(spec[1]) <= int(high), (spec, ansible)


def test_no_role_or_playbook_keeps_plugins_of_its_own() -> None:
    kinds = ("library", "filter_plugins", "action_plugins", "module_utils", "lookup_plugins")
    found = [str(p.relative_to(REPO)) for k in kinds for p in REPO.glob(f"roles/*/{k}")]
    found += [str(p.relative_to(REPO)) for k in kinds for p in REPO.glob(f"playbooks/{k}")]
    assert found == [], "plugins belong in plugins/ (one copy, FQCN llamafleet.fleet.NAME)"


def test_module_utils_imports_resolve_to_the_collections_own_files() -> None:
    prefix = "ansible_collections.llamafleet.fleet."
    for path in PLUGINS.rglob("*.py"):
        text = path.read_text()
        for name in re.findall(r"^\s*from (ansible_collections\.\S+) import", text, re.M):
            assert name.startswith(prefix), (path, name)
            target = REPO.joinpath(*name[len(prefix) :].split("."))
            # a module (from ...module_utils.safefs import x) or a package's module (import safefs)
            assert target.with_suffix(".py").is_file() or target.is_dir(), (path, name)
        for name in re.findall(r"^\s*from ansible\.module_utils\.(\w+)", text, re.M):
            # only ansible-core's own module_utils by that name
            assert name in ("basic", "urls", "parsing", "common", "six"), (path, name)


def test_every_module_is_documented_for_ansible_doc(tmp_path: Path) -> None:
    names = sorted(f"llamafleet.fleet.{p.stem}" for p in (PLUGINS / "modules").glob("*.py"))
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), "--json", "-t", "module", *names],
        env=_env(tmp_path) | {"ANSIBLE_COLLECTIONS_PATH": os.environ["ANSIBLE_COLLECTIONS_PATH"]},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    assert sorted(docs) == names, proc.stderr
    for name, doc in docs.items():
        assert doc["doc"].get("short_description"), name
        assert doc["doc"].get("options") is not None or name.endswith("_facts"), name


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(REPO)],
        env=_env(out),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / f"llamafleet-fleet-{GALAXY['version']}.tar.gz"


def test_the_artifact_holds_the_collection_and_nothing_of_the_test_bed(tarball: Path) -> None:
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    assert manifest["collection_info"]["version"] == llamafleet.__version__
    for must in (
        "meta/runtime.yml",
        "playbooks/site.yml",
        "playbooks/rollout.yml",
        "roles/llama_server/tasks/main.yml",
        "plugins/modules/claude_settings.py",
        "plugins/module_utils/safefs.py",
        "plugins/filter/llama_server.py",
        "plugins/action/llamafleet_check.py",
    ):
        assert must in names, must
    tops = {n.split("/")[0] for n in names}
    for never in ("validator", "molecule", "testbed", ".venv", ".ansible", "site.yml", "Makefile"):
        assert never not in tops, never
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_tarball_installs_into_an_empty_project_and_runs_by_fqcn(
    tarball: Path, tmp_path: Path
) -> None:
    """A project that has only an ansible.cfg, an inventory and a playbook: the collection is
    installed from the tarball, then its module (llamafleet_read), action plugin (llamafleet_check,
    which imports the validator), filter and role (llamafleet_common) run by FQCN, from the
    installed copy, on localhost."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "ansible.cfg").write_text("[defaults]\ncollections_path = ./collections\n")
    (project / "inventory.yml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    (project / "unit.service").write_text(
        "[Service]\nExecStart=/opt/llama.cpp/bin/llama-server -m /m.gguf --host 0.0.0.0 -c 8192\n"
    )
    (project / "play.yml").write_text(
        textwrap.dedent(
            """\
            - hosts: localhost
              gather_facts: false
              tasks:
                - name: A module of the collection
                  llamafleet.fleet.llamafleet_read:
                    path: "{{ playbook_dir }}/unit.service"
                  register: read
                - name: A filter of the collection
                  ansible.builtin.debug:
                    msg: "KIND {{ '0.0.0.0' | llamafleet.fleet.llamafleet_address_kind }}"
                - name: The action plugin (the validator, in process)
                  llamafleet.fleet.llamafleet_check:
                    items:
                      - path: unit.service
                        kind: unit
                        text: "{{ read.content | b64decode }}"
                  register: checked
                  failed_when: not checked.refused
                - name: What it found
                  ansible.builtin.debug:
                    msg: "RULES {{ checked.checks[0].findings | map(attribute='id') | join(',') }}"
            """
        )
    )
    env = _env(tmp_path)
    install = _tool("ansible-galaxy", "collection", "install", "--no-deps", str(tarball),
                    cwd=project, env=env)  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    installed = project / "collections" / "ansible_collections" / "llamafleet" / "fleet"
    assert (installed / "MANIFEST.json").is_file(), install.stdout
    run = _tool("ansible-playbook", "-i", "inventory.yml", "play.yml", "-v", cwd=project, env=env)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "KIND any" in run.stdout
    (rules,) = re.findall(r"RULES ([A-Z0-9,]*)", run.stdout)
    # an exposed server without a key: the validator's exposure rule, from the installed plugin
    assert "LS007" in rules.split(","), run.stdout[-3000:]
    # the plugins ran from the installed copy, not from this checkout
    shutil.rmtree(installed / "plugins" / "filter")
    again = _tool("ansible-playbook", "-i", "inventory.yml", "play.yml", cwd=project, env=env)
    assert again.returncode != 0 and "llamafleet_address_kind" in again.stdout + again.stderr


def test_one_import_guard_for_the_validator_package() -> None:
    """Every controller-side plugin says the same thing when the validator package is missing,
    from plugin_utils/validator.py; none keeps a wording of its own."""
    from ansible.errors import AnsibleFilterError

    guard = load_ansible_plugin(PLUGINS / "plugin_utils" / "validator.py")
    guard.require(None, AnsibleFilterError)  # the package is there: nothing
    with pytest.raises(AnsibleFilterError, match=r"pip install \./validator .*: No module named"):
        guard.require(ImportError("No module named 'llamafleet'"), AnsibleFilterError)
    for path in [*PLUGINS.glob("filter/*.py"), *PLUGINS.glob("action/*.py")]:
        text = path.read_text(encoding="utf-8")
        assert "pip install" not in text, path
        if "from llamafleet" in text or "import llamafleet" in text:
            assert "plugin_utils.validator import" in text, path


def test_the_hosts_gguf_reader_is_the_validators(tmp_path: Path) -> None:
    """plugins/module_utils/gguf_header.py (the gguf_metadata module's reader, on the hosts) is
    validator/src/llamafleet/gguf_header.py with a line saying so: they cannot drift."""
    sys.path.insert(0, str(REPO / "validator" / "tools"))
    try:
        import gen_module_utils
    finally:
        sys.path.pop(0)
    assert gen_module_utils.main(["--check"]) == 0
    (copy, source), *_ = gen_module_utils.COPIES.items()
    stale = tmp_path / "gguf_header.py"
    stale.write_text(
        copy.read_text(encoding="utf-8").replace("MAX_TENSOR_DIMS = 4", "MAX_TENSOR_DIMS = 8")
    )
    gen_module_utils.COPIES[stale] = source
    try:
        assert gen_module_utils.main(["--check"]) == 1
    finally:
        del gen_module_utils.COPIES[stale]


def test_each_action_plugin_has_a_documentation_module_with_its_options() -> None:
    """ansible-doc and the sanity test action-plugin-docs read an action plugin's documentation
    from the module of the same name: its options are exactly what the plugin accepts. The module
    holds documentation only, unless the plugin runs it on the host (as ansible.builtin.template
    runs its module): then that module takes exactly those options too."""
    for plugin in sorted((PLUGINS / "action").glob("*.py")):
        doc_module = PLUGINS / "modules" / plugin.name
        assert doc_module.is_file(), f"{plugin.name}: no plugins/modules/{plugin.name}"
        source = doc_module.read_text(encoding="utf-8")
        documentation = next(
            node.value.value
            for node in ast.parse(source).body
            if isinstance(node, ast.Assign)
            and [getattr(t, "id", "") for t in node.targets] == ["DOCUMENTATION"]
            and isinstance(node.value, ast.Constant)
        )
        assert isinstance(documentation, str), doc_module
        options = set(yaml.safe_load(documentation)["options"])
        accepted = set(load_ansible_plugin(plugin)._ARGS)
        assert options == accepted, (plugin.name, options ^ accepted)
        if "def main" in source or "AnsibleModule" in source:
            runs = f'"llamafleet.fleet.{plugin.stem}"'
            assert runs in plugin.read_text(encoding="utf-8"), (plugin.name, "not run by it")
            spec = re.search(r"argument_spec=\{(.*?)\n        \},", source, re.S)
            assert spec, doc_module
            assert set(re.findall(r'^\s+"(\w+)": \{', spec.group(1), re.M)) == accepted, doc_module


def test_the_scenarios_use_the_bootstrapped_collection_without_molecules_prerun() -> None:
    """Molecule's prerun installs this checkout with --force into one cache every scenario shares;
    two scenarios starting in the same second (make test runs two lanes) then delete each other's
    files ("No such file or directory: 'README.md'", a claude phase failed in 2 s that way). The
    scenarios read the collection from .ansible/collections instead, so the prerun stays off and no
    scenario turns it back on."""
    base = yaml.safe_load((REPO / ".config/molecule/config.yml").read_text(encoding="utf-8"))
    assert base["prerun"] is False
    assert base["provisioner"]["env"]["ANSIBLE_COLLECTIONS_PATH"].endswith("/.ansible/collections")
    for scenario in sorted((REPO / "molecule").glob("*/molecule.yml")):
        data = yaml.safe_load(scenario.read_text(encoding="utf-8")) or {}
        assert data.get("prerun", False) is False, scenario
        path = data.get("provisioner", {}).get("env", {}).get("ANSIBLE_COLLECTIONS_PATH")
        assert path is None or path.endswith("/.ansible/collections"), scenario
    # without the prerun no roles path is added: a scenario names each role it includes by FQCN
    found = []
    for path in sorted((REPO / "molecule").rglob("*.yml")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            if re.match(r"^\s*(?:- )?(?:ansible\.builtin\.)?(?:include|import)_role:\s*$", line):
                name = next(t for t in lines[n + 1 : n + 6] if t.strip().startswith("name:"))
                if not name.split(":", 1)[1].strip().strip("\"'").startswith("llamafleet.fleet."):
                    found.append(f"{path.relative_to(REPO)}:{n + 1}: {name.strip()}")
    assert found == []


def test_an_action_plugin_refuses_an_option_it_does_not_take(tmp_path: Path) -> None:
    """plugin_utils/action.py's task_args, through the real ansible-playbook: a misspelt option
    fails the task, naming the plugin and the option, instead of being ignored."""
    from conftest import playbook_results, run_playbook

    names = ["cuda_toolkit_plan", "llama_cpp_plan", "llama_server_inputs"]
    tasks = [
        {
            "block": [{f"llamafleet.fleet.{n}": {"gpus_typo": []}}],
            "rescue": [
                {
                    "ansible.builtin.debug": {
                        "msg": f"RESULT {n} {{{{ ansible_failed_result.msg | to_json }}}}"
                    }
                }
            ],
        }
        for n in names
    ]
    play = yaml.safe_dump(
        [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]
    )
    done = run_playbook(tmp_path, play)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    found = playbook_results(done.stdout)
    assert found == {n: f"{n}: unknown options: gpus_typo" for n in names}
