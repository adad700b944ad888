"""dlinspect under nvdlfw_inspect's import name, for code that imports nvdlfw_inspect itself.

TransformerEngine's modules reach their debug backend as ``import nvdlfw_inspect.api as
debug_api`` (``debug_api.transformer_engine.inspect_tensor(...)``, ``debug_api.DEBUG_MANAGER``),
and so do scripts written for nvdlfw_inspect. After ``dlinspect.as_nvdlfw_inspect()``, called
before anything imports nvdlfw_inspect, those imports give dlinspect: ``nvdlfw_inspect.api`` is
dlinspect's call set, ``nvdlfw_inspect.logging`` is ``dlinspect.logging``. For an unchanged script:

    python -m dlinspect.nvdlfw_alias train.py [args...]
    torchrun --nproc-per-node 8 -m dlinspect.nvdlfw_alias train.py [args...]

What nvdlfw_inspect has and dlinspect does not (its Python feature framework: ``registry``,
``base``, ``utils``, Python features and namespaces) is refused at import with the reason. See
docs/python.md, "TransformerEngine and scripts that import nvdlfw_inspect".
"""
import importlib.abc
import importlib.machinery
import runpy
import sys
import types

import dlinspect
from dlinspect import logging as _logging

NAME = "nvdlfw_inspect"


class _DebugManager:
    """What code outside nvdlfw_inspect reads of its DEBUG_MANAGER: TransformerEngine, that it is
    not None once initialized, and the iteration."""

    @property
    def _trainer_iteration_count(self):
        return dlinspect.iteration()


_MANAGER = _DebugManager()


class _Api(types.ModuleType):
    """nvdlfw_inspect.api: dlinspect's functions, and DEBUG_MANAGER, None until initialize()."""

    @property
    def DEBUG_MANAGER(self):  # noqa: N802 (nvdlfw_inspect's name)
        return _MANAGER if dlinspect.is_initialized() else None


def list_features():
    """nvdlfw_inspect's list_features(): prints the features (rank 0 only does, in nvdlfw_inspect;
    here every rank) and returns None."""
    print(dlinspect.list_features())


def explain_features(features=None):
    """nvdlfw_inspect's explain_features(): prints the explanation and returns None."""
    print(dlinspect.explain_features(features))


class _Refuse(importlib.abc.MetaPathFinder):
    """Any other nvdlfw_inspect module is refused with the reason, not as a missing file."""

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(NAME + ".") and fullname not in sys.modules:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: dlinspect stands in for nvdlfw_inspect "
                f"(dlinspect.as_nvdlfw_inspect()) with its api and logging only; nvdlfw_inspect's "
                f"Python features and namespaces do not run in dlinspect, whose features are "
                f"plugins (docs/python.md)", name=fullname)
        return None


def _module(cls, name, doc, package=False):
    m = cls(name, doc)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=package)
    if package:
        m.__path__ = []
    m.__dlinspect__ = True
    return m


def install():
    """Makes ``import nvdlfw_inspect``, ``nvdlfw_inspect.api`` and ``nvdlfw_inspect.logging`` give
    dlinspect; returns the ``nvdlfw_inspect`` module. Calling it again does nothing. Raises
    RuntimeError when nvdlfw_inspect itself was imported already: code holding its modules would
    keep calling them."""
    have = sys.modules.get(NAME)
    if have is not None:
        if getattr(have, "__dlinspect__", False):
            return have
        raise RuntimeError(
            f"dlinspect.as_nvdlfw_inspect(): nvdlfw_inspect was imported already (from "
            f"{getattr(have, '__file__', None) or 'unknown'}); call it before anything imports "
            f"nvdlfw_inspect (first in the script, or run it with "
            f"`python -m dlinspect.nvdlfw_alias script.py`)")
    pkg = _module(types.ModuleType, NAME, "dlinspect, under nvdlfw_inspect's name", package=True)
    api = _module(_Api, NAME + ".api", "dlinspect's call set, under nvdlfw_inspect.api's name")
    for n in dlinspect.__all__:
        setattr(api, n, getattr(dlinspect, n))
    api.list_features = list_features
    api.explain_features = explain_features
    pkg.api, pkg.logging = api, _logging
    pkg.__version__ = dlinspect.__version__
    sys.meta_path.insert(0, _Refuse())
    sys.modules[NAME + ".logging"] = _logging
    sys.modules[NAME + ".api"] = api
    sys.modules[NAME] = pkg
    return pkg


def main(argv=None):
    """python -m dlinspect.nvdlfw_alias SCRIPT [ARGS] | -m MODULE [ARGS]"""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print("usage: python -m dlinspect.nvdlfw_alias SCRIPT [ARGS...]\n"
              "       python -m dlinspect.nvdlfw_alias -m MODULE [ARGS...]\n"
              "runs SCRIPT (or MODULE) with `import nvdlfw_inspect` giving dlinspect",
              file=sys.stderr)
        return 2
    install()
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
