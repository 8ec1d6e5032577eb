#!/usr/bin/env python3
"""make install's Python step: installs the package in python/ for the
interpreter that runs this script, under the install prefix (and DESTDIR).

    install-python.py --prefix PREFIX [--site DIR] SRC

Where: --site DIR when given; else the interpreter's own site directory
under PREFIX when it has one on sys.path (Debian's python3 and /usr/local:
/usr/local/lib/python3.N/dist-packages); else PREFIX/lib/python3.N/
site-packages, which then needs PYTHONPATH (said at the end). DESTDIR, from
the environment, is put in front, as make install does for every file.

pip installs it (--target, --no-index: the build backend is in the tree and
needs nothing); without pip the package files are copied."""
import argparse
import os
import shutil
import subprocess
import sys
import sysconfig


def site_dir(prefix):
    prefix = os.path.normpath(prefix)
    for p in sys.path:
        p = os.path.normpath(p) if p else ""
        if p.startswith(prefix + os.sep) and os.path.basename(p) in ("site-packages",
                                                                       "dist-packages"):
            return p, True
    scheme = "posix_prefix" if os.name == "posix" else None
    return sysconfig.get_path("purelib", scheme, {"base": prefix, "platbase": prefix}), False


def main():
    ap = argparse.ArgumentParser(prog="install-python")
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--site", default="")
    ap.add_argument("src")
    a = ap.parse_args()
    if a.site:
        site, on_path = a.site, os.path.normpath(a.site) in map(os.path.normpath, sys.path)
    else:
        site, on_path = site_dir(a.prefix)
    destdir = os.environ.get("DESTDIR", "")
    target = destdir + site if destdir else site
    os.makedirs(target, exist_ok=True)
    have_pip = subprocess.run([sys.executable, "-m", "pip", "--version"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    if have_pip:
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_ROOT_USER_ACTION="ignore")
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
               "--upgrade", "--target", target, os.path.abspath(a.src)]
        rc = subprocess.run(cmd, env=env).returncode
        if rc != 0:
            print("install-python: pip install --target %s %s failed" % (target, a.src),
                  file=sys.stderr)
            return 1
    else:
        dst = os.path.join(target, "corral")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(os.path.join(a.src, "corral"), dst,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    print("-- Installing: the Python package corral (for %s) in %s%s" %
          (sys.executable, target, "" if have_pip else " (copied: no pip)"))
    if not on_path:
        print("-- %s is not on %s's path: set PYTHONPATH=%s to import corral" %
              (site, sys.executable, site))
    return 0


if __name__ == "__main__":
    sys.exit(main())
