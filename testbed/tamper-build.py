#!/usr/bin/env python3
"""Replays of a compromised builder for the fleet scenario (molecule/fleet/side_effect.yml).

  tamper-build.py implant SRC DEST
      DEST: the shipped build SRC as root on its builder could change it before packing it:
      bin/llama-server modified and bin/rt-implant added, the manifest left as the build wrote it.
  tamper-build.py force-record DIR PLATFORM NAME TARBALL
      Put TARBALL into the shipped-builds directory DIR as build NAME of PLATFORM and write its
      index entry with the sha256 of TARBALL and the builder its manifest names: what the
      controller recorded before it checked a tarball's binaries against its manifest (the sha256
      of whatever the builder sent). It stands for an index written by such a controller, so that
      the receiving host's own check is tested alone; it is not the llama_cpp role's code path.

Prints one JSON line: what it wrote.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import time
from pathlib import Path


def implant(src: Path, dest: Path) -> dict[str, object]:
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dest, "w:gz") as tout:
        top = ""
        for member in tin.getmembers():
            top = top or member.name.split("/")[0]
            data = tin.extractfile(member).read() if member.isreg() else None  # type: ignore[union-attr]
            if member.name.endswith("/bin/llama-server") and data is not None:
                data += b"\n# changed by root on the builder\n"
                member.size = len(data)
            tout.addfile(member, io.BytesIO(data) if data is not None else None)
        extra = tarfile.TarInfo(f"{top}/bin/rt-implant")
        body = b"#!/bin/sh\necho implanted\n"
        extra.size, extra.mode, extra.mtime = len(body), 0o755, int(time.time())
        tout.addfile(extra, io.BytesIO(body))
    return {"tarball": str(dest), "build": top}


def force_record(directory: Path, platform: str, name: str, tarball: Path) -> dict[str, object]:
    with tarfile.open(tarball, "r:gz") as tf:
        manifest_file = tf.extractfile(f"{name}/manifest.json")
        assert manifest_file is not None
        builder = json.load(manifest_file).get("host", "")
    final = directory / platform / f"{name}.tar.gz"
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tarball, final)
    digest = hashlib.sha256(final.read_bytes()).hexdigest()
    index_path = directory / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"builds": {}}
    per_platform = index.setdefault("builds", {}).setdefault(platform, {})
    old = per_platform.get(name, {})
    per_platform[name] = {
        "sha256": digest,
        "size": final.stat().st_size,
        "file": f"{platform}/{name}.tar.gz",
        "platform": platform,
        "builder": builder,
        "commit": old.get("commit", ""),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    index["format"] = 1
    index_path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return {"tarball": str(final), "sha256": digest, "builder": builder}


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "implant":
        out = implant(Path(argv[1]), Path(argv[2]))
    elif len(argv) == 5 and argv[0] == "force-record":
        out = force_record(Path(argv[1]), argv[2], argv[3], Path(argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
