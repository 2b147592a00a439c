"""ansible-test units for the collection's tar checks (plugins/module_utils/safetar.py), imported
by FQCN as the modules that use them import it. Members are real tarfile entries of an archive
built here, as llama_cpp and claude_code receive them."""

from __future__ import annotations

import io
import os
import tarfile

import pytest
from ansible_collections.llamafleet.fleet.plugins.module_utils import safetar


def _members(tmp_path, entries):
    """Write an archive with `entries` (name, kind, linkname) and read its members back."""
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as tar:
        for name, kind, link in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = b"x"
                info.size = len(data)
                info.mode = 0o4755 if name.endswith("suid") else 0o644
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "lnk": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            info.linkname = link
            tar.addfile(info)
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_members_root_may_unpack(tmp_path):
    m = _members(tmp_path, [("build", "dir", ""), ("build/bin/llama-server", "file", "")])
    assert safetar.member_problem(m["build"], top="build") is None
    assert safetar.member_problem(m["build/bin/llama-server"], top="build") is None


@pytest.mark.parametrize(
    ("name", "kind", "link", "why"),
    [
        ("../etc/cron.d/x", "file", "", "'..' path component"),
        ("/etc/passwd", "file", "", "absolute path"),
        ("build/bin/llama-server", "sym", "/bin/sh", "symbolic link"),
        ("build/bin/x", "lnk", "build/etc/shadow", "hard link"),
        ("build/fifo", "fifo", "", "not a regular file"),
        ("other/bin/llama-server", "file", "", "outside the build's directory"),
        ("build/a\nb", "file", "", "control characters"),
    ],
)
def test_members_root_must_not_unpack(tmp_path, name, kind, link, why):
    (member,) = _members(tmp_path, [(name, kind, link)]).values()
    problem = safetar.member_problem(member, top="build")
    assert problem is not None and why in problem


def test_only_the_expected_names_and_no_set_id_modes(tmp_path):
    m = _members(tmp_path, [("pkg/cli.js", "file", ""), ("pkg/suid", "file", "")])
    allowed = frozenset({"pkg/cli.js"})
    assert safetar.member_problem(m["pkg/cli.js"], allowed=allowed) is None
    assert "not one of the expected names" in safetar.member_problem(m["pkg/suid"], allowed=allowed)
    assert safetar.member_mode(m["pkg/suid"]) == 0o755  # set-uid dropped
    assert safetar.member_mode(m["pkg/cli.js"]) == 0o644


@pytest.mark.parametrize("name", ["../x", "b1-abc-cpu-123", "b9079-0123456789-cpu-0123456789/.."])
def test_build_names_that_would_be_paths_are_refused(name):
    with pytest.raises(ValueError, match="refusing to use it as a path"):
        safetar.check_build_name(name)


def test_open_regular_refuses_a_link(tmp_path):
    target = tmp_path / "t"
    target.write_bytes(b"abc")
    link = tmp_path / "l"
    os.symlink(target, link)
    assert safetar.sha256_path(str(target))[1] == 3
    with pytest.raises(OSError):
        safetar.open_regular(str(link))
