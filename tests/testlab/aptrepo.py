"""A local apt repository of stand-in NVIDIA packages, built from packages.yml.

Every package is data (packages.yml, validated against packages.schema.yml):
real package names, real version strings, and the files the real packages
install, with contents rendered by Jinja2 from inline text or from files in
pkgfiles/. The repository is a flat one (``deb [trusted=yes] URL ./``), built
with dpkg-deb, indexed with dpkg-scanpackages --multiversion and
apt-ftparchive, and cached under the lab cache keyed on its inputs.
"""

from __future__ import annotations

import gzip
import inspect
import os
import shutil
import tempfile
from pathlib import Path

import jinja2
import yaml

from tests.testlab.util import HERE, LabError, cache_dir, digest, flock, run

SPEC = HERE / "packages.yml"
SCHEMA = HERE / "packages.schema.yml"
PKGFILES = HERE / "pkgfiles"


def load_spec(paths: list[Path] | None = None) -> list[dict]:
    """Expanded package list: one dict per (package, version), all strings rendered."""
    import jsonschema  # here, not at the top: tests/conftest.py imports the lab, and the GPU tests run without it

    schema = yaml.safe_load(SCHEMA.read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    out: list[dict] = []
    for path in paths or [SPEC]:
        data = yaml.safe_load(Path(path).read_text())
        try:
            jsonschema.validate(data, schema)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            raise LabError(f"{path}: {where or 'top level'}: {exc.message}") from None
        defaults = data.get("defaults", {})
        for entry in data["packages"]:
            for ver in entry["versions"]:
                version = str(ver["version"])
                upstream = version.split(":", 1)[-1].rsplit("-", 1)[0]
                vars_ = {**defaults.get("vars", {}), **entry.get("vars", {}), **ver.get("vars", {}),
                         "version": version, "upstream": upstream}

                def render(text, where, _vars=vars_):
                    try:
                        return env.from_string(str(text)).render(**_vars)
                    except jinja2.TemplateError as exc:
                        raise LabError(f"{path}: {entry['name']} {version}: {where}: {exc}") from None

                vars_["name"] = render(entry["name"], "name")
                pkg = {"name": vars_["name"], "version": version}
                for field in ("architecture", "section", "priority", "maintainer", "description"):
                    pkg[field] = render(entry.get(field, defaults.get(field, "")), field)
                for field in ("depends", "provides", "conflicts", "replaces", "breaks"):
                    items = entry.get(field, [])
                    pkg[field] = [render(i, field) for i in items]
                files = []
                for f in entry.get("files", []):
                    dest = render(f["path"], "path")
                    if "symlink" in f:
                        files.append({"path": dest, "symlink": render(f["symlink"], dest)})
                        continue
                    if "source" in f:
                        text = (PKGFILES / f["source"]).read_text()
                    else:
                        text = f.get("content", "")
                    files.append({"path": dest, "content": render(text, dest),
                                  "mode": int(str(f.get("mode", "0644")), 8)})
                pkg["files"] = files
                out.append(pkg)
    seen = set()
    for pkg in out:
        key = (pkg["name"], pkg["version"])
        if key in seen:
            raise LabError(f"package {pkg['name']} {pkg['version']} is defined twice")
        seen.add(key)
    return out


def repo_key(paths: list[Path] | None = None) -> str:
    inputs = [Path(p) for p in (paths or [SPEC])] + [SCHEMA] + sorted(PKGFILES.iterdir())
    return digest(inspect.getsource(build_deb), inspect.getsource(_build_repo), *inputs)


def build_deb(pkg: dict, outdir: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="gpulab-deb-") as tmp:
        root = Path(tmp) / "root"
        (root / "DEBIAN").mkdir(parents=True)
        size = 0
        for f in pkg["files"]:
            dest = root / f["path"].lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if "symlink" in f:
                dest.symlink_to(f["symlink"])
            else:
                dest.write_text(f["content"])
                dest.chmod(f["mode"])
                size += len(f["content"].encode())
        summary, _, body = pkg["description"].strip().partition("\n")
        lines = [
            f"Package: {pkg['name']}",
            f"Version: {pkg['version']}",
            f"Architecture: {pkg['architecture']}",
            f"Maintainer: {pkg['maintainer']}",
            f"Installed-Size: {max(1, size // 1024)}",
        ]
        for field in ("depends", "provides", "conflicts", "replaces", "breaks"):
            if pkg[field]:
                lines.append(f"{field.capitalize()}: {', '.join(pkg[field])}")
        lines += [f"Section: {pkg['section']}", f"Priority: {pkg['priority']}", f"Description: {summary}"]
        lines += [" " + (ln if ln.strip() else ".") for ln in body.strip().splitlines()]
        (root / "DEBIAN" / "control").write_text("\n".join(lines) + "\n")
        deb = outdir / f"{pkg['name']}_{pkg['version'].split(':')[-1]}_{pkg['architecture']}.deb"
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)])
        return deb


def _build_repo(packages: list[dict], repo: Path) -> None:
    for pkg in packages:
        build_deb(pkg, repo)
    packages_txt = run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=repo).stdout
    (repo / "Packages").write_text(packages_txt)
    with gzip.open(repo / "Packages.gz", "wt") as f:
        f.write(packages_txt)
    # written outside the directory, then moved in: else it would index its own partial Release
    release = run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=gpulab-testlab",
                   "-o", "APT::FTPArchive::Release::Label=gpulab test lab stand-ins",
                   "release", "."], cwd=repo).stdout
    (repo / "Release").write_text(release)


def ensure_repo(paths: list[Path] | None = None) -> Path:
    """The built repository directory for these spec files (cached; rebuilt when an input changes)."""
    key = repo_key(paths)
    repo = cache_dir() / f"apt-{key}"
    if (repo / "Release").exists():
        os.utime(repo)  # last use, for image.prune()
        return repo
    with flock(cache_dir() / "locks" / "apt.lock", "building the apt repository"):
        if (repo / "Release").exists():
            return repo
        packages = load_spec(paths)
        tmp = repo.with_name(f".{repo.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            _build_repo(packages, tmp)
            tmp.rename(repo)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return repo
