#!/usr/bin/python
# Apache-2.0
"""Ansible module: place one (GGUF) file under its final name only after its sha256 was verified,
root-owned, through directory descriptors (see plugins/module_utils/safefs.py)."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: gguf_fetch
short_description: Download (resumably) or finalize a model file, verified by sha256, root-owned
description:
  - With O(url), downloads into C(<dest>.part), resuming a partial download with an HTTP Range
    request, checks the free disk space first, verifies the sha256 and the GGUF magic, and only then
    renames the file to O(dest).
  - Without O(url), verifies and renames a C(<dest>.part) that an earlier task copied there.
  - A verified file gets a C(<dest>.sha256) file in C(sha256sum) format. A file whose sha256 file
    names the expected checksum is not read again (set O(verify_existing) to re-hash it).
  - A checksum mismatch fails, deletes the partial file and leaves nothing under O(dest).
  - With O(state=probe) the module reports whether O(dest) is in place and, if not, checks that
    O(size) bytes fit. It changes nothing, except that it removes whatever is not a plain
    root-owned file at the temporary names C(<dest>.part) and C(<dest>.sha256.tmp) (a link, a
    FIFO, a hard link), so that a following copy to C(<dest>.part) cannot be misled.
  - With O(state=directory) O(dest) is a directory, created or taken over (below).
  - "Ownership: files and directories are root:root, files C(0644) (C(0600) while temporary),
    directories C(0755); the service only reads them. Root never opens, writes, chowns or chmods
    anything by a path another account could change: the directory chain is opened from C(/) one
    descriptor at a time without following links; a link is followed only when root owns it, a
    link another account owns is refused. Every directory above O(base) must be owned by root and
    not writable by group or others (sticky directories such as C(/tmp) excepted)."
  - "Migration: O(base) and the directories below it that are owned by O(takeover_owner) (the
    service account, which owned them in earlier versions of the role) are taken over through
    their descriptor (fchown root:root, fchmod 0755) before any entry in them is looked at. A file
    of O(takeover_owner) at O(dest) is re-hashed, then given to root; a partial download of it is
    given to root and resumed. A link, FIFO or hard-linked file at O(dest) is refused."
  - Must run as root.
options:
  dest:
    description: Final path of the file; with O(state=directory) the directory.
    type: path
    required: true
  sha256:
    description: Expected sha256 (64 hex digits). Required unless O(state=directory).
    type: str
  url:
    description: Where to download from (http, https, file).
    type: str
  headers:
    description:
      - Extra HTTP headers (e.g. Authorization). Not logged.
      - "They are sent only to the origin of O(url) (its scheme, host and port). Redirects are
        followed one hop at a time: a hop to another origin (Hugging Face sends the download to a
        CDN with a signed URL) gets none of them; the C(Range) header of a resumed download is
        kept. A redirect from C(https) to C(http), or to a scheme other than C(http)/C(https), is
        refused."
      - With an C(http://) O(url) they are refused unless O(allow_insecure_transport) is set.
    type: dict
  allow_insecure_transport:
    description: Allow O(headers) (a token) to be sent over plain C(http) (a test network).
    type: bool
    default: false
  timeout:
    description: Socket timeout in seconds.
    type: int
    default: 60
  validate_certs:
    description: Verify TLS certificates.
    type: bool
    default: true
  size:
    description: Expected size in bytes, for the free space check when the server does not say.
    type: int
  min_free_mb:
    description: MiB that must stay free after the file is in place.
    type: int
    default: 1024
  check_magic:
    description: Require the C(GGUF) magic at the start of the file.
    type: bool
    default: true
  verify_existing:
    description: Re-hash a file that is already in place.
    type: bool
    default: false
  state:
    description: V(present) places the file, V(probe) only reports, V(directory) creates (or takes
      over) the directory O(dest).
    type: str
    default: present
    choices: [present, probe, directory]
  base:
    description: The models directory. It and the directories below it are created when missing
      and taken over from O(takeover_owner); the directories above it must already be root's.
      Default the directory of O(dest) (O(dest) itself with O(state=directory)).
    type: path
  takeover_owner:
    description: Account (name or uid) whose directories and files below O(base) are taken over by
      root. Empty, root or an unknown account; nothing is taken over and any other owner is refused.
    type: str
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check_diff
"""

EXAMPLES = r"""
- name: Create the models directory (take it over from llama if an older version gave it away)
  llamafleet.fleet.gguf_fetch:
    state: directory
    dest: /srv/models
    takeover_owner: llama

- name: Download a model
  llamafleet.fleet.gguf_fetch:
    url: https://example.org/tiny.gguf
    dest: /srv/models/tiny/tiny.gguf
    sha256: 07a5e2f0c1d3b4a59687e8f90a1b2c3d4e5f60718293a4b5c6d7e8f901a2b3c4
    base: /srv/models
    takeover_owner: llama
"""

RETURN = r"""
dest:
  description: O(dest) as given (normalised).
  returned: always
  type: str
path:
  description: The directory's resolved path (root-owned links followed).
  returned: with O(state=directory)
  type: str
valid:
  description: O(dest) holds the expected content (for O(state=probe) before any change this run).
  returned: unless O(state=directory)
  type: bool
size:
  description: Size of O(dest) in bytes.
  returned: when O(dest) is valid
  type: int
sha256:
  description: The verified checksum of a file placed this run.
  returned: when a file was placed
  type: str
resumed_from:
  description: Bytes of a partial download that were kept.
  returned: unless O(state=directory)
  type: int
actions:
  description: What was (in check mode, would be) done, one line each (a directory created or
    taken over, a planted link removed, a file given to root).
  returned: always
  type: list
  elements: str
head_error:
  description: Why the HEAD request failed (the size then comes from the GET answer).
  returned: when a HEAD request failed
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.gguf_place import (
    ARGUMENT_SPEC,
    FetchError,
    fetch,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import UnsafePathError


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "present", ("sha256",)), ("state", "probe", ("sha256",))],
        supports_check_mode=True,
    )
    p = module.params
    if p["url"] and "@" in p["url"]:
        # never echo credentials embedded in a URL
        module.no_log_values.add(p["url"].split("@", 1)[0])
    if os.geteuid() != 0:
        module.fail_json(msg="gguf_fetch must run as root (become: true): the files are root's")
    try:
        result = fetch(p, module.check_mode)
    except FetchError as e:
        module.fail_json(msg=str(e), **e.result)
    except UnsafePathError as e:
        module.fail_json(msg=f"Refused: {e}", dest=p["dest"])
    except OSError as e:
        module.fail_json(msg=f"{p['dest']}: {e}", dest=p["dest"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
