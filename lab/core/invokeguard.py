"""Invoke's config files read before tasks.py loads: a malformed one is one line and exit 2, not a traceback.

Invoke reads /etc/invoke.yaml and ~/.invoke.yaml (and .yml, .json, .py)
while it starts, before it imports tasks.py, so lab.core.cli cannot reach
them. `.ci/setup` therefore installs a one-line ``gpulab-invoke.pth`` into the
checkout's virtual environment that loads this file by its path (never the
``lab`` package: nothing else is imported) at interpreter start. All it does
there is wait, as an import hook, for ``invoke.config``; once Invoke imports
it, its file loaders are wrapped so that a config file that cannot be read
(not YAML or JSON, a Python file that raises, a folder, no permission, nested
too deep) or that holds something other than a mapping of settings ends the
program with ``gpulab: config file PATH: <why>`` and exit 2 (Invoke prints an
``Exit``'s message and exits with its code). A missing file stays Invoke's
"not there". A process that never imports Invoke only pays for the hook's
presence in ``sys.meta_path``.

Standard library only, and Invoke's own classes once Invoke is imported.
"""

from __future__ import annotations

import errno
import importlib.abc
import importlib.machinery
import sys

BAD_INPUT = 2
_LOADERS = ("_load_yaml", "_load_yml", "_load_json", "_load_py")


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _checked(load, exit_cls):
    def wrapped(self, path):
        try:
            data = load(self, path)
        except FileNotFoundError:
            raise                                   # Invoke's "no such file": that layer is empty
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise
            raise exit_cls(f"gpulab: config file {path}: cannot be read ({exc.strerror or _why(exc)})",
                           code=BAD_INPUT) from None
        except Exception as exc:   # noqa: BLE001 - any parse failure of a user's file (RecursionError too)
            raise exit_cls(f"gpulab: config file {path}: not readable as a config file ({_why(exc)})",
                           code=BAD_INPUT) from None
        if data is not None and not isinstance(data, dict):
            raise exit_cls(f"gpulab: config file {path}: holds a {type(data).__name__}, not a mapping of "
                           f"settings", code=BAD_INPUT)
        return data

    wrapped._gpulab_checked = True
    return wrapped


def wrap(config_cls, exit_cls) -> None:
    """Wrap ``config_cls``'s file loaders (once)."""
    for name in _LOADERS:
        load = getattr(config_cls, name, None)
        if load is not None and not getattr(load, "_gpulab_checked", False):
            setattr(config_cls, name, _checked(load, exit_cls))


class _Hook(importlib.abc.MetaPathFinder):
    """Finds nothing itself; when ``invoke.config`` is imported, wraps its Config once the module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "invoke.config":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                from invoke.exceptions import Exit
                wrap(module.Config, Exit)
            except Exception:   # noqa: BLE001 - an Invoke unlike this one: keep its own handling
                pass

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Put the hook first in ``sys.meta_path`` (once); wrap at once if Invoke is imported already."""
    loaded = sys.modules.get("invoke.config")
    if loaded is not None:
        from invoke.exceptions import Exit
        wrap(loaded.Config, Exit)
    if not any(isinstance(f, _Hook) or type(f).__name__ == "_Hook" for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())


def pth_line(path: str) -> str:
    """The line of ``gpulab-invoke.pth``: load this file by ``path`` and install; never fail interpreter start."""
    code = ("try:\n import importlib.util as u\n s = u.spec_from_file_location('_gpulab_invokeguard', %r)\n"
            " m = u.module_from_spec(s)\n s.loader.exec_module(m)\n m.install()\nexcept Exception:\n pass\n") % path
    return f"import sys; exec({code!r})\n"


if __name__ == "__main__":   # python lab/core/invokeguard.py SITE_PACKAGES: write the .pth there
    import os

    site = sys.argv[1]
    with open(os.path.join(site, "gpulab-invoke.pth"), "w", encoding="utf-8") as f:
        f.write(pth_line(os.path.abspath(__file__)))
