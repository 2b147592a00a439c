"""plugins/modules/llamafleet_tls.py: one task keeps a host's TLS directory current (the host's
CA, the keys, the certificates) for the llama_server and llama_pool roles. The certificates are
made by the real openssl and checked with it. The attack tests plant what an account could if the
directory or a name in it were not root's alone (a link at a certificate's or a key's name, a link
in place of the directory, a writable directory above it) and hand the module the values that
would add a name or a line to a certificate's extension file."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import CommandRunner, load_ansible_plugin, playbook_results, plugin_path, run_playbook

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the keys are root's"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl CLI"),
]
NOBODY = 65534
SANS = ["IP:127.0.0.1", "IP:::1", "DNS:localhost", "DNS:gpu1"]


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(plugin_path("modules", "llamafleet_tls"))


def _params(d: Path, **over: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "dir": str(d),
        "ca_cert": "",
        "ca_key": "",
        "ca_subject": "/CN=llamafleet CA gpu1",
        "ca_comment": "the nameConstraints of the llamafleet CA of gpu1: its instances' names",
        "name_constraints": "critical,permitted;DNS:localhost,permitted;DNS:gpu1",
        "days": 825,
        "renew_within": 2592000,
        "certs": [_cert("main"), _cert("other", sans=SANS[:3])],
    }
    p.update(over)
    return p


def _cert(name: str, sans: list[str] | None = None, **over: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "key": f"{name}.key",
        "cert": f"{name}.crt",
        "ext": f"{name}.ext",
        "mode": "0600",
        "subject": f"/CN={name}",
        "comment": f"llama-server instance {name}",
        "sans": SANS if sans is None else sans,
    }
    c.update(over)
    return c


def _keep(mod: ModuleType, d: Path, *, modify: bool = True, **over: Any) -> dict[str, Any]:
    return mod.keep(CommandRunner(), _params(d, **over), modify=modify)  # type: ignore[no-any-return]


def _openssl(*args: str) -> str:
    return subprocess.run(
        ["openssl", *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def _verify(ca: Path, cert: Path) -> None:
    _openssl("verify", "-CAfile", str(ca), str(cert))


def _pubkey_of_cert(cert: Path) -> str:
    return _openssl("x509", "-noout", "-pubkey", "-in", str(cert))


def _pubkey_of_key(key: Path) -> str:
    return _openssl("pkey", "-pubout", "-in", str(key))


def test_it_makes_the_ca_keys_and_certificates_and_then_changes_nothing(
    mod: ModuleType, open_tmp: Path
) -> None:
    d = open_tmp / "etc" / "tls"
    first = _keep(mod, d)
    assert first["signed"] == ["main", "other"]
    for name in ("main", "other"):
        _verify(d / "ca.crt", d / f"{name}.crt")
        assert _pubkey_of_cert(d / f"{name}.crt") == _pubkey_of_key(d / f"{name}.key")
        assert _mode(d / f"{name}.key") == 0o600 and _mode(d / f"{name}.crt") == 0o600
        assert first["certs"][name] == hashlib.sha256((d / f"{name}.crt").read_bytes()).hexdigest()
    assert _mode(d) == 0o700 and _mode(d / "ca.key") == 0o600 and _mode(d / "ca.crt") == 0o644
    assert first["ca_pem"] == (d / "ca.crt").read_text() and first["ca_file"] == f"{d}/ca.crt"
    ca_text = _openssl("x509", "-noout", "-text", "-in", str(d / "ca.crt"))
    assert "Permitted:" in ca_text and "DNS:gpu1" in ca_text and "CA:TRUE, pathlen:0" in ca_text
    cert_text = _openssl("x509", "-noout", "-text", "-in", str(d / "main.crt"))
    assert "DNS:localhost, DNS:gpu1" in cert_text and "TLS Web Server Authentication" in cert_text
    again = _keep(mod, d)
    assert (again["signed"], again["changes"], again["certs"]) == ([], [], first["certs"])


def test_the_files_are_those_the_roles_wrote_before_so_an_upgrade_signs_nothing(
    mod: ModuleType, open_tmp: Path
) -> None:
    """The extension files, byte for byte, as the roles' tasks (copy with content) wrote them
    before this module: a host converged by an earlier version keeps its certificates."""
    d = open_tmp / "tls"
    found = _keep(mod, d)
    ca_sum = hashlib.sha256((d / "ca.crt").read_bytes()).hexdigest()
    assert (d / "ca.ext").read_text() == (
        "# the nameConstraints of the llamafleet CA of gpu1: its instances' names\n"
        "nameConstraints = critical,permitted;DNS:localhost,permitted;DNS:gpu1\n"
    )
    assert (d / "main.ext").read_text() == (
        f"# llama-server instance main, CA {d}/ca.crt sha256 {ca_sum}\n"
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature, keyEncipherment\n"
        "extendedKeyUsage = serverAuth\n"
        "subjectAltName = IP:127.0.0.1, IP:::1, DNS:localhost, DNS:gpu1\n"
    )
    assert found["certs"]["main"]


def test_new_names_sign_the_ca_and_every_certificate_again_with_the_same_keys(
    mod: ModuleType, open_tmp: Path
) -> None:
    d = open_tmp / "tls"
    _keep(mod, d)
    keys = {n: (d / n).read_bytes() for n in ("ca.key", "main.key", "other.key")}
    old_ca = (d / "ca.crt").read_bytes()
    more = "critical,permitted;DNS:localhost,permitted;DNS:gpu1,permitted;DNS:gpu2"
    found = _keep(mod, d, name_constraints=more)
    assert found["signed"] == ["main", "other"] and (d / "ca.crt").read_bytes() != old_ca
    assert {n: (d / n).read_bytes() for n in keys} == keys
    _verify(d / "ca.crt", d / "main.crt")
    # a CA whose names leave out a certificate's: openssl refuses that certificate
    _keep(mod, d, name_constraints="critical,permitted;DNS:localhost,permitted;DNS:gpu2")
    with pytest.raises(subprocess.CalledProcessError):
        _verify(d / "ca.crt", d / "main.crt")
    # one certificate's names: only it is signed again
    certs = [_cert("main", sans=[*SANS, "DNS:gpu1.example.org"]), _cert("other", sans=SANS[:3])]
    assert _keep(mod, d, certs=certs, name_constraints=_params(d)["name_constraints"])[
        "signed"
    ] == ["main", "other"]  # the CA changed back: both
    assert _keep(mod, d, certs=certs)["signed"] == []


def test_an_expiring_certificate_and_a_lost_key_are_signed_again(
    mod: ModuleType, open_tmp: Path
) -> None:
    d = open_tmp / "tls"
    _keep(mod, d, days=1)
    assert _keep(mod, d, renew_within=3 * 86400)["signed"] == ["main", "other"]
    assert _keep(mod, d, renew_within=3 * 86400)["signed"] == []  # now 825 days
    # a key removed (lost, or by hand): a new one, and its certificate signed for it, not the old
    (d / "main.key").unlink()
    found = _keep(mod, d)
    assert found["signed"] == ["main"]
    assert _pubkey_of_cert(d / "main.crt") == _pubkey_of_key(d / "main.key")
    # a certificate removed: signed again
    (d / "other.crt").unlink()
    assert _keep(mod, d)["signed"] == ["other"]


def test_wrong_owners_and_modes_are_put_right(mod: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "tls"
    _keep(mod, d)
    os.chown(d / "main.key", NOBODY, NOBODY)
    (d / "main.crt").chmod(0o644)
    (d / "ca.key").chmod(0o640)
    (d / "other.ext").chmod(0o644)
    d.chmod(0o755)
    found = _keep(mod, d)
    assert found["signed"] == [] and len(found["changes"]) == 5
    assert (d / "main.key").stat().st_uid == 0 and _mode(d / "main.key") == 0o600
    assert _mode(d / "main.crt") == 0o600 and _mode(d / "ca.key") == 0o600 and _mode(d) == 0o700
    assert _mode(d / "other.ext") == 0o600


def test_check_mode_changes_nothing(mod: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "etc" / "tls"
    seen = _keep(mod, d, modify=False)
    assert seen["signed"] == ["main", "other"] and not (open_tmp / "etc").exists()
    assert seen["ca_pem"] == "" and seen["certs"] == {"main": "", "other": ""}
    done = _keep(mod, d)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    renamed = _keep(mod, d, modify=False, name_constraints="critical,permitted;DNS:gpu9")
    assert renamed["signed"] == ["main", "other"] and renamed["certs"] == done["certs"]
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


def test_your_own_ca_signs_and_its_files_must_be_roots_alone(
    mod: ModuleType, open_tmp: Path
) -> None:
    own = open_tmp / "pki"
    own.mkdir()
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-days", "30", "-subj", "/CN=own CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-keyout", str(own / "ca.key"), "-out", str(own / "ca.crt"),
    )  # fmt: skip
    (own / "ca.key").chmod(0o600)
    d = open_tmp / "tls"
    mine: dict[str, Any] = {"ca_cert": str(own / "ca.crt"), "ca_key": str(own / "ca.key")}
    found = _keep(mod, d, **mine)
    assert found["signed"] == ["main", "other"] and found["ca_file"] == str(own / "ca.crt")
    _verify(own / "ca.crt", d / "main.crt")
    assert not (d / "ca.key").exists() and not (d / "ca.crt").exists()
    assert f"CA {own}/ca.crt sha256 " in (d / "main.ext").read_text()
    assert _keep(mod, d, **mine)["signed"] == []
    (own / "ca.key").chmod(0o640)
    with pytest.raises(mod.UnsafePathError, match=r"ca\.key \(root:root 0640\): your own CA"):
        _keep(mod, d, **mine)
    (own / "ca.key").chmod(0o600)
    os.chown(own / "ca.crt", NOBODY, NOBODY)
    with pytest.raises(mod.UnsafePathError, match=r"ca\.crt \(nobody:.* 0644\)"):
        _keep(mod, d, **mine)
    os.chown(own / "ca.crt", 0, 0)
    (own / "link.key").symlink_to(own / "ca.key")
    with pytest.raises(mod.UnsafePathError, match="a link or not a regular file"):
        _keep(mod, d, ca_cert=mine["ca_cert"], ca_key=str(own / "link.key"))
    with pytest.raises(mod.UnsafePathError, match="give both"):
        _keep(mod, d, ca_cert=mine["ca_cert"])


# ---------------------------------------------------------------------------------- attacks


@pytest.mark.parametrize("name", ["main.crt", "main.key", "other.ext", "ca.key", "ca.crt"])
def test_a_link_planted_at_a_name_in_the_directory_is_refused_never_followed(
    mod: ModuleType, open_tmp: Path, name: str
) -> None:
    d = open_tmp / "tls"
    _keep(mod, d)
    target = open_tmp / "shadow"
    target.write_text("root's own\n")
    (d / name).unlink()
    (d / name).symlink_to(target)
    with pytest.raises(mod.UnsafePathError, match=rf"{re.escape(name)} is a symbolic link"):
        _keep(mod, d)
    assert target.read_text() == "root's own\n" and (d / name).is_symlink()


def test_a_second_hard_link_at_a_name_is_refused(mod: ModuleType, open_tmp: Path) -> None:
    d = open_tmp / "tls"
    _keep(mod, d)
    target = open_tmp / "shadow"
    target.write_text("root's own\n")
    (d / "other.ext").unlink()
    os.link(target, d / "other.ext")
    with pytest.raises(mod.UnsafePathError, match=r"other\.ext is a file with 2 hard links"):
        _keep(mod, d)
    assert target.read_text() == "root's own\n"


def test_the_directory_must_be_roots_all_the_way_down(mod: ModuleType, open_tmp: Path) -> None:
    real = open_tmp / "real"
    real.mkdir(mode=0o700)
    (open_tmp / "tls").symlink_to(real)
    with pytest.raises(mod.UnsafePathError, match="not a directory; it is not followed"):
        _keep(mod, open_tmp / "tls")
    shared = open_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(mod.UnsafePathError, match="writable only by root"):
        _keep(mod, shared / "tls")
    assert list(real.iterdir()) == [] and not (shared / "tls").exists()


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"certs": [_cert("main", sans=["DNS:gpu1, DNS:api.anthropic.com"])]}, "certificate name"),
        ({"certs": [_cert("main", sans=["DNS:gpu1\nbasicConstraints = CA:TRUE"])]}, "name"),
        ({"certs": [_cert("main", sans=["IP:10.0.0.300"])]}, "certificate name"),
        ({"certs": [_cert("main", comment="x\nbasicConstraints = critical, CA:TRUE")]}, "comment"),
        ({"certs": [_cert("main", subject="/CN=a\n")]}, "subject"),
        ({"certs": [_cert("main", cert="../../etc/shadow")]}, "one path component"),
        ({"certs": [_cert("main"), _cert("main")]}, "given twice"),
        ({"name_constraints": "critical,permitted;DNS:gpu1\nbasicConstraints=CA:TRUE"}, "name_"),
        ({"name_constraints": ""}, "name_constraints"),
        ({"ca_comment": "x\nnameConstraints = critical,permitted;DNS:evil"}, "ca_comment"),
    ],
)  # fmt: skip
def test_values_that_would_add_a_name_or_a_line_are_refused_before_anything_is_written(
    mod: ModuleType, open_tmp: Path, over: dict[str, Any], match: str
) -> None:
    d = open_tmp / "tls"
    with pytest.raises(mod.UnsafePathError, match=match):
        _keep(mod, d, **over)
    assert not (d / "main.crt").exists()


def test_the_module_under_ansible_playbook(open_tmp: Path, tmp_path: Path) -> None:
    """As the roles run it: check mode with --diff on a bare host, the run, the run again
    (changed false), and a refusal as the play sees it (the task's message)."""
    d = open_tmp / "tls"
    play = f"""
    - hosts: localhost
      connection: local
      gather_facts: false
      vars:
        sans: ["IP:127.0.0.1", "DNS:localhost"]
      tasks:
        - block:
            - llamafleet.fleet.llamafleet_tls:
                dir: {d}
                name_constraints: critical,permitted;DNS:localhost
                certs:
                  - {{name: pool, key: pool.pem.key, cert: pool.pem, ext: pool.ext, mode: "0644",
                      subject: /CN=lb, comment: llamafleet pool lb, sans: "{{{{ sans }}}}"}}
              register: tls
          rescue:
            - ansible.builtin.debug:
                msg: "RESULT refused {{{{ ansible_failed_result.msg | to_json }}}}"
        - ansible.builtin.debug:
            msg: "RESULT tls {{{{ [tls.changed, tls.signed, tls.certs.pool | length] | to_json }}}}"
    """
    checked = run_playbook(tmp_path, play, "--check", "--diff")
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    assert playbook_results(checked.stdout)["tls"] == [True, ["pool"], 0]
    assert f"{d}/pool.pem: signed" in checked.stdout and not d.exists()
    done = run_playbook(tmp_path, play)
    assert playbook_results(done.stdout)["tls"] == [True, ["pool"], 64]
    assert _mode(d / "pool.pem") == 0o644 and _mode(d / "pool.pem.key") == 0o600
    again = run_playbook(tmp_path, play)
    assert playbook_results(again.stdout)["tls"] == [False, [], 64]
    bad = run_playbook(tmp_path, play.replace('"DNS:localhost"]', '"DNS:a,DNS:b"]'))
    assert "give DNS:<name> or IP:<address>" in playbook_results(bad.stdout)["refused"]
