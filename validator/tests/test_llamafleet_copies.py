"""plugins/modules/llamafleet_copies.py: one task keeps a root-owned directory of copies of other
hosts' files (the monitoring keys and CA certificates, a pool's backend CA certificates). The
attack tests plant what an account could if the directory or a name in it were not root's alone:
a link at a copy's name to another file, a second hard link, a directory, a link in place of the
directory, a writable directory above it. Files are made under a root-owned, world-traversable
temporary directory (open_tmp), as on a host."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import load_ansible_plugin, playbook_results, plugin_path, run_playbook

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the copies are root's")
NOBODY = 65534


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(plugin_path("modules", "llamafleet_copies"))


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def _keys(mod: ModuleType, d: Path, files: list[dict[str, Any]], **kw: object) -> dict:  # type: ignore[type-arg]
    return mod.keep(str(d), files, suffix=".key", mode=0o600, dir_mode=0o700, **kw)  # type: ignore[no-any-return]


def test_it_makes_the_directory_writes_the_copies_and_then_changes_nothing(
    mod: ModuleType, open_tmp: Path
) -> None:
    d = open_tmp / "etc" / "keys"
    files = [{"name": "a-main.key", "content": "k1\n"}, {"name": "b-main.key", "content": "k2\n"}]
    first = _keys(mod, d, files)
    assert first["written"] == ["a-main.key", "b-main.key"] and first["removed"] == []
    assert first["changes"] == [f"{open_tmp}/etc: created", f"{d}: created"]
    assert (d / "a-main.key").read_text() == "k1\n" and _mode(d / "a-main.key") == 0o600
    assert _mode(d) == 0o700 and _mode(open_tmp / "etc") == 0o755
    again = _keys(mod, d, files)
    assert (again["written"], again["removed"], again["changes"]) == ([], [], [])


def test_a_changed_copy_a_wrong_mode_and_a_stale_one_are_put_right(
    mod: ModuleType, open_tmp: Path
) -> None:
    d = open_tmp / "keys"
    _keys(mod, d, [{"name": f"{n}.key", "content": n} for n in ("a", "b", "c")])
    (d / "b.key").chmod(0o644)
    (d / "note.txt").write_text("not a copy")
    found = _keys(mod, d, [{"name": "a.key", "content": "A"}, {"name": "b.key", "content": "b"}])
    assert found["written"] == ["a.key", "b.key"] and found["removed"] == ["c.key"]
    assert (d / "a.key").read_text() == "A" and _mode(d / "b.key") == 0o600
    assert not (d / "c.key").exists() and (d / "note.txt").exists()  # only names of copies go


def test_a_source_not_read_keeps_its_copy_and_one_never_read_fails_before_any_write(
    mod: ModuleType, open_tmp: Path
) -> None:
    d = open_tmp / "keys"
    _keys(mod, d, [{"name": "a.key", "content": "old"}])
    kept = _keys(mod, d, [{"name": "a.key", "content": None}])
    assert kept["written"] == [] and (d / "a.key").read_text() == "old"
    with pytest.raises(ValueError, match=r"^b: not reached\nc: no such file$"):
        _keys(
            mod,
            d,
            [
                {"name": "a.key", "content": "new"},
                {"name": "b.key", "content": None, "missing": "b: not reached"},
                {"name": "c.key", "missing": "c: no such file"},
            ],
        )
    assert (d / "a.key").read_text() == "old"  # nothing written
    # check mode reports them instead and changes nothing
    seen = _keys(mod, d, [{"name": "a.key", "content": "new"}, {"name": "b.key"}], modify=False)
    assert (seen["written"], seen["missing"]) == (["a.key"], ["b.key"])
    assert (d / "a.key").read_text() == "old"


def test_check_mode_on_a_bare_host_changes_nothing(mod: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "etc" / "keys"
    seen = _keys(mod, d, [{"name": "a.key", "content": "k"}], modify=False)
    assert seen["written"] == ["a.key"] and seen["changes"] == [f"{open_tmp}/etc: created"]
    assert not (open_tmp / "etc").exists()


def test_a_link_planted_at_a_copys_name_is_replaced_not_written_through(
    mod: ModuleType, open_tmp: Path
) -> None:
    d = open_tmp / "keys"
    _keys(mod, d, [{"name": "a.key", "content": "k"}])
    target = open_tmp / "shadow"
    target.write_text("root's own\n")
    (d / "a.key").unlink()
    (d / "a.key").symlink_to(target)
    found = _keys(mod, d, [{"name": "a.key", "content": "k"}])
    assert found["written"] == ["a.key"]
    assert not (d / "a.key").is_symlink() and (d / "a.key").read_text() == "k"
    assert target.read_text() == "root's own\n"
    # a second hard link: the copy gets a name of its own, the other name keeps its bytes
    os.link(target, d / "b.key")
    _keys(mod, d, [{"name": "a.key", "content": "k"}, {"name": "b.key", "content": "k2"}])
    assert target.read_text() == "root's own\n" and (d / "b.key").stat().st_nlink == 1


def test_a_stale_link_is_removed_never_followed(mod: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "keys"
    _keys(mod, d, [])
    target = open_tmp / "precious.key"
    target.write_text("keep me")
    (d / "old.key").symlink_to(target)
    assert _keys(mod, d, [])["removed"] == ["old.key"]
    assert target.read_text() == "keep me" and not (d / "old.key").is_symlink()


def test_a_directory_at_a_copys_name_or_among_the_copies_is_refused(
    mod: ModuleType, open_tmp: Path
) -> None:
    d = open_tmp / "keys"
    (d / "a.key").mkdir(parents=True)
    with pytest.raises(mod.UnsafePathError, match=r"a.key is a directory where a copy belongs"):
        _keys(mod, d, [{"name": "a.key", "content": "k"}])
    with pytest.raises(mod.UnsafePathError, match=r"a.key is a directory among the copies"):
        _keys(mod, d, [])


def test_a_link_in_place_of_the_directory_is_not_followed(mod: ModuleType, open_tmp: Path) -> None:
    elsewhere = open_tmp / "elsewhere"
    elsewhere.mkdir()
    (open_tmp / "keys").symlink_to(elsewhere)
    with pytest.raises(mod.UnsafePathError, match=r"keys is a symbolic link owned by root"):
        _keys(mod, open_tmp / "keys", [{"name": "a.key", "content": "k"}])
    assert list(elsewhere.iterdir()) == []


def test_a_directory_above_that_another_account_controls_is_refused(
    mod: ModuleType, open_tmp: Path
) -> None:
    above = open_tmp / "shared"
    above.mkdir()
    os.chown(above, NOBODY, NOBODY)
    with pytest.raises(mod.UnsafePathError, match=r"shared is .*must be owned by root"):
        _keys(mod, above / "keys", [{"name": "a.key", "content": "k"}])
    os.chown(above, 0, 0)
    above.chmod(0o777)
    with pytest.raises(mod.UnsafePathError, match=r"chmod go-w"):
        _keys(mod, above / "keys", [{"name": "a.key", "content": "k"}])


@pytest.mark.parametrize("name", ["../a.key", "a.crt", ".key", "sub/a.key", "a\n.key"], ids=repr)
def test_a_name_that_is_not_one_copy_is_refused(mod: ModuleType, open_tmp: Path, name: str) -> None:
    with pytest.raises(mod.UnsafePathError):
        _keys(mod, open_tmp / "keys", [{"name": name, "content": "k"}])
    assert not (open_tmp / "keys").exists()


def test_the_module_under_ansible_playbook(open_tmp: Path, tmp_path: Path) -> None:
    """As the roles run it: check mode with --diff on a bare directory, the run, the run again
    (changed false), and a source never read as the play sees it (the task's message)."""
    d = open_tmp / "ca"
    play = f"""
    - hosts: localhost
      connection: local
      gather_facts: false
      vars:
        second: "{{{{ none }}}}"
      tasks:
        - block:
            - llamafleet.fleet.llamafleet_copies:
                path: {d}
                suffix: .crt
                files:
                  - {{name: lf-1.crt, content: "-----BEGIN CERTIFICATE-----\\n"}}
                  - {{name: lf-2.crt, content: "{{{{ second }}}}", missing: "lf-2: not reached"}}
              register: copies
          rescue:
            - ansible.builtin.debug:
                msg: "RESULT refused {{{{ ansible_failed_result.msg | to_json }}}}"
        - ansible.builtin.debug:
            msg: "RESULT copies {{{{ [copies.changed, copies.written, copies.missing]
                  | to_json }}}}"
    """
    checked = run_playbook(tmp_path, play, "--check", "--diff")
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    assert playbook_results(checked.stdout)["copies"] == [True, ["lf-1.crt"], ["lf-2.crt"]]
    assert f"{d}/lf-1.crt: written" in checked.stdout and not d.exists()
    done = run_playbook(tmp_path, play)
    assert playbook_results(done.stdout)["refused"] == "lf-2: not reached"
    assert not (d / "lf-1.crt").exists()  # refused before any copy was written
    play = play.replace('second: "{{ none }}"', 'second: "B"')
    assert run_playbook(tmp_path, play).returncode == 0
    again = run_playbook(tmp_path, play)
    assert playbook_results(again.stdout)["copies"] == [False, [], []]
    assert (d / "lf-2.crt").read_text() == "B" and _mode(d / "lf-2.crt") == 0o644


# ------------------------------------------------------------------ what the roles hand the module


@pytest.fixture(scope="module")
def monitoring() -> ModuleType:
    return load_ansible_plugin(plugin_path("filter", "monitoring"))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_the_monitoring_keys_are_checked_and_a_key_not_read_names_why(
    monitoring: ModuleType, filter_error: type[Exception]
) -> None:
    t = {"id": "lf-1-main", "host": "lf-1", "instance": "main", "key_file": "/k/main.key"}
    reads = [
        {"_t": t, "content": _b64("s3cret\n")},
        {"_t": {**t, "id": "lf-2-main", "host": "lf-2"}, "unreachable": True},
        {"_t": {**t, "id": "lf-3-main", "host": "lf-3"}, "failed": True, "msg": "not found"},
    ]
    copies = monitoring.key_copies(reads)
    assert [c["name"] for c in copies] == ["lf-1-main.key", "lf-2-main.key", "lf-3-main.key"]
    assert copies[0]["content"] == "s3cret\n" and "content" not in copies[1]
    assert "(host not reached)" in copies[1]["missing"]
    assert copies[2]["missing"].startswith(
        "lf-3: the monitoring key of instance main (/k/main.key)"
    )
    assert "(no such file)" in copies[2]["missing"]
    # a key file holding two lines is two keys: refused, as the llama_server role refuses it
    with pytest.raises(filter_error, match=r"lf-1: /k/main.key does not hold one key"):
        monitoring.key_copies([{"_t": t, "content": _b64("a\nb\n")}])


def test_a_ca_comes_from_the_fact_else_from_the_read(monitoring: ModuleType) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
    tls = [
        {"id": "a-main", "host": "a", "instance": "main", "ca_file": "/ca", "ca_pem": pem},
        {"id": "b-main", "host": "b", "instance": "main", "ca_file": "/ca", "ca_pem": ""},
        {"id": "c-main", "host": "c", "instance": "main", "ca_file": "/ca", "ca_pem": ""},
    ]
    reads = [
        {"_t": tls[1], "content": _b64(pem)},
        {"_t": tls[2], "unreachable": True, "msg": "ssh: no route"},
    ]
    copies = monitoring.ca_copies(tls, reads)
    assert [c.get("content") for c in copies] == [pem, pem, None]
    assert "(ssh: no route)" in copies[2]["missing"]


def test_a_pools_backend_ca_copies(open_tmp: Path) -> None:
    pool = load_ansible_plugin(plugin_path("filter", "llama_pool"))
    b = {"name": "lf-pool-1", "ca_file": "/etc/llamafleet/tls/ca.crt"}
    copies = pool.ca_copies([{"_b": b, "content": _b64("PEM")}, {"_b": {**b, "name": "x"}}])
    assert copies[0] == {"name": "lf-pool-1.crt", "content": "PEM", "missing": copies[0]["missing"]}
    assert copies[1]["missing"].startswith("x: its CA certificate /etc/llamafleet/tls/ca.crt")
