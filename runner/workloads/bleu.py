"""BLEU of the translation workloads, as each MLPerf v0.5 reference scores it.

Both schemes are corpus BLEU (4-grams, clipped counts, brevity penalty
``exp(1 - r/c)`` when the output is shorter, no smoothing) returned as a
fraction in [0, 1], as the MLPerf 0.7.0 rules log it.

- ``intl`` (GNMT): NVIDIA's v0.5 GNMT (rnn_translator/pytorch,
  seq2seq/inference/inference.py) detokenizes its output and runs
  ``sacrebleu --score-only -lc --tokenize intl`` against the raw
  newstest2014 German. gpulab's outputs are raw text already (the prepared
  vocabulary decodes exactly), so this is sacrebleu's ``corpus_bleu`` with
  ``tokenize="intl"``, ``lowercase=True`` and the command line's other
  defaults (exponential smoothing, which acts only on a zero n-gram count),
  rounded to two decimals of BLEU as that command line prints it (the v0.5
  logs show 18.87, 21.48, 22.26).
- ``moses`` (Transformer): NVIDIA's v0.5 Transformer (translation/pytorch,
  train.py ``score``) compares its output with the reference in the Moses
  tokenization of its data preparation (``tokenizer.perl -a -l de``, after
  ``’`` -> ``'`` on the test text), both lower-cased (``--ignore-case``), split
  at whitespace, with fairseq's own BLEU (fairseq/bleu.py, libbleu.cpp):
  the formula above on whitespace tokens. Here: both sides Moses-tokenized
  by sacremoses (the Python port of tokenizer.perl) with aggressive dash
  splitting, then sacrebleu with ``tokenize="none"``, ``lowercase=True``.
  ``tests/unit/runner/test_runner_bleu.py`` checks this against fairseq's
  formula written out.
"""

from __future__ import annotations

from functools import lru_cache

SCHEMES = ("intl", "moses")


class BleuError(Exception):
    """A BLEU scheme that does not exist, or a missing metric library."""


def _sacrebleu():
    try:
        import sacrebleu
    except ImportError as exc:  # a dependency of the runner (pyproject.toml)
        raise BleuError(
            "sacrebleu is not installed (pip install sacrebleu): the translation workloads score BLEU with it"
        ) from exc
    return sacrebleu


@lru_cache(maxsize=4)
def _moses(lang: str):
    try:
        from sacremoses import MosesTokenizer
    except ImportError as exc:
        raise BleuError(
            "sacremoses is not installed (pip install sacremoses): the transformer scores BLEU on Moses-tokenized text"
        ) from exc
    return MosesTokenizer(lang=lang)


def moses_tokenize(line: str, lang: str = "de") -> str:
    """``tokenizer.perl -a -l LANG`` of one line (after ``’`` -> ``'``, as the reference's test text)."""
    tok = _moses(lang)
    return tok.tokenize(line.replace("\u2019", "'"), aggressive_dash_splits=True, return_str=True, escape=True)


def corpus_bleu(hyps: list[str], refs: list[str], scheme: str, lang: str = "de") -> float:
    """Corpus BLEU of ``hyps`` against one reference each, as a fraction in [0, 1]."""
    if scheme not in SCHEMES:
        raise BleuError(f"BLEU scheme {scheme!r}: use one of {', '.join(SCHEMES)}")
    if len(hyps) != len(refs):
        raise BleuError(f"{len(hyps)} translations for {len(refs)} references")
    sb = _sacrebleu()
    if scheme == "intl":
        score = sb.corpus_bleu(hyps, [refs], tokenize="intl", lowercase=True)
        # the reference reads the command line's --score-only output: BLEU with two decimals
        return round(score.score, 2) / 100.0
    else:
        h = [moses_tokenize(x, lang) for x in hyps]
        r = [moses_tokenize(x, lang) for x in refs]
        # fairseq's formula has no smoothing: a zero n-gram precision gives 0
        score = sb.corpus_bleu(h, [r], tokenize="none", lowercase=True, force=True, smooth_method="none")
    return score.score / 100.0
