#!/usr/bin/env python3
"""Compile the pitfall catalogue: ``rules.yaml`` -> ``src/llamafleet/catalogue/compiled.json``.

Validates ``rules.yaml`` against ``schema.json`` and writes its data as JSON, with the size and
CRC-32 of the YAML it was compiled from, so ``llamafleet check`` loads the catalogue without a
YAML parser or a schema validator (tests/test_catalogue.py keeps the two equal). Run it after every
change to ``rules.yaml`` (the rules and their documentation fields alike):

    python tools/gen_catalogue.py            # write the compiled catalogue
    python tools/gen_catalogue.py --check    # exit 1 when it is not current
"""

from __future__ import annotations

import json
import os
import sys
import zlib

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CATALOGUE = os.path.join(HERE, "..", "src", "llamafleet", "catalogue")
OUT = os.path.join(CATALOGUE, "compiled.json")


def render() -> str:
    with open(os.path.join(CATALOGUE, "rules.yaml"), "rb") as fh:
        raw = fh.read()
    data = yaml.safe_load(raw.decode("utf-8"))
    with open(os.path.join(CATALOGUE, "schema.json"), encoding="utf-8") as fh:
        jsonschema.validate(data, json.load(fh))
    doc = {
        "comment": "compiled from rules.yaml by tools/gen_catalogue.py: do not edit",
        "source_size": len(raw),
        "source_crc32": zlib.crc32(raw),
        "catalogue": data,
    }
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        try:
            with open(OUT, encoding="utf-8") as fh:
                current = fh.read()
        except FileNotFoundError:
            current = ""
        if current != text:
            sys.stderr.write(f"{OUT} is not current: run tools/gen_catalogue.py\n")
            return 1
        return 0
    with open(OUT, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {os.path.normpath(OUT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
