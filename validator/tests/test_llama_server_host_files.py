"""What the llama_server preflight reads from a server host, in one module
(plugins/modules/llama_server_host_files.py): the build's manifest and --help text, and each
model's metadata.json, read by root only from a directory no other account controls. The attack
tests plant what an account that owns (or can write) a model directory could: a link to another
directory's metadata, a directory of its own, a metadata.json that is a link to a root-only
file. Files are made under a root-owned, world-traversable temporary directory (open_tmp), as on
a host."""

from __future__ import annotations

import base64
import grp
import json
import os
import pwd
from pathlib import Path
from types import ModuleType

import pytest

from conftest import load_ansible_plugin, playbook_results, plugin_path, run_playbook

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the files are root's")
NOBODY = 65534
META = {"path": "/m/qwen/qwen.gguf", "sha256": "ab" * 32, "context_length": 262144}
#: an account every host has, as this machine describes it
ROOT = pwd.getpwuid(0)
ROOT_GROUP = grp.getgrgid(ROOT.pw_gid).gr_name


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(plugin_path("modules", "llama_server_host_files"))


def _host(root: Path) -> tuple[Path, Path]:
    """A build with a manifest and help text, and a models directory with one described model."""
    build = root / "builds" / "b1"
    build.mkdir(parents=True)
    (build / "llama-server.help.txt").write_text("--cache-ram N\n")
    manifest = {"name": "b1", "help_file": str(build / "llama-server.help.txt")}
    (build / "manifest.json").write_text(json.dumps(manifest))
    models = root / "models"
    (models / "qwen").mkdir(parents=True, mode=0o755)
    (models / "qwen" / "metadata.json").write_text(json.dumps(META))
    (models / "bare").mkdir(mode=0o755)
    return build / "manifest.json", models


def test_it_reads_the_manifest_the_help_and_each_models_metadata(
    mod: ModuleType, open_tmp: Path
) -> None:
    manifest, models = _host(open_tmp)
    found = mod.read(str(manifest), str(models), ["qwen", "bare", "absent", "/abs/x.gguf"])
    assert found["manifest_json"]["name"] == "b1"
    assert json.loads(base64.b64decode(found["manifest"]["content"]))["name"] == "b1"
    assert base64.b64decode(found["help"]["content"]) == b"--cache-ram N\n"
    # a model without metadata.json, a directory not there and an absolute path are left out
    assert found["models_meta"] == {"qwen": META}


def test_no_manifest_gives_empty_answers(mod: ModuleType, open_tmp: Path) -> None:
    _, models = _host(open_tmp)
    found = mod.read(str(open_tmp / "none.json"), str(models), [])
    assert found == {"manifest": {}, "manifest_json": {}, "help": {}, "models_meta": {}}
    (open_tmp / "list.json").write_text("[1, 2]")
    assert mod.read(str(open_tmp / "list.json"), str(models), [])["manifest_json"] == {}


@pytest.mark.parametrize("how", ["link", "owner", "group-writable", "world-writable"])
def test_a_model_directory_another_account_controls_is_refused(
    mod: ModuleType, open_tmp: Path, how: str
) -> None:
    """The account that serves (or any other) could point root at metadata of its choosing: a
    checksum in the unit that is not the model's, or a path root would read for it."""
    manifest, models = _host(open_tmp)
    target = models / "qwen"
    if how == "link":
        (open_tmp / "elsewhere").mkdir()
        target.rename(open_tmp / "elsewhere" / "qwen")
        target.symlink_to(open_tmp / "elsewhere" / "qwen")
    elif how == "owner":
        os.chown(target, NOBODY, NOBODY)
    else:
        target.chmod(0o775 if how == "group-writable" else 0o757)
    with pytest.raises(mod.RefusedError) as refused:
        mod.read(str(manifest), str(models), ["qwen"])
    msg = str(refused.value)
    assert msg.startswith(f"{models}/qwen is ")
    assert "root does not read its metadata.json by path. Run the gguf_models role" in msg
    assert ("a symbolic link" in msg) == (how == "link")
    if how == "owner":
        assert "owned by nobody (mode 0755)" in msg


def test_a_metadata_file_that_is_a_link_is_not_followed(mod: ModuleType, open_tmp: Path) -> None:
    manifest, models = _host(open_tmp)
    secret = open_tmp / "secret.json"
    secret.write_text(json.dumps({"sha256": "cd" * 32}))
    secret.chmod(0o600)
    (models / "qwen" / "metadata.json").unlink()
    (models / "qwen" / "metadata.json").symlink_to(secret)
    assert mod.read(str(manifest), str(models), ["qwen"])["models_meta"] == {}


def test_a_metadata_file_that_is_not_json_is_refused_naming_it(
    mod: ModuleType, open_tmp: Path
) -> None:
    manifest, models = _host(open_tmp)
    (models / "qwen" / "metadata.json").write_text("{not json")
    with pytest.raises(mod.RefusedError, match=r"metadata.json is not JSON .*gguf_models role"):
        mod.read(str(manifest), str(models), ["qwen"])


def test_the_module_under_ansible_playbook(mod: ModuleType, open_tmp: Path, tmp_path: Path) -> None:
    """The module as the role's task runs it (check mode too), and a refusal as the play sees
    it."""
    manifest, models = _host(open_tmp)
    play = f"""
    - hosts: localhost
      connection: local
      gather_facts: false
      tasks:
        - llamafleet.fleet.llama_server_host_files:
            manifest: {manifest}
            models_dir: {models}
            models: [qwen, bare]
            account: {{user: {ROOT.pw_name}, group: {ROOT_GROUP}, shell: "{ROOT.pw_shell}",
                       home: "{ROOT.pw_dir}"}}
          register: files
        - ansible.builtin.debug:
            msg: "RESULT files {{{{ [files.changed, files.manifest_json.name, files.models_meta,
                  files.account_current] | to_json }}}}"
        - ansible.builtin.file:
            path: {models}/bare
            mode: "0777"
          check_mode: false
        - block:
            - llamafleet.fleet.llama_server_host_files:
                manifest: {manifest}
                models_dir: {models}
                models: [qwen, bare]
          rescue:
            - ansible.builtin.debug:
                msg: "RESULT refused {{{{ ansible_failed_result.msg | to_json }}}}"
    """
    done = run_playbook(tmp_path, play, "--check")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    found = playbook_results(done.stdout)
    assert found["files"] == [False, "b1", {"qwen": META}, True]
    assert found["refused"].startswith(f"{models}/bare is owned by root (mode 0777)")


def test_the_service_account_is_current_only_as_the_role_makes_it(mod: ModuleType) -> None:
    """The role's group and user tasks run only where this says no: a missing group or user, and
    a user whose primary group, shell or home differs from what the user task would set."""
    same = {"user": ROOT.pw_name, "group": ROOT_GROUP, "shell": ROOT.pw_shell, "home": ROOT.pw_dir}
    assert mod.account_current(**same) is True
    nobody_group = grp.getgrgid(pwd.getpwuid(NOBODY).pw_gid).gr_name
    for change in (
        {"user": "llamafleet-no-such-user"},
        {"group": "llamafleet-no-such-group"},
        {"group": nobody_group},  # exists, but not root's primary group
        {"shell": "/usr/sbin/nologin"},
        {"home": "/nonexistent"},
    ):
        assert mod.account_current(**(same | change)) is False, change
