"""Data of the translation workloads (gnmt, transformer): generated tasks, prepared WMT, batches.

Token ids: ``PAD, UNK, BOS, EOS = 0, 1, 2, 3`` (the layout of the prepared WMT
data, runner.datasets.bpe). Full scale reads the prepared WMT En-De arrays
(``<data>/wmt16_de_en`` for GNMT, ``<data>/wmt17_en_de`` for the Transformer):
``vocab.json`` and ``<split>.<lang>.ids.npy`` / ``<split>.<lang>.offsets.npy``
for split train/eval, lang en/de (sentence i is ``ids[off[i]:off[i+1]]``, no
BOS/EOS stored). Tiny and small scales generate a deterministic translation
task with a real word vocabulary: an "English" and a "German" lexicon of
pronounceable words, a fixed bilingual dictionary, and sentences whose
translation is the word-by-word dictionary translation with each pair of
neighbouring words swapped (so that the model must learn both the lexicon and
an alignment that is not the identity).

Batches are padded to one of a few fixed lengths (``buckets``), so that
compiled graphs see a handful of static shapes; padding never changes a
result (the encoders and the loss skip it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from runner.workloads.base import WorkloadError

PAD, UNK, BOS, EOS = 0, 1, 2, 3
N_SPECIAL = 4
DATA_SEED = 20181201  # generated data is a fixed data set, the same for every run


class WordVocab:
    """The generated task's vocabulary: specials, then English words, then German words."""

    def __init__(self, en: list[str], de: list[str]):
        self.words = ["<pad>", "<unk>", "<s>", "</s>"] + en + de
        self.n_en = len(en)

    def __len__(self):
        return len(self.words)

    def decode(self, ids) -> str:
        return " ".join(self.words[i] for i in ids if i >= N_SPECIAL)


def _lexicon(rng, n: int, onsets: str, vowels: str, codas: str) -> list[str]:
    seen, out = set(), []
    while len(out) < n:
        k = int(rng.integers(1, 4))
        w = "".join(rng.choice(list(onsets)) + rng.choice(list(vowels)) for _ in range(k))
        w += rng.choice(list(codas))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def generate(cfg: dict) -> dict:
    """The generated translation task (deterministic): train and eval pairs and the vocabulary."""
    rng = np.random.default_rng(DATA_SEED)
    n = int(cfg["words"])
    en = _lexicon(rng, n, "bcdfglmnprstvw", "aeiou", ["", "n", "s", "t", "r"])
    de = _lexicon(rng, n, "bdfghklmnrstwz", "aeiouä", ["", "en", "er", "t", "ch"])
    vocab = WordVocab(en, de)
    # the dictionary: English word i -> German word perm[i]
    perm = rng.permutation(n)
    zipf = 1.0 / np.arange(1, n + 1) ** float(cfg.get("zipf", 0.8))
    zipf /= zipf.sum()
    lo, hi = cfg["sentence_len"]

    def pairs(count):
        src, tgt = [], []
        for _ in range(count):
            ln = int(rng.integers(lo, hi + 1))
            words = rng.choice(n, size=ln, p=zipf)
            out = perm[words]
            if cfg.get("swap_pairs", True):
                out = out.copy()
                for i in range(0, ln - 1, 2):
                    out[i], out[i + 1] = out[i + 1], out[i]
            src.append((words + N_SPECIAL).astype(np.int64))
            tgt.append((out + N_SPECIAL + n).astype(np.int64))
        return src, tgt

    tr_s, tr_t = pairs(int(cfg["train_pairs"]))
    ev_s, ev_t = pairs(int(cfg["eval_pairs"]))
    return {
        "vocab": vocab,
        "vocab_size": len(vocab),
        "train": (tr_s, tr_t),
        "eval": (ev_s, ev_t),
        "refs": [vocab.decode(t) for t in ev_t],
    }


def _split(root: Path, split: str, lang: str) -> list[np.ndarray]:
    ids = np.load(root / f"{split}.{lang}.ids.npy", mmap_mode="r")
    off = np.load(root / f"{split}.{lang}.offsets.npy")
    return [np.asarray(ids[off[i] : off[i + 1]], dtype=np.int64) for i in range(len(off) - 1)]


def _from_reader(wmt, src_lang: str, tgt_lang: str) -> dict:
    """Through runner.datasets.readers (the datasets package, with its manifest check)."""

    def sents(split, lang):
        ss = wmt.split(split, lang)
        return [np.asarray(ss[i], dtype=np.int64) for i in range(len(ss))]

    bpe = wmt.bpe

    class _Dec:
        def decode(self, ids):
            return bpe.decode([int(i) for i in ids if int(i) >= N_SPECIAL])

    dec = _Dec()
    tr = (sents("train", src_lang), sents("train", tgt_lang))
    ev = (sents("eval", src_lang), sents("eval", tgt_lang))
    return {
        "vocab": dec,
        "vocab_size": int(wmt.vocab_size),
        "train": tr,
        "eval": ev,
        "refs": [dec.decode(t) for t in ev[1]],
    }


def load_prepared(
    root: str, benchmark: str, folders: tuple[str, ...], src_lang: str = "en", tgt_lang: str = "de"
) -> dict:
    """The prepared WMT data of ``benchmark`` under the data root ``root``.

    Through ``runner.datasets.readers.wmt`` where the datasets package is
    installed (it checks the dataset against its manifest first); otherwise
    the arrays are read directly from the first of ``folders`` under ``root``
    (or ``root`` itself) that holds them.
    """
    try:
        from runner.datasets import readers
    except ImportError:
        readers = None
    if readers is not None and hasattr(readers, "wmt"):
        try:
            return _from_reader(readers.wmt(benchmark, root), src_lang, tgt_lang)
        except Exception as exc:  # NotPrepared and friends: one line naming what is missing
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WorkloadError(msg) from exc
    need = ["vocab.json"] + [
        f"{s}.{lg}.{k}.npy" for s in ("train", "eval") for lg in (src_lang, tgt_lang) for k in ("ids", "offsets")
    ]
    cands = [Path(root) / f for f in folders] + [Path(root)]
    d = next((c for c in cands if (c / "vocab.json").is_file()), cands[0])
    missing = [f for f in need if not (d / f).is_file()]
    if missing:
        raise WorkloadError(
            f"{d}: not a prepared WMT dataset (missing {', '.join(missing[:3])}); prepare it with the datasets playbook"
        )
    try:
        from runner.datasets.bpe import BPE
    except ImportError as exc:
        raise WorkloadError(
            "the WMT vocabulary reader (runner.datasets.bpe) is not installed with this runner"
        ) from exc
    bpe = BPE.load(d / "vocab.json")
    tr = (_split(d, "train", src_lang), _split(d, "train", tgt_lang))
    ev = (_split(d, "eval", src_lang), _split(d, "eval", tgt_lang))

    class _Dec:
        def decode(self, ids):
            return bpe.decode([int(i) for i in ids if int(i) >= N_SPECIAL])

    dec = _Dec()
    return {"vocab": dec, "vocab_size": len(bpe.vocab), "train": tr, "eval": ev, "refs": [dec.decode(t) for t in ev[1]]}


def bucket_length(n: int, buckets: list[int]) -> int:
    """The smallest bucket that holds ``n``; past the last bucket, ``n`` rounded up to a multiple of 8."""
    for b in buckets:
        if n <= b:
            return b
    return -(-n // 8) * 8


def frame_source(s: np.ndarray, frame: tuple[bool, bool]) -> np.ndarray:
    """The source as the model reads it: BOS in front and/or EOS behind, as ``frame`` says."""
    parts = ([np.array([BOS])] if frame[0] else []) + [s] + ([np.array([EOS])] if frame[1] else [])
    return np.concatenate(parts).astype(np.int64)


def keep_pairs(src, tgt, max_len: int, frame: tuple[bool, bool], tgt_extra: int) -> list[int]:
    """Indices of the pairs whose framed source and ``len(tgt) + tgt_extra`` fit ``max_len`` (others discarded)."""
    n_frame = int(frame[0]) + int(frame[1])
    return [
        i
        for i in range(len(src))
        if 0 < len(src[i])
        and len(src[i]) + n_frame <= max_len
        and 0 < len(tgt[i])
        and len(tgt[i]) + tgt_extra <= max_len
    ]


def pad_batch(src, tgt, part, buckets: list[int], frame: tuple[bool, bool]):
    """``(src [B,S], tgt_in [B,T], tgt_out [B,T])`` of the pairs ``part``, padded to buckets (numpy)."""
    framed = [frame_source(src[i], frame) for i in part]
    sl = bucket_length(max(len(f) for f in framed), buckets)
    tl = bucket_length(max(len(tgt[i]) + 1 for i in part), buckets)
    S = np.full((len(part), sl), PAD, np.int64)
    TI = np.full((len(part), tl), PAD, np.int64)
    TO = np.full((len(part), tl), PAD, np.int64)
    for j, i in enumerate(part):
        S[j, : len(framed[j])] = framed[j]
        t = tgt[i]
        TI[j, 0] = BOS
        TI[j, 1 : len(t) + 1] = t
        TO[j, : len(t)] = t
        TO[j, len(t)] = EOS
    return S, TI, TO


def token_batches(
    src, tgt, keep: list[int], max_tokens: int, max_sentences: int, buckets: list[int], frame: tuple[bool, bool]
) -> list[list[int]]:
    """Fixed batches of at most ``max_tokens`` padded tokens (fairseq's ``--max-tokens``).

    Pairs sorted by (source, target) length fill a batch while its count times
    its longest padded side stays within ``max_tokens`` (and the count within
    ``max_sentences``). The batches are made once; epochs shuffle their order.
    """
    n_frame = int(frame[0]) + int(frame[1])
    order = sorted(keep, key=lambda i: (len(src[i]), len(tgt[i]), i))
    out, cur, width = [], [], 0
    for i in order:
        w = max(bucket_length(len(src[i]) + n_frame, buckets), bucket_length(len(tgt[i]) + 1, buckets))
        if cur and (max(width, w) * (len(cur) + 1) > max_tokens or len(cur) >= max_sentences):
            out.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, w)
    if cur:
        out.append(cur)
    return out


def bucketed_shards(
    lengths: np.ndarray, batch: int, world: int, rank: int, seed: int, batches_in_shard: int = 80
) -> list[np.ndarray]:
    """This rank's batches of one epoch, as the GNMT reference's BucketingSampler draws them.

    A seeded permutation, cut to a multiple of the global batch; shards of
    ``batches_in_shard`` global batches sorted by (source + target) length;
    the global batches shuffled; rank ``r`` takes the ``r``-th ``batch`` of each
    global batch (consecutive ranks get consecutive batches).
    """
    g = np.random.default_rng(seed)
    n = len(lengths)
    gb = batch * world
    num = n // gb * gb
    idx = g.permutation(n)[:num]
    shard = gb * batches_in_shard
    parts = []
    for s in range(0, num, shard):
        chunk = idx[s : s + shard]
        parts.append(chunk[np.argsort(lengths[chunk], kind="stable")])
    idx = np.concatenate(parts) if parts else idx
    glob = idx.reshape(-1, gb)[g.permutation(num // gb)]
    return [row.reshape(world, batch)[rank] for row in glob]
