"""A byte-pair-encoding subword vocabulary: learner, applier and the exact inverse.

Pre-tokenization is reversible: a sentence is cut into words (a run of word
characters, a run of punctuation, or one other whitespace character), each with
the space in front of it kept as the marker symbol ``▁``. Characters outside
the learned alphabet (and a literal ``▁``) are written as byte tokens
``<0xNN>`` of their UTF-8 encoding, so every string can be encoded and
``decode(encode(s)) == s`` holds for any text without a line break.

The vocabulary is: the special tokens, the 256 byte tokens, the alphabet (by
frequency), then one token per merge in the order learned, until it holds
``vocab_size`` entries (the MLPerf v0.5 vocabularies: 32,320 for GNMT and
33,712 for Transformer). Ties between equally frequent pairs go to the
lexicographically smallest pair, so learning is deterministic.
"""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

MARK = "\u2581"
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
PAD, UNK, BOS, EOS = range(4)
BYTE_TOKENS = tuple(f"<0x{b:02X}>" for b in range(256))
_WORDS = re.compile(r" ?[^\W_]+| ?_+| ?[^\w\s]+|\s", re.UNICODE)
_BYTE = re.compile(r"<0x([0-9A-F]{2})>\Z")


def words(text: str) -> list[str]:
    """Reversible cut of ``text``: ``''.join(words(text)) == text``."""
    out = _WORDS.findall(text)
    return out


def _symbols(word: str, known) -> list[str]:
    """Base symbols of one word: the space marker, alphabet characters, byte tokens for the rest."""
    syms: list[str] = []
    if word.startswith(" "):
        syms.append(MARK)
        word = word[1:]
    for ch in word:
        if ch != MARK and ch in known:
            syms.append(ch)
        else:
            syms.extend(f"<0x{b:02X}>" for b in ch.encode("utf-8"))
    return syms


class BPE:
    def __init__(self, vocab: list[str], merges: list[tuple[str, str]]):
        self.vocab = list(vocab)
        self.merges = [tuple(m) for m in merges]
        self.ids = {}
        for i, tok in enumerate(self.vocab):
            self.ids.setdefault(tok, i)
        self.ranks = {m: r for r, m in enumerate(self.merges)}
        self.alphabet = {t for t in self.vocab if len(t) == 1 and t != MARK}
        self._cache: dict[str, list[int]] = {}

    # ---- learning ----
    @classmethod
    def learn(cls, lines, vocab_size: int) -> "BPE":
        """Learn merges on an iterable of sentences until the vocabulary has ``vocab_size`` tokens."""
        word_counts: Counter = Counter()
        for line in lines:
            word_counts.update(words(line))
        char_counts: Counter = Counter()
        for w, c in word_counts.items():
            for ch in w[1:] if w.startswith(" ") else w:
                char_counts[ch] += c
        char_counts.pop(MARK, None)
        room = vocab_size - len(SPECIALS) - len(BYTE_TOKENS) - 1
        if room < 0:
            raise ValueError(f"vocab_size {vocab_size} is below the {len(SPECIALS) + len(BYTE_TOKENS) + 1} base tokens")
        alphabet = [ch for ch, _ in sorted(char_counts.items(), key=lambda kv: (-kv[1], kv[0])) if ch != MARK][:room]
        base = list(SPECIALS) + list(BYTE_TOKENS) + [MARK] + alphabet
        known = set(alphabet) | {MARK}
        # each word as a list of symbols; unknown characters become unmergeable byte runs
        seqs: list[list[str]] = []
        freqs: list[int] = []
        for w, c in sorted(word_counts.items()):
            seqs.append(_symbols(w, known))
            freqs.append(c)
        pair_counts: defaultdict = defaultdict(int)
        where: defaultdict = defaultdict(set)
        for i, syms in enumerate(seqs):
            for a, b in zip(syms, syms[1:]):
                if _mergeable(a, b):
                    pair_counts[(a, b)] += freqs[i]
                    where[(a, b)].add(i)
        heap = [(-c, p) for p, c in pair_counts.items()]
        heapq.heapify(heap)
        vocab = list(base)
        seen = set(vocab)
        merges: list[tuple[str, str]] = []
        while len(vocab) < vocab_size and heap:
            negc, pair = heapq.heappop(heap)
            if pair_counts.get(pair, 0) != -negc or negc == 0:
                continue
            merged = pair[0] + pair[1]
            merges.append(pair)
            if merged not in seen:
                vocab.append(merged)
                seen.add(merged)
            delta: defaultdict = defaultdict(int)
            for i in list(where.pop(pair, ())):
                syms, f = seqs[i], freqs[i]
                new, k, hit = [], 0, False
                while k < len(syms):
                    if k + 1 < len(syms) and syms[k] == pair[0] and syms[k + 1] == pair[1]:
                        new.append(merged)
                        k += 2
                        hit = True
                    else:
                        new.append(syms[k])
                        k += 1
                if not hit:  # a stale index entry: this word no longer holds the pair
                    continue
                for a, b in zip(syms, syms[1:]):
                    if _mergeable(a, b):
                        delta[(a, b)] -= f
                for a, b in zip(new, new[1:]):
                    if _mergeable(a, b):
                        delta[(a, b)] += f
                        if a == merged or b == merged:
                            where[(a, b)].add(i)
                seqs[i] = new
            pair_counts.pop(pair, None)
            delta.pop(pair, None)
            for p, d in delta.items():
                if not d:
                    continue
                c = pair_counts.get(p, 0) + d
                if c > 0:
                    pair_counts[p] = c
                    heapq.heappush(heap, (-c, p))
                else:
                    pair_counts.pop(p, None)
        return cls(vocab, merges)

    # ---- applying ----
    def _encode_word(self, word: str) -> list[int]:
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        syms = _symbols(word, self.alphabet)
        while len(syms) > 1:
            best = None
            for k in range(len(syms) - 1):
                r = self.ranks.get((syms[k], syms[k + 1]))
                if r is not None and (best is None or r < best):
                    best = r
            if best is None:
                break
            a, b = self.merges[best]
            new, k = [], 0
            while k < len(syms):
                if k + 1 < len(syms) and syms[k] == a and syms[k + 1] == b:
                    new.append(a + b)
                    k += 2
                else:
                    new.append(syms[k])
                    k += 1
            syms = new
        ids = [self.ids.get(s, UNK) for s in syms]
        if len(self._cache) < 1_000_000:
            self._cache[word] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for w in words(text):
            out.extend(self._encode_word(w))
        return out

    def decode(self, ids) -> str:
        parts: list[str] = []
        pending = bytearray()
        for i in ids:
            i = int(i)
            if i < len(SPECIALS):
                continue
            tok = self.vocab[i]
            m = _BYTE.match(tok)
            if m:
                pending.append(int(m.group(1), 16))
                continue
            if pending:
                parts.append(pending.decode("utf-8", "replace"))
                pending.clear()
            parts.append(tok.replace(MARK, " "))
        if pending:
            parts.append(pending.decode("utf-8", "replace"))
        return "".join(parts)

    # ---- files ----
    def save(self, path: Path) -> None:
        doc = {
            "kind": "gpulab-bpe",
            "schema": 1,
            "specials": list(SPECIALS),
            "mark": MARK,
            "vocab": self.vocab,
            "merges": [list(m) for m in self.merges],
        }
        Path(path).write_text(json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> "BPE":
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(doc["vocab"], [tuple(m) for m in doc["merges"]])


def _mergeable(a: str, b: str) -> bool:
    """Byte tokens never merge (they stand for characters outside the alphabet), and no merge
    may spell a byte or special token, so that decoding stays exact."""
    if _BYTE.match(a) or _BYTE.match(b):
        return False
    ab = a + b
    return not (ab in SPECIALS or _BYTE.match(ab))
