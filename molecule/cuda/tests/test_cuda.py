"""Verify the cuda scenario: the toolkit from the local CUDA repository (NVIDIA's layout; the real
repository is unreachable from CI), the pin, the environment files, and the hosts left alone."""

import pytest

ENV = "/etc/cuda-toolkit.env"
PROFILE = "/etc/profile.d/cuda-toolkit.sh"
PIN = "/etc/apt/preferences.d/cuda-toolkit-pin"
KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"


def name(host):
    return host.backend.get_hostname()


SOURCE = "/etc/apt/sources.list.d/cuda-toolkit.sources"


def distro(host):
    """NVIDIA's name of the host's distribution."""
    return "debian13" if host.system_info.codename == "trixie" else "debian12"


def deb822(text):
    """The fields of a one-stanza deb822 file."""
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def installed(host):
    return name(host) in ("lf-cuda-gpu", "lf-cuda-build")


def test_pid1_is_systemd(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"


def test_keyring_and_source(host):
    if not installed(host):
        pytest.skip("no toolkit on this host")
    assert host.package("cuda-keyring").is_installed
    assert host.file(KEYRING).is_file
    fields = deb822(host.file(SOURCE).content_string)
    assert fields["Types"] == "deb"
    assert fields["Signed-By"] == KEYRING
    assert fields["URIs"].startswith("http://")
    assert fields["URIs"].endswith(f"/compute/cuda/repos/{distro(host)}/x86_64/")
    assert fields["Suites"] == "/"
    assert "Components" not in fields
    # the one-line source that cuda-keyring installs is gone: one source for the repository
    assert not host.file(f"/etc/apt/sources.list.d/cuda-{distro(host)}-x86_64.list").exists
    # signed-by, never apt-key
    assert not host.file("/etc/apt/trusted.gpg").exists
    assert not host.file("/etc/apt/trusted.gpg.d/cuda.gpg").exists
    # the signature is checked: apt knows the repository as trusted
    policy = host.check_output("apt-cache policy")
    assert f"/compute/cuda/repos/{distro(host)}/x86_64" in policy


def test_toolkit_12_8_and_nvcc(host):
    if not installed(host):
        pytest.skip("no toolkit on this host")
    assert host.package("cuda-toolkit-12-8").is_installed
    out = host.check_output("/usr/local/cuda-12.8/bin/nvcc --version")
    assert "Cuda compilation tools, release 12.8, V12.8.93" in out


def test_pin_keeps_12_9_out(host):
    if not installed(host):
        pytest.skip("no toolkit on this host")
    assert host.file(PIN).contains("Pin: version 12.8.*")
    # 12.9 is available in the repository ...
    assert "12.9.1-1" in host.check_output("apt-cache madison cuda-toolkit-12-9")
    assert "12.9.1-1" in host.check_output("apt-cache madison cuda-toolkit")
    # ... but not taken
    assert not host.package("cuda-toolkit-12-9").is_installed
    assert not host.package("cuda-nvcc-12-9").is_installed
    assert not host.file("/usr/local/cuda-12.9").exists
    policy = host.check_output("apt-cache policy cuda-toolkit")
    assert "Candidate: 12.8.1-1" in policy
    refused = host.run("apt-get install -s cuda-toolkit-12-9")
    assert refused.rc != 0
    upgrade = host.check_output("apt-get -s upgrade")
    assert "cuda" not in upgrade.replace("cuda-toolkit-12-8", "")


def test_unversioned_metapackage_took_12_8(host):
    # side_effect.yml ran `apt-get install cuda-toolkit` and `apt-get upgrade` on this host
    if name(host) != "lf-cuda-gpu":
        pytest.skip("only lf-cuda-gpu installs the unversioned metapackage")
    pkg = host.package("cuda-toolkit")
    assert pkg.is_installed and pkg.version == "12.8.1-1"


def test_environment_files(host):
    if not installed(host):
        pytest.skip("no toolkit on this host")
    env = host.file(ENV).content_string
    for line in (
        "CUDA_HOME=/usr/local/cuda-12.8",
        "CUDAToolkit_ROOT=/usr/local/cuda-12.8",
        "CUDACXX=/usr/local/cuda-12.8/bin/nvcc",
        "CUDA_VERSION=12.8",
    ):
        assert line in env.splitlines()
    # a login shell gets the 12.8 nvcc first on PATH
    assert host.check_output("bash -lc 'command -v nvcc'") == "/usr/local/cuda-12.8/bin/nvcc"
    assert host.check_output("bash -lc 'echo $CUDA_HOME'") == "/usr/local/cuda-12.8"


def test_no_gpu_host_untouched(host):
    if name(host) != "lf-cuda-nogpu":
        pytest.skip("only the no-GPU host")
    assert not host.exists("nvidia-smi")
    for path in (
        ENV,
        PROFILE,
        PIN,
        KEYRING,
        "/usr/local/cuda-12.8",
        "/etc/apt/sources.list.d/cuda-debian12-x86_64.list",
        SOURCE,
    ):
        assert not host.file(path).exists, path
    assert not host.package("cuda-keyring").is_installed


def test_broken_mirror_host(host):
    if name(host) != "lf-cuda-broken":
        pytest.skip("only the broken-mirror host")
    # the mirror's package was installed; its nvcc reports 12.9 and the role refused it
    out = host.check_output("/usr/local/cuda-12.8/bin/nvcc --version")
    assert "release 12.9" in out
    assert not host.file(ENV).exists
    assert not host.file(PROFILE).exists
    fields = deb822(host.file(SOURCE).content_string)
    assert fields["URIs"].endswith("/mirror-broken/compute/cuda/repos/debian12/x86_64/")
