"""The llama_server role's files as one decision (plugins/modules/llama_server_units.py): each
unit and fixed chat template written only when it differs (root 0644 / 0600, through a temporary
file renamed over it), the units of instances that are gone stopped, disabled and removed, the
templates no instance uses removed; check mode changes nothing, --diff shows each unit's text.

The module runs here as root on throwaway directories standing for /etc/systemd/system and the
templates' directory (the systemctl call for a removed unit names a unit this machine does not
have). The role's real converge, restart and --check --diff runs are the Molecule scenarios'.
The last test renders the role's unit template through the real ansible-playbook both ways, the
template module's (what earlier versions of the role wrote) and the template lookup's (what the
role hands this module): the same bytes, so a host converged before does not restart its
instances for nothing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import REPO, load_ansible_plugin, plugin_path, run_playbook

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the files are root's")


class Module:
    """What the module's ``run`` needs of AnsibleModule: run_command, recorded."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def run_command(self, argv: list[str]) -> tuple[int, str, str]:
        self.commands.append(argv)
        return 0, "", ""


@pytest.fixture(scope="module")
def units() -> ModuleType:
    return load_ansible_plugin(plugin_path("modules", "llama_server_units"))


def _params(root: Path, **over: Any) -> dict[str, Any]:
    unit_dir = root / "system"
    unit_dir.mkdir(exist_ok=True)
    p: dict[str, Any] = {
        "units": [
            {"name": "main", "path": str(unit_dir / "llama-server-main.service"), "content": "A\n"},
            {"name": "b", "path": str(unit_dir / "llama-server-b.service"), "content": "B\n"},
        ],
        "templates": [
            {"name": "main", "path": str(root / "tmpl" / "main.jinja"), "content": "{{ x }}\n"}
        ],
        "unit_dir": str(unit_dir),
        "prune": "llama-server-*.service",
        "template_dir": str(root / "tmpl"),
    }
    p.update(over)
    return p


def _mode(p: Path) -> tuple[int, int, int]:
    st = p.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_writes_then_changes_nothing(units: ModuleType, open_tmp: Path) -> None:
    p = _params(open_tmp)
    r = units.run(Module(), p, False, False)
    assert r["changed"] and r["changed_instances"] == ["main", "b"]
    unit = open_tmp / "system" / "llama-server-main.service"
    assert unit.read_text() == "A\n" and _mode(unit) == (0, 0, 0o644)
    assert _mode(open_tmp / "tmpl") == (0, 0, 0o700)
    assert _mode(open_tmp / "tmpl" / "main.jinja") == (0, 0, 0o600)
    mtime = unit.stat().st_mtime_ns
    again = units.run(Module(), p, False, True)
    assert again == {"changed": False, "changed_instances": [], "removed": []}
    assert unit.stat().st_mtime_ns == mtime
    # only the instance whose text changed
    p["units"][1]["content"] = "B2\n"
    r = units.run(Module(), p, False, False)
    assert r["changed_instances"] == ["b"] and unit.stat().st_mtime_ns == mtime


def test_check_mode_and_diff(units: ModuleType, open_tmp: Path) -> None:
    p = _params(open_tmp)
    units.run(Module(), p, False, False)
    p["units"][0]["content"] = "A\n--ctx-size 8192\n"
    r = units.run(Module(), p, True, True)
    assert r["changed"] and r["changed_instances"] == ["main"]
    assert (open_tmp / "system" / "llama-server-main.service").read_text() == "A\n"
    (d,) = r["diff"]
    assert d["before"] == "A\n" and d["after"] == "A\n--ctx-size 8192\n"
    assert d["after_header"].endswith("llama-server-main.service")
    # a fresh host in check mode: nothing made, everything said
    fresh = open_tmp / "fresh"
    fresh.mkdir()
    r = units.run(Module(), _params(fresh), True, False)
    assert r["changed_instances"] == ["main", "b"] and not (fresh / "tmpl").exists()
    assert list((fresh / "system").iterdir()) == []


def test_units_and_templates_of_instances_gone_are_removed(
    units: ModuleType, open_tmp: Path
) -> None:
    p = _params(open_tmp)
    units.run(Module(), p, False, False)
    other = open_tmp / "system" / "unrelated.service"
    other.write_text("x")
    (open_tmp / "tmpl" / "notes.txt").write_text("kept")
    p["units"] = p["units"][:1]
    p["templates"] = []
    m = Module()
    r = units.run(m, p, False, False)
    assert sorted(x.name for x in (open_tmp / "system").iterdir()) == [
        "llama-server-main.service",
        "unrelated.service",
    ]
    assert sorted(x.name for x in (open_tmp / "tmpl").iterdir()) == ["notes.txt"]
    assert m.commands == [["systemctl", "disable", "--now", "llama-server-b.service"]]
    assert r["removed"] == [
        str(open_tmp / "system" / "llama-server-b.service"),
        str(open_tmp / "tmpl" / "main.jinja"),
    ]
    # in check mode: said, not done
    p["units"] = []
    m = Module()
    r = units.run(m, p, True, False)
    assert r["removed"] == [str(open_tmp / "system" / "llama-server-main.service")]
    assert m.commands == [] and (open_tmp / "system" / "llama-server-main.service").exists()


def test_owner_and_mode_are_set_without_rewriting(units: ModuleType, open_tmp: Path) -> None:
    p = _params(open_tmp)
    units.run(Module(), p, False, False)
    unit = open_tmp / "system" / "llama-server-main.service"
    os.chmod(unit, 0o666)
    ino = unit.stat().st_ino
    r = units.run(Module(), p, False, False)
    assert r["changed_instances"] == ["main"] and _mode(unit) == (0, 0, 0o644)
    assert unit.stat().st_ino == ino


def test_a_link_in_place_of_a_unit_is_replaced_not_followed(
    units: ModuleType, open_tmp: Path
) -> None:
    p = _params(open_tmp)
    target = open_tmp / "elsewhere"
    target.write_text("not a unit\n")
    (open_tmp / "system" / "llama-server-main.service").symlink_to(target)
    units.run(Module(), p, False, False)
    unit = open_tmp / "system" / "llama-server-main.service"
    assert not unit.is_symlink() and unit.read_text() == "A\n"
    assert target.read_text() == "not a unit\n"


@pytest.mark.parametrize(
    ("over", "shown"),
    [
        (
            {"units": [{"name": "x", "path": "/etc/passwd", "content": ""}]},
            "is not a file directly in",
        ),
        (
            {"templates": [{"name": "x", "path": "/tmp/x/../../etc/t.jinja", "content": ""}]},
            "is not a file directly in",
        ),
    ],
)
def test_files_outside_their_directory_are_refused(
    units: ModuleType, open_tmp: Path, over: dict[str, Any], shown: str
) -> None:
    with pytest.raises(units.RefusedError, match=shown):
        units.run(Module(), _params(open_tmp, **over), False, False)
    assert list((open_tmp / "system").iterdir()) == []


def test_a_templates_directory_that_is_a_link_is_refused(units: ModuleType, open_tmp: Path) -> None:
    elsewhere = open_tmp / "elsewhere"
    elsewhere.mkdir()
    (open_tmp / "tmpl").symlink_to(elsewhere)
    with pytest.raises(units.RefusedError, match="without following a link"):
        units.run(Module(), _params(open_tmp), False, False)
    assert list(elsewhere.iterdir()) == []


def test_the_lookup_renders_what_the_template_module_wrote(tmp_path: Path) -> None:
    """The same bytes from templates/llama-server.service.j2 both ways (real ansible-playbook)."""
    inst = {
        "name": "main",
        "model_path": "/srv/models/q/q.gguf",
        "model_sha256": "0" * 64,
        "argv": ["-m", "/srv/models/q/q.gguf", "--host", "127.0.0.1", "--port", "8080"],
        "environment": {"A": 1},
        "api_key": True,
        "memlock": False,
        "gpu": False,
        "client_keys": ["ws/alice"],
        "chat_template": {"path": "/etc/llamafleet/chat-templates/main.jinja", "sha256": "1" * 64},
    }
    template = REPO / "roles" / "llama_server" / "templates" / "llama-server.service.j2"
    play = f"""
    - hosts: localhost
      connection: local
      gather_facts: false
      vars:
        llama_server_user: llama
        llama_server_group: llama
        llama_server_key_dir: /etc/llamafleet/keys
        llama_server_binary: /opt/llama.cpp/current/bin/llama-server
        llama_server_hardening: true
        llama_server_unit_extra: []
        _build_id: b9079-69d8e4be
        _i: {json.dumps(inst)}
      tasks:
        - ansible.builtin.template:
            src: {template}
            dest: {tmp_path}/by-module.service
            mode: "0644"
        - ansible.builtin.copy:
            content: "{{{{ lookup('ansible.builtin.template', '{template}',
                        template_vars={{'_i': _i, '_build_id': _build_id}}) }}}}"
            dest: {tmp_path}/by-lookup.service
            mode: "0644"
    """
    done = run_playbook(tmp_path, play)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    by_module = (tmp_path / "by-module.service").read_bytes()
    assert b"ExecStart=" in by_module and b"LoadCredential=" in by_module
    assert (tmp_path / "by-lookup.service").read_bytes() == by_module
