"""gguf_fetch sends the user's headers (a Hugging Face token) only to the origin of the URL it was
given: a redirect to another origin (a CDN with a signed URL) is followed without them, HEAD, GET
and a resumed GET (Range) alike; https is never downgraded to http; a token is not sent over plain
http unless allowed.

Two http.server instances on 127.0.0.1 (different ports, so different origins) play the model host
and the CDN. The download tests need root (the module chowns to root), like
test_gguf_fetch_security.py; the decision functions are tested without."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import ModelServer, module_utils

ROLE = Path(__file__).resolve().parents[2] / "roles" / "gguf_models"
TOKEN = "Bearer hf_secret_token_value"
HEADERS = {"Authorization": TOKEN, "X-Custom-Secret": "custom"}
MODEL = b"GGUF" + bytes(range(256)) * 1024
MODEL_SHA = hashlib.sha256(MODEL).hexdigest()

pytestmark = pytest.mark.skipif(
    not ROLE.is_dir(), reason="run from a checkout of the whole repository"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the module chowns to root")


@pytest.fixture(scope="module")
def fetch_mod() -> ModuleType:
    """The module gguf_fetch's work (module_utils/gguf_place.py)."""
    return module_utils("gguf_place")


@pytest.fixture
def hub() -> Iterator[ModelServer]:
    srv = ModelServer()
    yield srv
    srv.close()


@pytest.fixture
def cdn() -> Iterator[ModelServer]:
    srv = ModelServer()
    srv.files["/blob/tiny.gguf"] = MODEL
    yield srv
    srv.close()


@pytest.fixture
def mdir(open_tmp: Path) -> Path:
    return open_tmp / "models" / "m"


def fetch(fetch_mod: ModuleType, mdir: Path, url: str, **kw: Any) -> dict[str, Any]:
    base = mdir.parent
    fetch_mod.fetch({"state": "directory", "dest": str(base)})
    fetch_mod.fetch({"state": "directory", "dest": str(mdir), "base": str(base)})
    params = {
        "dest": str(mdir / "tiny.gguf"),
        "url": url,
        "sha256": MODEL_SHA,
        "base": str(base),
        "min_free_mb": 0,
        "headers": dict(HEADERS),
        "allow_insecure_transport": True,  # the test servers speak plain http
        **kw,
    }
    res: dict[str, Any] = fetch_mod.fetch(params)
    return res


# --- the decisions ------------------------------------------------------------------------


def test_origin_is_scheme_host_and_port(fetch_mod: ModuleType) -> None:
    o = fetch_mod.origin
    assert o("https://HF.co/x") == o("https://hf.co:443/y") == ("https", "hf.co", 443)
    assert o("http://hf.co/x") != o("https://hf.co/x")
    assert o("https://hf.co:8443/x") != o("https://hf.co/x")
    assert o("https://cdn.hf.co/x") != o("https://hf.co/x")
    assert o("https://user:pw@hf.co/x") == o("https://hf.co/x")


def test_headers_only_for_the_first_origin(fetch_mod: ModuleType) -> None:
    first = fetch_mod.origin("https://huggingface.co/org/m/resolve/main/m.gguf")
    rng = {"Range": "bytes=10-"}
    same = fetch_mod.hop_headers("https://huggingface.co/other", first, HEADERS, rng)
    assert same == {**HEADERS, **rng}
    for url in (
        "https://cdn-lfs.huggingface.co/blob?X-Amz-Signature=abc",
        "https://huggingface.co:8443/x",
        "http://huggingface.co/x",
        "https://huggingface.co.evil.example/x",
    ):
        assert fetch_mod.hop_headers(url, first, HEADERS, rng) == rng, url


def test_https_to_http_is_refused(fetch_mod: ModuleType) -> None:
    with pytest.raises(fetch_mod.FetchError, match="from https to plain http"):
        fetch_mod.redirect_target("https://hf.co/m.gguf", "http://cdn.example/m.gguf")
    with pytest.raises(fetch_mod.FetchError, match="from https to plain http"):
        fetch_mod.redirect_target("https://hf.co/m.gguf", "HTTP://hf.co/m.gguf")
    # the signature of a signed URL is not echoed
    with pytest.raises(fetch_mod.FetchError) as e:
        fetch_mod.redirect_target("https://hf.co/m", "http://cdn.example/m?X-Amz-Signature=s3cr3t")
    assert "s3cr3t" not in str(e.value)


@pytest.mark.parametrize("location", ["file:///etc/shadow", "ftp://x/m.gguf", "gopher://x/"])
def test_redirect_to_other_schemes_is_refused(fetch_mod: ModuleType, location: str) -> None:
    with pytest.raises(fetch_mod.FetchError, match="only http and https"):
        fetch_mod.redirect_target("https://hf.co/m.gguf", location)


def test_allowed_redirects(fetch_mod: ModuleType) -> None:
    rt = fetch_mod.redirect_target
    assert rt("https://hf.co/a/m", "/b/m") == "https://hf.co/b/m"
    assert rt("https://hf.co/a/m", "https://cdn.example/m?sig=1") == "https://cdn.example/m?sig=1"
    assert rt("http://10.0.0.1:8000/m", "https://hf.co/m") == "https://hf.co/m"
    assert rt("http://10.0.0.1:8000/m", "http://10.0.0.2/m") == "http://10.0.0.2/m"


def test_token_over_plain_http_needs_the_switch(fetch_mod: ModuleType) -> None:
    with pytest.raises(fetch_mod.FetchError, match="gguf_models_allow_insecure_transport"):
        fetch_mod.check_transport("http://10.0.0.1/m.gguf", HEADERS, False)
    fetch_mod.check_transport("http://10.0.0.1/m.gguf", HEADERS, True)
    fetch_mod.check_transport("http://10.0.0.1/m.gguf", {}, False)  # no token: sha256 protects
    fetch_mod.check_transport("https://hf.co/m.gguf", HEADERS, False)


# --- real downloads through two origins -----------------------------------------------------


@needs_root
def test_plain_http_with_headers_is_refused_before_any_request(
    fetch_mod: ModuleType, hub: ModelServer, mdir: Path
) -> None:
    hub.files["/tiny.gguf"] = MODEL
    with pytest.raises(fetch_mod.FetchError, match="plain http"):
        fetch(fetch_mod, mdir, hub.url + "/tiny.gguf", allow_insecure_transport=False)
    assert hub.log == []
    assert not (mdir / "tiny.gguf").exists()


@needs_root
@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_cross_origin_redirect_drops_the_headers(
    fetch_mod: ModuleType, hub: ModelServer, cdn: ModelServer, mdir: Path, code: int
) -> None:
    hub.redirects["/org/m/resolve/main/tiny.gguf"] = (
        code,
        cdn.url + "/blob/tiny.gguf?X-Amz-Signature=signed",
    )
    res = fetch(fetch_mod, mdir, hub.url + "/org/m/resolve/main/tiny.gguf")
    assert res["valid"] and res["sha256"] == MODEL_SHA
    assert (mdir / "tiny.gguf").read_bytes() == MODEL
    assert {m for m, _, _ in hub.log} == {"HEAD", "GET"}
    assert {m for m, _, _ in cdn.log} == {"HEAD", "GET"}
    # the model host got the token on both requests, the CDN on none
    assert sorted(m for m, _ in hub.saw("Authorization")) == ["GET", "HEAD"]
    assert sorted(m for m, _ in hub.saw("X-Custom-Secret")) == ["GET", "HEAD"]
    assert cdn.saw("Authorization") == [] and cdn.saw("X-Custom-Secret") == []
    assert all("signed" in p for _, p, _ in cdn.log)  # the signed URL was followed as given


@needs_root
def test_resumed_download_through_the_cdn_keeps_range_drops_token(
    fetch_mod: ModuleType, hub: ModelServer, cdn: ModelServer, mdir: Path
) -> None:
    hub.redirects["/tiny.gguf"] = (302, cdn.url + "/blob/tiny.gguf")
    mdir.parent.mkdir(mode=0o755)
    mdir.mkdir(mode=0o755)
    part = mdir / "tiny.gguf.part"
    part.write_bytes(MODEL[:1000])
    os.chmod(part, 0o600)
    res = fetch(fetch_mod, mdir, hub.url + "/tiny.gguf")
    assert res["valid"] and res["resumed_from"] == 1000
    assert (mdir / "tiny.gguf").read_bytes() == MODEL
    ranged = [(m, h) for m, _, h in cdn.log if "Range" in h]
    assert ranged and all(h["Range"] == "bytes=1000-" for _, h in ranged)
    assert cdn.saw("Authorization") == []
    assert [m for m, _, h in hub.log if "Range" in h] == ["GET"]
    assert sorted(m for m, _ in hub.saw("Authorization")) == ["GET", "HEAD"]


@needs_root
def test_same_origin_redirect_keeps_the_headers(
    fetch_mod: ModuleType, hub: ModelServer, mdir: Path
) -> None:
    hub.redirects["/old/tiny.gguf"] = (301, "/new/tiny.gguf")
    hub.files["/new/tiny.gguf"] = MODEL
    res = fetch(fetch_mod, mdir, hub.url + "/old/tiny.gguf")
    assert res["valid"]
    assert [p for _, p in hub.saw("Authorization")].count("/new/tiny.gguf") == 2  # HEAD, GET
    assert len(hub.saw("Authorization")) == len(hub.log) == 4


@needs_root
def test_cdn_bouncing_elsewhere_never_gets_the_token(
    fetch_mod: ModuleType, hub: ModelServer, cdn: ModelServer, mdir: Path
) -> None:
    # hub -> cdn -> (another path of the cdn) -> file: no hop after the first gets the token
    hub.redirects["/tiny.gguf"] = (302, cdn.url + "/hop")
    cdn.redirects["/hop"] = (307, "/blob/tiny.gguf")
    assert fetch(fetch_mod, mdir, hub.url + "/tiny.gguf")["valid"]
    assert cdn.saw("Authorization") == [] and len(cdn.log) == 4


@needs_root
def test_redirect_loop_and_bad_scheme_fail_cleanly(
    fetch_mod: ModuleType, hub: ModelServer, mdir: Path
) -> None:
    hub.redirects["/loop"] = (302, "/loop")
    with pytest.raises(fetch_mod.FetchError, match="redirects"):
        fetch(fetch_mod, mdir, hub.url + "/loop")
    hub.redirects["/file"] = (302, "file:///etc/passwd")
    with pytest.raises(fetch_mod.FetchError, match="only http and https"):
        fetch(fetch_mod, mdir, hub.url + "/file")
    assert not (mdir / "tiny.gguf").exists()
