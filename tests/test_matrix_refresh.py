"""`aipc-env matrix refresh` (issue 32) against a stand-in PyTorch XPU index and PyPI built here and served over
HTTP: PEP 503 pages with PEP 658 metadata attributes, real wheels, their .metadata files. It proposes rows and
manifest entries as candidate files and a diff, and never edits environments/."""

from __future__ import annotations

import hashlib
import html
import http.server
import json
import ssl
import threading
from pathlib import Path

import pytest
import yaml

from aipc_env.core.formats import load_versioned
from aipc_env.errors import ExitCode
from aipc_env.lock.wheels import WheelManifest
from aipc_env.matrix import load_matrix
from tests.conftest import ROOT, run_cli
from tests.support.wheels import make_wheel, sha256_of

LINUX = "'Linux' and platform_machine == 'x86_64'"
TORCH_216 = [
    "filelock",
    "intel-cmplr-lib-rt==2026.2.0",
    "intel-sycl-rt==2026.2.0",
    "umf==1.2.0",
    f"oneccl==2022.2.0; platform_system == {LINUX}",
    "triton-xpu==3.10.0",
]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _publish(root: Path, project: str, wheels: list[Path]) -> None:
    """root/<project>/index.html linking each wheel with its sha256 and its metadata file's (PEP 658/714)."""
    files = root.parent.parent / "files"
    files.mkdir(parents=True, exist_ok=True)
    links = []
    for wheel in wheels:
        import zipfile

        with zipfile.ZipFile(wheel) as zf:
            meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")))
        (files / wheel.name).write_bytes(wheel.read_bytes())
        (files / f"{wheel.name}.metadata").write_bytes(meta)
        links.append(
            f'<a href="../../../files/{html.escape(wheel.name)}#sha256={sha256_of(wheel)}" '
            f'data-core-metadata="sha256={hashlib.sha256(meta).hexdigest()}">{html.escape(wheel.name)}</a>'
        )
    (root / project).mkdir(parents=True, exist_ok=True)
    (root / project / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")


@pytest.fixture
def indexes(tmp_path):
    srv = tmp_path / "srv"
    build = tmp_path / "build"
    xpu = srv / "whl" / "xpu"
    tags = ("cp312-cp312-win_amd64", "cp312-cp312-manylinux_2_28_x86_64")
    _publish(
        xpu,
        "torch",
        [
            *(make_wheel(build, "torch", "2.16.0+xpu", requires=TORCH_216, tag=t) for t in tags),
            make_wheel(build, "torch", "2.12.2+xpu", requires=["intel-sycl-rt==2025.3.2", "triton-xpu==3.7.1"], tag=tags[1]),
            # a known release whose Windows wheel the manifest lacks: a new entry, no new metadata record
            make_wheel(build, "torch", "2.13.0+xpu", requires=["filelock"], tag="cp313-cp313-win_amd64"),
        ],
    )
    _publish(xpu, "triton-xpu", [make_wheel(build, "triton-xpu", "3.10.0", requires=["pyelftools"], tag=t) for t in tags])
    _publish(
        xpu,
        "torchvision",
        [make_wheel(build, "torchvision", "0.31.0+xpu", requires=["numpy", "torch==2.16.0"], tag=t) for t in tags],
    )
    pypi = srv / "pypi" / "simple" / "torch"
    pypi.mkdir(parents=True)
    pypi.joinpath("index.html").write_text(
        '<a href="../../files/torch-2.17.0-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=' + "ab" * 32 + '">'
        "torch-2.17.0-cp312-cp312-manylinux_2_28_x86_64.whl</a>\n"
    )
    cert = _self_signed(tmp_path)
    handler = lambda *a, **k: _Quiet(*a, directory=str(srv), **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"https://127.0.0.1:{server.server_address[1]}"
    yield f"{base}/whl/xpu", f"{base}/pypi/simple", {"SSL_CERT_FILE": str(cert)}
    server.shutdown()


def _self_signed(folder: Path) -> Path:
    """A certificate for 127.0.0.1 the aipc-env under test trusts through SSL_CERT_FILE (the index is HTTPS, as
    the manifest requires of every URL it records)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path = folder / "cert.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _environments() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (ROOT / "environments").glob("*.yaml")}


def test_refresh_proposes_rows_and_manifest_entries_as_candidates(indexes, tmp_path):
    xpu, pypi, tls = indexes
    before = _environments()
    out = tmp_path / "candidates"
    result = run_cli("matrix", "refresh", "--xpu-index-url", xpu, "--pypi-url", pypi, "--out", str(out), env=tls)
    assert result.returncode == ExitCode.PROBLEMS, result.stderr  # something to review
    assert _environments() == before  # never edits environments/
    matrix = load_matrix(out / "matrix.candidate.yaml")
    new = matrix.get("xpu-2.16")
    assert (new.torch, new.oneapi, new.triton.name, new.triton.version, new.torchvision, new.python) == (
        ["2.16.0"],
        "2026.2",
        "triton-xpu",
        "3.10.0",
        {"2.16.0": "0.31.0"},
        ">=3.12,<3.13",
    )
    assert [(p.name, p.version, p.marker) for p in new.runtime_pins] == [
        ("intel-cmplr-lib-rt", "2026.2.0", None),
        ("intel-sycl-rt", "2026.2.0", None),
        ("umf", "1.2.0", None),
        ("oneccl", "2022.2.0", 'platform_system == "Linux" and platform_machine == "x86_64"'),
    ]
    assert (new.certainty, new.bitsandbytes_native, new.sycl_major, new.windows) == ("provisional", True, 9, "full")
    assert "read from the PyTorch XPU index" in new.source
    assert matrix.get("xpu-2.12").torch == ["2.12.0", "2.12.1", "2.12.2"]
    manifest = load_versioned(WheelManifest, out / "xpu-wheels.candidate.yaml")
    added = {w.file for w in manifest.wheels} - {
        w.file for w in load_versioned(WheelManifest, ROOT / "environments" / "xpu-wheels.yaml").wheels
    }
    assert added == {
        "torch-2.16.0+xpu-cp312-cp312-win_amd64.whl",
        "torch-2.16.0+xpu-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.12.2+xpu-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.13.0+xpu-cp313-cp313-win_amd64.whl",
        "triton_xpu-3.10.0-cp312-cp312-win_amd64.whl",
        "triton_xpu-3.10.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torchvision-0.31.0+xpu-cp312-cp312-win_amd64.whl",
        "torchvision-0.31.0+xpu-cp312-cp312-manylinux_2_28_x86_64.whl",
    }
    record = manifest.metadata_for("torch", "2.16.0+xpu", "win-64")
    assert record.requires_dist == TORCH_216 and record.certainty == "published"
    assert manifest.metadata_for("triton-xpu", "3.10.0", "linux-64").requires_dist == ["pyelftools"]
    assert [m.version for m in manifest.metadata if m.package == "torch" and m.version == "2.13.0+xpu"] == [
        "2.13.0+xpu"
    ]  # the known release keeps its one record
    # the diff on stdout is what the candidates change
    assert "+  - id: xpu-2.16" in result.stdout and '+    torch: ["2.12.0", "2.12.1", "2.12.2"]' in result.stdout
    assert "note: torch 2.17.0 is on PyPI but has no XPU build on the index yet" in result.stdout


def test_refresh_json_and_an_up_to_date_answer(indexes, tmp_path):
    xpu, pypi, tls = indexes
    result = run_cli(
        "matrix", "refresh", "--json", "--xpu-index-url", xpu, "--pypi-url", pypi, "--out", str(tmp_path / "c"), env=tls
    )
    report = json.loads(result.stdout)
    assert (report["new_rows"], report["updated_rows"], report["new_wheels"], report["new_metadata"]) == (
        ["xpu-2.16"],
        ["xpu-2.12"],
        8,
        4,
    )  # metadata: torch 2.16.0 (one record, both platforms), 2.12.2, Triton,
    # torchvision; torch 2.13.0 already has its record
    # against its own candidates there is nothing left to propose
    again = run_cli(
        "matrix",
        "refresh",
        "--json",
        "--xpu-index-url",
        xpu,
        "--pypi-url",
        pypi,
        "--matrix",
        str(tmp_path / "c" / "matrix.candidate.yaml"),
        "--out",
        str(tmp_path / "d"),
        env={**tls, "AIPC_ENV_WHEEL_MANIFEST": str(tmp_path / "c" / "xpu-wheels.candidate.yaml")},
    )
    assert again.returncode == ExitCode.OK, again.stdout + again.stderr
    assert json.loads(again.stdout)["written"] == [] and not (tmp_path / "d").exists()


def test_an_unreachable_index_is_named_and_nothing_is_written(tmp_path):
    result = run_cli(
        "matrix",
        "refresh",
        "--xpu-index-url",
        "https://127.0.0.1:9/whl/xpu",
        "--pypi-url",
        "https://127.0.0.1:9/simple",
        "--out",
        str(tmp_path / "c"),
    )
    assert result.returncode == ExitCode.PROBLEMS
    assert result.stdout.count("unreadable: https://127.0.0.1:9/") == 5  # four XPU projects and PyPI's torch
    assert not (tmp_path / "c").exists()


def test_the_candidate_matrix_keeps_the_comments_and_anchors():
    from aipc_env.lock.refresh import RefreshPlan, matrix_text

    original = (ROOT / "environments" / "matrix.yaml").read_text(encoding="utf-8")
    assert matrix_text(original, RefreshPlan()) == original
    yaml.safe_load(original)
