# Apache-2.0
"""Placing one (GGUF) file under its final name only after its sha256 was verified, root-owned,
through directory descriptors (see safefs.py): the work of the module gguf_fetch, shared with the
module gguf_models_state, which asks it in check mode for every file of a host's models in one
run on the host."""

from __future__ import annotations

import hashlib
import os
import stat
from typing import TYPE_CHECKING, Any
from urllib.error import HTTPError
from urllib.parse import urljoin, urlsplit, urlunsplit

from ansible.module_utils.urls import open_url
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import (
    FILE_MODE,
    HEX64,
    TEMP_MODE,
    UnsafePathError,
    check_name,
    create_exclusive,
    describe,
    entry_problem,
    is_clean,
    join,
    lstat_entry,
    open_regular,
    read_fd,
    remove_unsafe_temp,
    replace_file,
    resolve_uid,
    walk_dir,
    write_all,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    Params = dict[str, Any]  # the module's options
    Result = dict[str, Any]  # the module's result
    Change = tuple[str, str, str]  # (path, before, after)
    Owners = tuple[int, int | None]  # who may own what is found: root, the takeover account
    Origin = tuple[str, str, int | None]  # (scheme, host, port)

CHUNK = 4 * 1024 * 1024
MAX_REDIRECTS = 10
REDIRECT_CODES = (301, 302, 303, 307, 308)
DEFAULT_PORTS = {"http": 80, "https": 443}


class FetchError(Exception):
    def __init__(self, msg: str, result: Mapping[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.result = dict(result or {})


def origin(url: str) -> Origin:
    """(scheme, host, port) of a URL: where headers may be sent."""
    u = urlsplit(url)
    scheme = u.scheme.lower()
    try:
        port = u.port
    except ValueError:
        port = None
    return scheme, (u.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme)


def show_url(url: str) -> str:
    """A URL for a message: without credentials and without its query (a CDN's signature)."""
    u = urlsplit(url)
    host = u.netloc.rsplit("@", 1)[-1]
    return urlunsplit((u.scheme, host, u.path, "", ""))


def check_transport(url: str, headers: Mapping[str, str] | None, allow_insecure: bool) -> None:
    """Refuse to send headers (a token) over plain http unless allowed."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "http" and headers and not allow_insecure:
        raise FetchError(
            f"Refused: {show_url(url)} is plain http and headers ({', '.join(sorted(headers))}) "
            "would be sent in clear text. Fix: use an https URL, or set "
            "gguf_models_allow_insecure_transport: true (module option allow_insecure_transport) "
            "on a trusted network only."
        )


def redirect_target(current: str, location: str | None, code: int = 302) -> str:
    """The URL a redirect from `current` to `location` leads to, or FetchError: only http and
    https, never from https down to http."""
    if not location:
        raise FetchError(f"{show_url(current)} answered {code} without a Location header")
    new = urljoin(current, location.strip())
    old_scheme = urlsplit(current).scheme.lower()
    new_scheme = urlsplit(new).scheme.lower()
    if new_scheme not in ("http", "https"):
        raise FetchError(
            f"Refused: {show_url(current)} redirects to a {new_scheme or 'relative'}: URL "
            f"({show_url(new)}); only http and https are followed."
        )
    if old_scheme == "https" and new_scheme == "http":
        raise FetchError(
            f"Refused: {show_url(current)} redirects from https to plain http "
            f"({show_url(new)}); a download is never downgraded. Fix: use a URL that stays on "
            "https."
        )
    return new


def hop_headers(
    url: str,
    first_origin: Origin,
    user_headers: Mapping[str, str],
    protocol_headers: Mapping[str, str],
) -> dict[str, str]:
    """Headers for one request: the user's (a token) only to the origin of the first URL; the
    protocol's (Range) always."""
    headers = dict(user_headers) if origin(url) == first_origin else {}
    headers.update(protocol_headers)
    return headers


def open_following(
    p: Params, method: str = "GET", protocol_headers: Mapping[str, str] | None = None
) -> Any:
    """open_url, following redirects one hop at a time (see redirect_target, hop_headers)."""
    url = p["url"]
    user_headers = dict(p["headers"] or {})
    first = origin(url)
    for _ in range(MAX_REDIRECTS + 1):
        headers = hop_headers(url, first, user_headers, protocol_headers or {})
        try:
            return open_url(
                url,
                method=method,
                headers=headers,
                timeout=p["timeout"],
                validate_certs=p["validate_certs"],
                follow_redirects="none",
            )
        except HTTPError as e:
            if e.code not in REDIRECT_CODES:
                raise
            location = e.headers.get("Location") or e.headers.get("URI")
            e.close()
            url = redirect_target(url, location, e.code)
    raise FetchError(f"More than {MAX_REDIRECTS} redirects from {show_url(p['url'])}")


def sha256_fd(fd: int) -> str:
    h = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        block = os.read(fd, CHUNK)
        if not block:
            return h.hexdigest()
        h.update(block)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
        n /= 1024.0
    return str(n)


def read_sidecar(dfd: int, dpath: str, name: str, owners: Owners) -> tuple[str | None, bool]:
    """(checksum it names or None, whether it is a clean root-owned file). A sidecar that is not
    a plain file of an expected owner is not read (it gets replaced)."""
    lst = lstat_entry(dfd, name)
    if lst is None or entry_problem(lst, owners) is not None:
        return None, False
    opened = open_regular(dfd, dpath, name, owners=owners)
    if opened is None:
        return None, False
    fd, st = opened
    try:
        words: list[str] = read_fd(fd, 4096).decode("utf-8", "replace").split()
    finally:
        os.close(fd)
    rec = words[0].lower() if words else None
    clean: bool = is_clean(st)
    return (rec if rec and HEX64.match(rec) else None), clean


def sidecar_bytes(digest: str, name: str) -> bytes:
    return f"{digest}  {name}\n".encode()


def _diff(changes: Sequence[Change], header: str) -> dict[str, str]:
    return {
        "before_header": header,
        "after_header": header,
        "before": "".join(f"{path}: {before}\n" for path, before, _ in changes),
        "after": "".join(f"{path}: {after}\n" for path, _, after in changes),
    }


def ensure_directory(
    dest: str, base: str | None, takeover_uid: int | None, check_mode: bool
) -> Result:
    with walk_dir(
        dest, base or dest, takeover_uid=takeover_uid, modify=not check_mode, create=True
    ) as w:
        result: Result = {
            "changed": bool(w.changes),
            "dest": dest,
            "path": w.path if w.exists else dest,
            "actions": [f"{p}: {b} -> {a}" for p, b, a in w.changes],
        }
        if w.changes:
            result["diff"] = _diff(w.changes, dest)
        return result


def fetch(p: Params, check_mode: bool = False) -> Result:
    """The module's work, without AnsibleModule: `p` holds the options (missing ones take their
    defaults). Returns the result dict; raises FetchError or UnsafePathError."""
    p = {**DEFAULTS, **p}
    dest = os.path.normpath(p["dest"])
    if not os.path.isabs(dest):
        raise FetchError(f"dest must be an absolute path, not {p['dest']!r}")
    takeover_uid: int | None = resolve_uid(p["takeover_owner"])
    if p["state"] == "directory":
        return ensure_directory(dest, p["base"], takeover_uid, check_mode)
    want = (p["sha256"] or "").strip().lower()
    if not HEX64.match(want):
        raise FetchError(f"sha256 for {dest} must be 64 hex digits, got {p['sha256']!r}")
    if p["url"]:
        check_transport(p["url"], p["headers"], p["allow_insecure_transport"])
    ddir, name = os.path.split(dest)
    check_name(name)
    probe = p["state"] == "probe"
    modify = not check_mode and not probe
    result: Result = {
        "changed": False,
        "dest": dest,
        "valid": False,
        "resumed_from": 0,
        "actions": [],
    }
    with walk_dir(
        ddir, p["base"] or ddir, takeover_uid=takeover_uid, modify=modify, create=True
    ) as w:
        result["actions"].extend(f"{path}: {b} -> {a}" for path, b, a in w.changes)
        result["changed"] = bool(w.changes) and not probe
        return _fetch_in(
            w,
            p,
            dest=dest,
            want=want,
            owners=(0, takeover_uid),
            check_mode=check_mode,
            result=result,
        )


def _fetch_in(
    w: Any, p: Params, *, dest: str, want: str, owners: Owners, check_mode: bool, result: Result
) -> Result:
    """fetch's work in the opened directory `w`."""
    name = os.path.basename(dest)
    probe = p["state"] == "probe"
    dfd: int = w.fd
    dpath: str = w.path
    # a directory that is not (yet) root's in check mode or for a probe: look, never touch
    settled = w.exists and not w.changes
    reserve = p["min_free_mb"] * 1024 * 1024

    def check_space(total: int | None, have: int = 0) -> None:
        _check_space(dfd, dpath, name, total, have, reserve=reserve, result=result)

    if not w.exists:  # check mode or probe: the directory is not there yet
        check_space(p["size"])
        result["changed"] = not probe
        result["diff"] = _diff([*w.changes, (dest, "absent", f"sha256 {want}")], dest)
        return result

    # 1. Already in place?
    valid, before, fixes = _in_place(
        dfd,
        dpath,
        name,
        want,
        verify_existing=p["verify_existing"],
        owners=owners,
        modify=not check_mode and not probe,
        result=result,
    )
    if valid:
        result["actions"].extend(f"{path}: {b} -> {a}" for path, b, a in fixes)
        if fixes and not probe:
            result["changed"] = True
        if result["changed"]:
            result["diff"] = _diff(w.changes + fixes, dest)
        return result

    part = name + ".part"
    lst = lstat_entry(dfd, part)
    have = lst.st_size if lst is not None and entry_problem(lst, owners) is None else 0

    if probe:
        if not check_mode and settled:
            _remove_unsafe_temps(dfd, dpath, name, owners, result)
        check_space(p["size"], have)
        return result

    result["changed"] = True
    result["diff"] = _diff(
        [*w.changes, (dest, before, f"sha256 {want} root:root {FILE_MODE:04o}")], dest
    )
    if check_mode:
        return result
    got, size = _download_verified(
        p, dfd, dpath, dest=dest, want=want, owners=owners, check_space=check_space, result=result
    )
    _install(dfd, dpath, part, name, got)
    result.update(valid=True, size=size, sha256=got)
    return result


def _download_verified(
    p: Params,
    dfd: int,
    dpath: str,
    *,
    dest: str,
    want: str,
    owners: Owners,
    check_space: Callable[..., None],
    result: Result,
) -> tuple[str, int]:
    """Download (resuming) into <name>.part, a root-owned regular file with one link, and verify
    it; its (sha256, size)."""
    name = os.path.basename(dest)
    part = name + ".part"
    _remove_unsafe_temps(dfd, dpath, name, owners, result, changed=False)
    pfd, have = _open_part(dfd, dpath, part, owners, result["actions"])
    try:
        if p["url"]:
            pfd, have = _download(p, dfd, part, pfd, have, check_space=check_space, result=result)
        elif pfd is None:
            raise FetchError(f"Neither url nor a copied {join(dpath, part)} to finalize", result)
        if pfd is None:  # an empty download
            pfd = create_exclusive(dfd, part, TEMP_MODE)
        return _verify_part(pfd, dfd, part, dest=dest, want=want, p=p, result=result)
    finally:
        if pfd is not None:
            os.close(pfd)


def _check_space(
    dfd: int,
    dpath: str,
    name: str,
    total: int | None,
    have: int = 0,
    *,
    reserve: int,
    result: Result,
) -> None:
    """Refuse (FetchError) when the directory lacks room for the rest of `total` bytes (None:
    unknown, not checked) plus the `reserve`."""
    if total is None:
        return
    need = max(total - have, 0) + reserve
    st = os.fstatvfs(dfd)
    avail = st.f_bavail * st.f_frsize
    if avail < need:
        raise FetchError(
            f"Not enough free space in {dpath} for {name}: {human(need)} needed "
            f"({human(max(total - have, 0))} to download + {human(reserve)} reserve), "
            f"{human(avail)} free.",
            result,
        )


def _remove_unsafe_temps(
    dfd: int, dpath: str, name: str, owners: Owners, result: Result, *, changed: bool = True
) -> None:
    """Remove a <name>.part or <name>.sha256.tmp that is not a clean temporary file of ours;
    each removal is an action (and a change, with `changed`)."""
    for tname in (name + ".part", name + ".sha256.tmp"):
        gone = remove_unsafe_temp(dfd, dpath, tname, owners)
        if gone:
            result["actions"].append(gone)
            if changed:
                result["changed"] = True


def _open_part(
    dfd: int, dpath: str, part: str, owners: Owners, actions: list[str]
) -> tuple[int | None, int]:
    """(fd, size) of an existing partial download, made root's 0600; (None, 0) when none."""
    opened = open_regular(dfd, dpath, part, os.O_RDWR, owners)
    if opened is None:
        return None, 0
    pfd, pst = opened
    if not is_clean(pst, TEMP_MODE):
        os.fchown(pfd, 0, 0)
        os.fchmod(pfd, TEMP_MODE)
        actions.append(f"{join(dpath, part)}: {describe(pst)} -> root:root 0600")
    return pfd, pst.st_size


def _verify_part(
    pfd: int, dfd: int, part: str, *, dest: str, want: str, p: Params, result: Result
) -> tuple[str, int]:
    """The download's (sha256, size) once it has the expected sha256 (and GGUF magic, with
    check_magic), synced and mode FILE_MODE; else it is deleted and FetchError raised."""
    name = os.path.basename(dest)
    got = sha256_fd(pfd)
    if got != want:
        os.unlink(part, dir_fd=dfd)
        raise FetchError(
            f"sha256 mismatch for {name}: expected {want}, got {got}. The download was "
            f"deleted; nothing was written to {dest}.",
            result,
        )
    if p["check_magic"]:
        magic = os.pread(pfd, 4, 0)
        if magic != b"GGUF":
            os.unlink(part, dir_fd=dfd)
            raise FetchError(
                f"{name} is not a GGUF file (magic {magic!r}); nothing was written to {dest}.",
                result,
            )
    os.fsync(pfd)
    os.fchmod(pfd, FILE_MODE)
    return got, os.fstat(pfd).st_size


def _install(dfd: int, dpath: str, part: str, name: str, got: str) -> None:
    """Rename the verified download to its final name and write its sidecar."""
    side = name + ".sha256"
    slst = lstat_entry(dfd, side)
    if slst is not None:
        if stat.S_ISDIR(slst.st_mode):
            raise UnsafePathError(f"{join(dpath, side)} is a directory. Fix: remove it.")
        os.unlink(side, dir_fd=dfd)
    os.rename(part, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    replace_file(dfd, dpath, side, sidecar_bytes(got, name))


def _in_place(
    dfd: int,
    dpath: str,
    name: str,
    want: str,
    *,
    verify_existing: bool,
    owners: Owners,
    modify: bool,
    result: Result,
) -> tuple[bool, str, list[Change]]:
    """Whether the final name holds the expected content. Returns (valid, what is there now for
    the diff, [(path, before, after)] of the fixes to its ownership and sidecar, made with
    `modify`). Sets `valid` and `size` in `result`."""
    path = join(dpath, name)
    try:
        opened = open_regular(dfd, dpath, name, os.O_RDONLY, owners)
    except UnsafePathError as e:
        raise UnsafePathError(
            f"{e}. This is the model's final name, which must be a regular file with one link "
            f"owned by root; it is refused, not replaced. Fix: remove {path} (it may have been "
            "planted) and rerun."
        ) from e
    if opened is None:
        return False, "absent", []
    fd, st = opened
    try:
        side = name + ".sha256"
        rec, side_clean = read_sidecar(dfd, dpath, side, owners)
        taken = st.st_uid != 0  # the old owner could have changed it: hash it once
        if rec == want and not verify_existing and not taken:
            got = want
        elif rec is not None and rec != want and not verify_existing and not taken:
            got = rec  # another version of the file: replace it
        else:
            got = sha256_fd(fd)
        if got != want:
            return False, f"sha256 {got} {describe(st)}", []
        result["valid"] = True
        result["size"] = st.st_size
        fixes = []
        if not is_clean(st):
            fixes.append((path, describe(st), f"root:root {FILE_MODE:04o}"))
            if modify:
                os.fchown(fd, 0, 0)
                os.fchmod(fd, FILE_MODE)
        if rec != want or not side_clean:
            fixes.append((join(dpath, side), "stale" if rec else "absent", f"sha256 {want}"))
            if modify:
                replace_file(dfd, dpath, side, sidecar_bytes(want, name))
        return True, describe(st), fixes
    finally:
        os.close(fd)


def _remote_size(p: Params, result: Result) -> int | None:
    """The size the server names in answer to HEAD, else the `size` option (None: unknown)."""
    total: int | None = p["size"]
    try:
        head = open_following(p, "HEAD")
        length = head.headers.get("Content-Length")
        if length and length.isdigit():
            total = int(length)
    except FetchError as e:  # a refused redirect: the GET would meet it too
        raise FetchError(str(e), result) from e
    except Exception as e:  # some servers refuse HEAD; the size then comes from GET
        result["head_error"] = str(e)
    return total


def _get(p: Params, have: int, result: Result) -> Any:
    """The GET response from byte `have` on; None when the server says the range is past the end
    (the partial file is already complete)."""
    try:
        return open_following(p, "GET", {"Range": f"bytes={have}-"} if have else None)
    except FetchError as e:
        raise FetchError(str(e), result) from e
    except Exception as e:  # reported to the user
        if getattr(e, "code", None) == 416 and have:
            return None
        raise FetchError("Download of {} failed: {}".format(p["url"], e), result) from e


def _download(
    p: Params,
    dfd: int,
    part: str,
    pfd: int | None,
    have: int,
    *,
    check_space: Callable[..., None],
    result: Result,
) -> tuple[int | None, int]:
    total = _remote_size(p, result)
    if total is not None and have > total:
        if pfd is None:
            raise AssertionError("have > 0 is the size of an open partial file")
        os.ftruncate(pfd, 0)
        have = 0
    check_space(total, have)
    if total is not None and have >= total:
        return pfd, have
    resp = _get(p, have, result)
    if resp is None:
        return pfd, have  # the partial file is already complete
    status = getattr(resp, "status", None) or resp.getcode()
    if have and status != 206:
        have = 0  # the server ignored the range: start over
    else:
        result["resumed_from"] = have
    if total is None:
        length = resp.headers.get("Content-Length")
        if length and length.isdigit():
            check_space(int(length) + have, have)
    if pfd is None:
        pfd = create_exclusive(dfd, part, TEMP_MODE)
    os.ftruncate(pfd, have)
    os.lseek(pfd, have, os.SEEK_SET)
    while True:
        block = resp.read(CHUNK)
        if not block:
            break
        write_all(pfd, block)
    return pfd, os.fstat(pfd).st_size


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "dest": {"type": "path", "required": True},
    "sha256": {"type": "str"},
    "url": {"type": "str"},
    "headers": {"type": "dict", "no_log": True},
    "allow_insecure_transport": {"type": "bool", "default": False},
    "timeout": {"type": "int", "default": 60},
    "validate_certs": {"type": "bool", "default": True},
    "size": {"type": "int"},
    "min_free_mb": {"type": "int", "default": 1024},
    "check_magic": {"type": "bool", "default": True},
    "verify_existing": {"type": "bool", "default": False},
    "state": {"type": "str", "default": "present", "choices": ["present", "probe", "directory"]},
    "base": {"type": "path"},
    "takeover_owner": {"type": "str"},
}
DEFAULTS = {k: v.get("default") for k, v in ARGUMENT_SPEC.items()}
