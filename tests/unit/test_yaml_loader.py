"""lab.core.schema.read_yaml under both of PyYAML's safe loaders: libyaml's (the one it uses where libyaml bounds
nesting) and the pure-Python one (the fallback). Every hostile file is one ConfigError line naming the file, and
the place in it where the loader gives one, the same place under both; gpulab's own YAML files read the same."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab.core import schema
from lab.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
C_LOADER = getattr(yaml, "CSafeLoader", None)
LOADERS = [
    pytest.param(yaml.SafeLoader, id="pure"),
    pytest.param(C_LOADER, id="libyaml", marks=pytest.mark.skipif(C_LOADER is None, reason="PyYAML without libyaml")),
]


@pytest.fixture(params=LOADERS)
def loader(request, monkeypatch):
    monkeypatch.setattr(schema, "LOADER", schema.bounded_loader(request.param))
    return request.param


# text -> the place both loaders name ("" where the error has none)
PLACED = {
    "a: [unclosed\n": "line 2, column 1",
    "gpulab:\n\tworkloads: ncf\n": "line 2, column 1",  # a tab
    "a: b: c\n": "line 1, column 5",
    "a: *nothing\n": "line 1, column 4",  # an undefined alias
    "a: &x 1\nb: &x 2\n": "line 2, column 4",  # an anchor twice
    "a: 1\n---\nb: 2\n": "line 2, column 1",  # two documents
    "a: !!python/object/apply:os.system ['true']\n": "line 1, column 4",
    "a: !!python/name:os.system\n": "line 1, column 4",
    "a: !unknown 1\n": "line 1, column 4",
    "c: {<<: 1}\n": "line 1, column 9",  # a merge of a scalar
    "? [a, b]\n: 1\n": "line 1, column 3",  # an unhashable key
    "a: 1\nb: !!int abc\n": "line 2, column 4",  # the constructors' ValueError, KeyError, AttributeError
    "a:\n  b: !!timestamp foo\n": "line 2, column 6",
    "a: !!bool maybe\n": "line 1, column 4",
    "a: 2001-13-45\n": "line 1, column 4",
    "a: " + "1" * 5000 + "\n": "line 1, column 4",  # past Python's 4,300 digits
    "a: \x00\n": "line 1, column 4",  # a control character: a ReaderError, placed from its offset
    "éé: 1\nb: éé\x01\n": "line 2, column 6",  # libyaml's offset counts UTF-8 bytes
}
DEEP = [
    "a: " + "[" * 50_000 + "]" * 50_000 + "\n",
    "a: " + "{b: " * 5_000 + "1" + "}" * 5_000 + "\n",
    "".join(" " * i + f"k{i}:\n" for i in range(3_000)) + " " * 3_000 + "v\n",
    "".join(" " * i + "-\n" for i in range(3_000)) + " " * 3_000 + "v\n",
]


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as exc:
        schema.read_yaml(path)
    msg = exc.value.message
    assert "\n" not in msg and len(msg) < 400 and msg.startswith(f"{path}: "), msg
    return msg


@pytest.mark.parametrize("text", list(PLACED), ids=range(len(PLACED)))
def test_a_malformed_file_is_one_line_with_its_place(tmp_path, loader, text):
    f = tmp_path / "bad.yml"
    f.write_text(text, encoding="utf-8")
    assert _refused(f).startswith(f"{f}: {PLACED[text]}: malformed YAML (")


@pytest.mark.parametrize("text", DEEP, ids=["flow", "flow-map", "block-map", "block-seq"])
def test_nesting_past_either_loaders_bound_is_one_line(tmp_path, loader, text):
    f = tmp_path / "deep.yml"
    f.write_text(text)
    _refused(f)


def test_an_alias_bomb_is_read_shared_and_refused_by_the_schema_check(tmp_path, loader):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    f = tmp_path / "laughs.yml"
    f.write_text("\n".join(lines) + "\n")
    data = schema.read_yaml(f)  # 10**9 values as printed, a few hundred objects in memory
    assert data["a8"][0] is data["a7"]
    with pytest.raises(ConfigError, match="values or .* levels"):
        schema.conform(data, "actions", str(f))


def test_gpulab_s_own_yaml_files_read_the_same_under_both_loaders(monkeypatch):
    files = [p for p in sorted(ROOT.glob("*/**/*.y*ml")) if ".venv" not in p.parts and p.suffix in (".yml", ".yaml")]
    files = [p for p in files if p.parts[len(ROOT.parts)] in ("inventory", "lab", "runner")]
    assert len(files) >= 15, files  # inventory, lab/data, the workload catalogue
    for base in [yaml.SafeLoader, C_LOADER] if C_LOADER else [yaml.SafeLoader]:
        monkeypatch.setattr(schema, "LOADER", schema.bounded_loader(base))
        for p in files:
            assert schema.read_yaml(p) == yaml.safe_load(p.read_text()), (base, p)


def test_libyaml_is_used_only_where_it_bounds_nesting(monkeypatch):
    if C_LOADER is not None:
        from yaml import _yaml

        assert issubclass(schema.LOADER, C_LOADER) == (tuple(_yaml.get_version()) >= (0, 2, 6))
        monkeypatch.setattr(_yaml, "get_version", lambda: (0, 2, 5))  # composes nested nodes recursively in C
        assert not schema._libyaml_bounded()
        monkeypatch.setattr(_yaml, "get_version", lambda: (0, 2, 6))
        assert schema._libyaml_bounded()
    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    assert not schema._libyaml_bounded()
