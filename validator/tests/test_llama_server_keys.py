"""The llama_server role's keys as one decision (plugins/modules/llama_server_keys.py): each
instance's key and its clients' keys made once, read and checked, the credential written only
when it differs, the keys of clients no longer listed removed; in check mode nothing changes.

It is a trust boundary: what it reads on the host goes to the controller, into the clients'
settings and the pool's configuration on other hosts. The attack tests plant what a compromised
or careless host could hold in the key directory (a link to another file, a key with a second
line, a FIFO, a hard link, a huge file, a directory that is a link or another account's) and
show each refused, naming the file and the fix, with nothing read through it or written.

The module's code runs here as root on a throwaway key directory, once through the real
ansible-playbook (connection local) and otherwise by its ``run`` function."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import ModuleType

import pytest

from conftest import load_ansible_plugin, plugin_path, run_playbook

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the keys are root's")


@pytest.fixture(scope="module")
def keys() -> ModuleType:
    return load_ansible_plugin(plugin_path("modules", "llama_server_keys"))


def _mode(p: Path) -> tuple[int, int, int]:
    st = p.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


MAIN: dict[str, object] = {"name": "main", "client_keys": ["ws/alice", "ws/bob"]}
SOLO: dict[str, object] = {"name": "solo", "client_keys": []}


def test_first_run_makes_every_key_and_the_credential(keys: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "etc" / "keys"
    r = keys.run(str(d), [MAIN, SOLO], False)
    assert r["changed"] and r["credentials_changed"] == ["main"]
    assert _mode(d) == (0, 0, 0o700) and _mode(d / "main.clients") == (0, 0, 0o700)
    for f in ("main.key", "solo.key", "main.keys", "main.clients/ws__alice.key"):
        assert _mode(d / f) == (0, 0, 0o600), f
    main, alice, bob = (
        r["api_keys"]["main"],
        r["client_api_keys"]["main"]["ws/alice"],
        r["client_api_keys"]["main"]["ws/bob"],
    )
    assert len({main, alice, bob, r["api_keys"]["solo"]}) == 4
    assert all(len(k) == 48 and k.isalnum() for k in (main, alice, bob))
    assert (d / "main.key").read_text() == main + "\n"
    assert (d / "main.clients" / "ws__bob.key").read_text() == bob + "\n"
    # the instance key first, then each client's in the order of the client names
    assert (d / "main.keys").read_text() == f"{main}\n{alice}\n{bob}\n"
    assert r["client_api_keys"]["solo"] == {} and not (d / "solo.keys").exists()
    # no key in what it says it did
    assert not any(k in line for line in r["changes"] for k in (main, alice, bob))


def test_second_run_changes_nothing_and_returns_the_same_keys(
    keys: ModuleType, open_tmp: Path
) -> None:
    d = open_tmp / "keys"
    first = keys.run(str(d), [MAIN, SOLO], False)
    mtime = (d / "main.keys").stat().st_mtime_ns
    second = keys.run(str(d), [MAIN, SOLO], False)
    assert second["changed"] is False and second["changes"] == []
    assert second["api_keys"] == first["api_keys"]
    assert second["client_api_keys"] == first["client_api_keys"]
    assert second["credentials_changed"] == []
    assert (d / "main.keys").stat().st_mtime_ns == mtime


def test_check_mode_changes_nothing(keys: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "keys"
    r = keys.run(str(d), [MAIN], True)
    assert r["changed"] and not d.exists()
    assert r["api_keys"] == {} and r["client_api_keys"] == {"main": {}}
    assert f"create the directory {d} (root 0700)" in r["changes"]
    keys.run(str(d), [MAIN], False)
    before = {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    # a client added, one removed: said, not done
    r = keys.run(str(d), [{"name": "main", "client_keys": ["ws/alice", "ws/carol"]}], True)
    assert r["changed"] and r["credentials_changed"] == []
    assert any("ws__bob.key" in c and c.startswith("remove") for c in r["changes"])
    assert any("ws__carol.key" in c and c.startswith("make a new key") for c in r["changes"])
    assert {p: p.read_bytes() for p in d.rglob("*") if p.is_file()} == before
    assert "ws/carol" not in r["client_api_keys"]["main"]


def test_a_client_no_longer_listed_loses_its_key(keys: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "keys"
    first = keys.run(str(d), [MAIN], False)
    outside = open_tmp / "outside"
    outside.write_text("keep me\n")
    (d / "main.clients" / "stray-link.key").symlink_to(outside)
    (d / "main.clients" / "old-dir").mkdir()
    (d / "main.clients" / "old-dir" / "x").write_text("x")
    r = keys.run(str(d), [{"name": "main", "client_keys": ["ws/alice"]}], False)
    assert sorted(p.name for p in (d / "main.clients").iterdir()) == ["ws__alice.key"]
    assert outside.read_text() == "keep me\n"  # the link was removed, not followed
    assert r["credentials_changed"] == ["main"]
    main, alice = first["api_keys"]["main"], first["client_api_keys"]["main"]["ws/alice"]
    assert (d / "main.keys").read_text() == f"{main}\n{alice}\n"
    assert f"remove {d}/main.clients/old-dir and what it holds" in r["changes"]


def test_an_instance_without_clients_keeps_only_its_key(keys: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "keys"
    first = keys.run(str(d), [MAIN], False)
    r = keys.run(str(d), [{"name": "main"}], False)
    assert sorted(p.name for p in d.iterdir()) == ["main.key"]
    assert r["api_keys"] == first["api_keys"] and r["client_api_keys"] == {"main": {}}


def test_a_readable_key_is_made_root_only_and_kept(keys: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "keys"
    d.mkdir(mode=0o755)
    (d / "main.key").write_text("operator-chosen-key-0123456789\n")
    os.chmod(d / "main.key", 0o644)
    r = keys.run(str(d), [SOLO | {"name": "main"}], False)
    assert r["api_keys"]["main"] == "operator-chosen-key-0123456789"
    assert _mode(d / "main.key") == (0, 0, 0o600) and _mode(d) == (0, 0, 0o700)
    assert f"set {d}/main.key to root:root 0600" in r["changes"]


# ------------------------------------------------------------------ attacks


def _refused(keys: ModuleType, d: Path, instances: list[dict[str, object]], shown: str) -> str:
    with pytest.raises(keys.RefusedError) as err:
        keys.run(str(d), instances, False)
    assert shown in str(err.value), str(err.value)
    return str(err.value)


def test_a_key_that_is_a_link_is_not_read(keys: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "keys"
    keys.run(str(d), [SOLO], False)
    secret = open_tmp / "shadow"
    secret.write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    (d / "solo.key").unlink()
    (d / "solo.key").symlink_to(secret)
    msg = _refused(keys, d, [SOLO], f"{d}/solo.key cannot be opened as a regular file")
    assert "secret-hash" not in msg and "remove it" in msg
    assert (d / "solo.key").is_symlink()  # left for the operator to look at


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"good-key-123\nattacker-key-456\n", "a second line"),  # a second accepted key
        (b"key with blanks\n", "without blanks"),
        (b"key\x1b[31m\n", "printable"),  # terminal escapes into a client's settings
        (b"\n", "1 to 4096"),
        (b"  spaced-key-ok\n\n", None),  # blanks around one key: the key (as `trim` read it)
        (b"k" * 4097, "1 to 4096"),
        (b"key" + b" " * 5000 + b"second\n", "more than one key"),
        ("clé-unicode\n".encode(), "printable ASCII"),
    ],
)
def test_a_key_that_is_not_one_key_is_refused(
    keys: ModuleType, open_tmp: Path, content: bytes, why: str | None
) -> None:
    d = open_tmp / "keys"
    keys.run(str(d), [MAIN], False)
    credential = (d / "main.keys").read_bytes()
    (d / "main.clients" / "ws__bob.key").write_bytes(content)
    if why is None:  # accepted: the key without the blanks around it
        r = keys.run(str(d), [MAIN], False)
        assert r["client_api_keys"]["main"]["ws/bob"] == content.decode().strip()
        assert (d / "main.keys").read_text().splitlines()[-1] == content.decode().strip()
        return
    msg = _refused(keys, d, [MAIN], f"{d}/main.clients/ws__bob.key ")
    assert why in msg
    assert (d / "main.keys").read_bytes() == credential  # nothing written with it


def test_a_fifo_a_hard_link_and_a_directory_are_not_keys(keys: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "keys"
    keys.run(str(d), [SOLO], False)
    (d / "solo.key").unlink()
    os.mkfifo(d / "solo.key")
    _refused(keys, d, [SOLO], "is not a regular file with one link")  # and does not hang
    (d / "solo.key").unlink()
    other = open_tmp / "other.key"
    other.write_text("linked-key-0123456789\n")
    os.link(other, d / "solo.key")
    _refused(keys, d, [SOLO], "is not a regular file with one link")
    (d / "solo.key").unlink()
    (d / "solo.key").mkdir()
    _refused(keys, d, [SOLO], "is not a regular file with one link")


def test_a_key_directory_that_is_a_link_or_not_roots(keys: ModuleType, open_tmp: Path) -> None:
    elsewhere = open_tmp / "elsewhere"
    elsewhere.mkdir()
    link = open_tmp / "keys"
    link.symlink_to(elsewhere)
    _refused(keys, link, [SOLO], "without following a link")
    assert list(elsewhere.iterdir()) == []
    theirs = open_tmp / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    _refused(keys, theirs, [SOLO], "is owned by uid 65534")
    assert list(theirs.iterdir()) == []
    # the clients' directory too
    d = open_tmp / "k2"
    keys.run(str(d), [SOLO | {"name": "main"}], False)
    (d / "main.clients").symlink_to(elsewhere)
    _refused(keys, d, [MAIN], f"{d}/main.clients is not a directory that can be opened")
    assert list(elsewhere.iterdir()) == [] and not (d / "main.keys").exists()


@pytest.mark.parametrize(
    ("instances", "shown"),
    [
        ([{"name": "../etc"}], "is not a file name"),
        ([{"name": "main"}, {"name": "main"}], "listed twice"),
        ([{"name": "main", "client_keys": ["a/b", "a__b"]}], "sharing a__b.key"),
        ([{"name": "main", "client_keys": ["ws alice"]}], "is not a file name"),
    ],
)
def test_names_that_are_not_one_file(
    keys: ModuleType, open_tmp: Path, instances: list[dict[str, object]], shown: str
) -> None:
    d = open_tmp / "keys"
    _refused(keys, d, instances, shown)
    assert not d.exists()  # refused before anything was made


def test_the_module_under_ansible_playbook(open_tmp: Path, tmp_path: Path) -> None:
    """The real ansible-playbook: changed, then ok with the same keys; in check mode nothing."""
    d = open_tmp / "keys"
    play = f"""
    - hosts: localhost
      connection: local
      gather_facts: false
      tasks:
        - llamafleet.fleet.llama_server_keys:
            key_dir: {d}
            instances: {json.dumps([MAIN])}
          register: r
          no_log: true
        - ansible.builtin.debug:
            msg: "RESULT {{{{ r.changed }}}} {{{{ r.api_keys | to_json }}}}"
    """
    runs = []
    for extra in ((), (), ("--check",)):
        done = run_playbook(tmp_path, play, *extra)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert "api_keys" not in done.stdout.split("TASK [ansible.builtin.debug]")[0]
        line = next(x for x in done.stdout.splitlines() if '"msg": "RESULT ' in x)
        runs.append(line.split("RESULT ", 1)[1])
    assert runs[0].startswith("True ") and runs[1].startswith("False ")
    assert runs[0][5:] == runs[1][6:] == runs[2][6:]
    assert (d / "main.key").read_text().strip() in runs[0]


def test_the_readers_on_other_hosts_check_the_key_the_same_way(server_filters: ModuleType) -> None:
    """claude_code and monitoring read a server's key file with slurp: llamafleet_api_key checks
    what it holds as the module does (a compromised server cannot hand a client two keys or a
    header with a newline)."""
    import base64

    from ansible.errors import AnsibleFilterError

    f = server_filters.FilterModule().filters()["llamafleet_api_key"]
    assert f(base64.b64encode(b"  good-key-0123\n").decode(), "gpu1: main.key") == "good-key-0123"
    for bad in (b"a\nb\n", b"a b", b"", b"k" * 4097):
        with pytest.raises(AnsibleFilterError, match=r"gpu1: main\.key does not hold one key"):
            f(base64.b64encode(bad).decode(), "gpu1: main.key")
    with pytest.raises(AnsibleFilterError, match="not base64"):
        f("%%%", "gpu1: main.key")
