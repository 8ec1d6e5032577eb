"""A PEP 517 build backend for corral's Python helpers, standard library only.

It needs nothing installed beyond Python, so ``pip install ./python`` works
without network access (setuptools' backend would have pip download
setuptools into an isolated build environment first). It builds a pure
Python wheel of the ``corral`` package and an sdist of this directory;
``pip install -e ./python`` (PEP 660) installs a .pth file pointing here.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "corral"
VERSION = "0.1.0"
SUMMARY = "Helpers for training scripts run by corral train (rank, devices, process group, checkpoints)"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"
DIST_INFO = "%s-%s.dist-info" % (NAME, VERSION)


def _metadata():
    return (
        "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
        "License: Apache-2.0\nRequires-Python: >=3.8\n" % (NAME, VERSION, SUMMARY)
    )


def _wheel_file():
    return "Wheel-Version: 1.0\nGenerator: corral_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG


def _package_files():
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, NAME)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(d, f)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d\n" % (arcname, digest, len(data))


def _write_wheel(wheel_directory, entries):
    """entries: (arcname, bytes); adds the dist-info and RECORD."""
    name = "%s-%s-%s.whl" % (NAME, VERSION, TAG)
    entries = list(entries) + [
        (DIST_INFO + "/METADATA", _metadata().encode()),
        (DIST_INFO + "/WHEEL", _wheel_file().encode()),
    ]
    record = "".join(_record_line(a, d) for a, d in entries) + DIST_INFO + "/RECORD,,\n"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in entries:
            z.writestr(arcname, data)
        z.writestr(DIST_INFO + "/RECORD", record)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, DIST_INFO)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "w") as f:
        f.write(_wheel_file())
    return DIST_INFO


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for arcname, full in _package_files():
        with open(full, "rb") as f:
            entries.append((arcname, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("__editable__.%s.pth" % NAME, (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, VERSION)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ("pyproject.toml", "README.md", "_build/corral_build.py"):
            if os.path.exists(os.path.join(ROOT, rel)):
                t.add(os.path.join(ROOT, rel), base + "/" + rel)
        for arcname, full in _package_files():
            t.add(full, base + "/" + arcname)
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return name
