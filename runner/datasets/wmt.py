"""WMT En-De (WMT16 for GNMT, WMT17 for Transformer) into token-id arrays.

Inputs, named in the catalogue's ``params``: per split a list of sources, each
an archive (``.tgz`` or a plain text file) and the member names (base names)
of the English and German sides, plain text (one sentence per line) or SGML
(``.sgm``, one ``<seg>`` per sentence, as the newstest sets come). A shared
BPE vocabulary of ``vocab_size`` tokens (runner.datasets.bpe) is learned on
the training text of both languages and applied to every split. Written:

    vocab.json                       the vocabulary and merges (BPE.load reads it)
    <split>.<lang>.ids.npy           int32, the token ids of all sentences concatenated
    <split>.<lang>.offsets.npy       int64, n+1 offsets: sentence i is ids[off[i]:off[i+1]]

for split in train, eval and lang in en, de. Pairs where either side is empty
are dropped. No BOS/EOS ids are stored (the readers add them).
"""

from __future__ import annotations

import html
import re
import tarfile
from pathlib import Path

import numpy as np

from runner.datasets.bpe import BPE
from runner.datasets.common import PrepareError, sha256_file

LANGS = ("en", "de")
SPLITS = ("train", "eval")
_SEG = re.compile(r"<seg[^>]*>(.*?)</seg>", re.S | re.I)


def _member_text(archive: Path, member: str) -> str:
    """The text of ``member`` (a base name) from a tar archive, or the file itself."""
    if not tarfile.is_tarfile(archive):
        if archive.name != member:
            raise PrepareError(f"{archive}: not a tar archive, and not the file {member}")
        raw = archive.read_bytes()
    else:
        with tarfile.open(archive, "r:*") as tf:
            found = None
            for m in tf:
                if m.isfile() and m.name.rsplit("/", 1)[-1] == member:
                    found = m
                    break
            if found is None:
                raise PrepareError(f"{archive}: no member named {member}")
            raw = tf.extractfile(found).read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PrepareError(f"{archive}: {member}: not UTF-8 ({exc})") from None
    return text


def _sentences(archive: Path, member: str) -> list[str]:
    text = _member_text(archive, member)
    if member.endswith(".sgm"):
        return [html.unescape(s).strip() for s in _SEG.findall(text)]
    return [ln.rstrip("\r").strip() for ln in text.split("\n")[: -1 if text.endswith("\n") else None]]


def read_split(sources: list[dict], archives: Path) -> tuple[list[str], list[str]]:
    en_all, de_all = [], []
    for src in sources:
        path = archives / src["archive"]
        en, de = _sentences(path, src["en"]), _sentences(path, src["de"])
        if len(en) != len(de):
            raise PrepareError(f"{path}: {src['en']} has {len(en)} sentences, {src['de']} has {len(de)}")
        for a, b in zip(en, de):
            if a and b:
                en_all.append(a)
                de_all.append(b)
    return en_all, de_all


def _write(bpe: BPE, lines: list[str], dest: Path, stem: str) -> tuple[int, str, str]:
    offsets = np.zeros(len(lines) + 1, np.int64)
    chunks = []
    for i, line in enumerate(lines):
        ids = bpe.encode(line)
        chunks.append(np.asarray(ids, np.int32))
        offsets[i + 1] = offsets[i] + len(ids)
    ids = np.concatenate(chunks) if chunks else np.zeros(0, np.int32)
    np.save(dest / f"{stem}.ids.npy", ids)
    np.save(dest / f"{stem}.offsets.npy", offsets)
    return int(ids.size), sha256_file(dest / f"{stem}.ids.npy"), sha256_file(dest / f"{stem}.offsets.npy")


def prepare(spec: dict, archives: Path, dest: Path) -> tuple[dict, dict]:
    params = spec.get("params", {})
    data = {split: read_split(params[split], archives) for split in SPLITS}
    if not data["train"][0]:
        raise PrepareError(f"{spec.get('name', 'wmt')}: no training sentence pairs")
    bpe = BPE.learn(data["train"][0] + data["train"][1], int(params["vocab_size"]))
    dest.mkdir(parents=True, exist_ok=True)
    bpe.save(dest / "vocab.json")
    counts = {"vocab": len(bpe.vocab), "merges": len(bpe.merges)}
    sums = {"vocab.json": sha256_file(dest / "vocab.json")}
    for split in SPLITS:
        counts[f"{split}_pairs"] = len(data[split][0])
        for lang, lines in zip(LANGS, data[split]):
            n, s_ids, s_off = _write(bpe, lines, dest, f"{split}.{lang}")
            counts[f"{split}_tokens_{lang}"] = n
            sums[f"{split}.{lang}.ids.npy"] = s_ids
            sums[f"{split}.{lang}.offsets.npy"] = s_off
    # the tokenization must be exactly reversible on the evaluation text
    bad = [s for lines in data["eval"] for s in lines if bpe.decode(bpe.encode(s)) != s]
    if bad:
        raise PrepareError(f"tokenization is not reversible for {len(bad)} eval sentence(s), e.g. {bad[0][:60]!r}")
    counts["eval_roundtrip_ok"] = sum(len(lines) for lines in data["eval"])
    return counts, sums


def files() -> list[str]:
    return ["vocab.json"] + [f"{s}.{lang}.{k}.npy" for s in SPLITS for lang in LANGS for k in ("ids", "offsets")]
