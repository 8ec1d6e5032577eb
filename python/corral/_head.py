"""The head's calls for the task runtime: corral._core, the C extension
over libcorral (python/core/core.c).

It is found beside this package (an installed wheel that carries it, or a
build that copied it), at $CORRAL_PYTHON_CORE (a directory holding
_core.abi3.so: what a leased worker is told), or in $CORRAL_BUILD_DIR's
python/corral. Without it the helpers of corral.train still work; only the
task runtime needs it.
"""

import importlib.machinery
import importlib.util
import os
import sys

_SO = "_core.abi3.so"
_mod = None


def core_dir():
    """The directory the extension is loaded from, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [here, os.environ.get("CORRAL_PYTHON_CORE", "")]
    bd = os.environ.get("CORRAL_BUILD_DIR")
    if bd:
        cands.append(os.path.join(bd, "python", "corral"))
    # a source tree's build/ (the tests and make demo run from it)
    cands.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build", "python", "corral"))
    for d in cands:
        if d and os.path.isfile(os.path.join(d, _SO)):
            return os.path.abspath(d)
    return None


def module():
    global _mod
    if _mod is not None:
        return _mod
    d = core_dir()
    if d is None:
        raise ImportError(
            "corral's task runtime needs its C extension (%s), which is not beside the corral package, "
            "at $CORRAL_PYTHON_CORE or under $CORRAL_BUILD_DIR/python/corral: build corral (make) with "
            "python3-dev installed, or pip install the package from a built tree" % _SO)
    path = os.path.join(d, _SO)
    loader = importlib.machinery.ExtensionFileLoader("corral._core", path)
    spec = importlib.util.spec_from_file_location("corral._core", path, loader=loader)
    m = importlib.util.module_from_spec(spec)
    loader.exec_module(m)
    sys.modules["corral._core"] = m
    _mod = m
    return m


def connect(address=None):
    """A Head: address "host:port" or a Unix path; None: CORRAL_ADDRESS or the local head."""
    return module().connect(address or os.environ.get("CORRAL_ADDRESS") or None)


def error_type():
    return module().Error
