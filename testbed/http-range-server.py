#!/usr/bin/env python3
"""A static file server for the test network that honours single HTTP Range requests, like the
servers models are usually downloaded from (so resumed downloads can be tested).

    http-range-server.py BIND_ADDRESS PORT DIRECTORY
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import BinaryIO

RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class RangeHandler(SimpleHTTPRequestHandler):
    _remaining: int | None = None  # bytes left of the range being sent

    def send_head(self) -> BinaryIO | None:
        path = self.translate_path(self.path)
        header = self.headers.get("Range")
        if not header or not os.path.isfile(path):
            return super().send_head()
        m = RANGE.match(header.strip())
        size = os.path.getsize(path)
        if not m:
            return super().send_head()
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) else size - 1
        if start >= size:
            self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        end = min(end, size - 1)
        f = open(path, "rb")  # noqa: SIM115 - closed by copyfile's caller
        f.seek(start)
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self._remaining = end - start + 1
        return f

    def copyfile(self, source: BinaryIO, outputfile: BinaryIO) -> None:  # type: ignore[override]
        remaining = getattr(self, "_remaining", None)
        if remaining is None:
            shutil.copyfileobj(source, outputfile)
            return
        while remaining > 0:
            block = source.read(min(1 << 20, remaining))
            if not block:
                break
            outputfile.write(block)
            remaining -= len(block)
        self._remaining = None


def main() -> int:
    bind, port, directory = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    server = ThreadingHTTPServer((bind, port), partial(RangeHandler, directory=directory))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
