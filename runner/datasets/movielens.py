"""MovieLens-20M into the NCF form of MLPerf v0.5.

From ``ml-20m.zip`` (``ml-20m/ratings.csv``: userId,movieId,rating,timestamp):
keep users with at least ``min_ratings`` ratings, number users and items from 0
in order of first appearance, hold out each user's latest rating (ties: the
later line) as the test item, and draw ``negatives`` distinct items the user
never rated as the test negatives, with a fixed seed. Written as

    train.npy           int32 (N, 2)  user, item  (per user in time order)
    test.npy            int32 (U, 2)  user, held-out item, one row per user
    test_negatives.npy  int32 (U, K)  K sampled negatives per user (row = user)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from runner.datasets.common import PrepareError, sha256_file, zip_open

MEMBER = "ratings.csv"


def read_ratings(zip_path: Path) -> np.ndarray:
    """(rows, 4) float64 of userId, movieId, rating, timestamp in file order."""
    zf = zip_open(zip_path)
    names = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] == MEMBER]
    if not names:
        raise PrepareError(f"{zip_path}: no {MEMBER} in the archive")
    raw = zf.read(names[0])
    header, _, body = raw.partition(b"\n")
    if header.strip().lower() != b"userid,movieid,rating,timestamp":
        raise PrepareError(f"{zip_path}: {names[0]}: unexpected header {header[:60]!r}")
    if not body.strip():
        raise PrepareError(f"{zip_path}: {names[0]}: no ratings")
    text = body.replace(b"\r", b"").strip().replace(b"\n", b",").decode("ascii", "replace")
    try:
        values = np.fromstring(text, dtype=np.float64, sep=",")
        bad = values.size != text.count(",") + 1
    except ValueError:
        bad = True
    if bad:  # name the first line that does not parse
        for k, field in enumerate(text.split(",")):
            try:
                float(field)
            except ValueError:
                raise PrepareError(
                    f"{zip_path}: {names[0]}: line {k // 4 + 2}: {field[:20]!r} is not a number"
                ) from None
    if values.size % 4:
        raise PrepareError(f"{zip_path}: {names[0]}: a line without 4 fields")
    return values.reshape(-1, 4)


def convert(ratings: np.ndarray, min_ratings: int, negatives: int, seed: int) -> dict:
    users_raw = ratings[:, 0].astype(np.int64)
    items_raw = ratings[:, 1].astype(np.int64)
    times = ratings[:, 3].astype(np.int64)
    uniq, counts = np.unique(users_raw, return_counts=True)
    keep = np.isin(users_raw, uniq[counts >= min_ratings])
    users_raw, items_raw, times = users_raw[keep], items_raw[keep], times[keep]
    if users_raw.size == 0:
        raise PrepareError(f"no user has {min_ratings} ratings or more")
    # ids in order of first appearance
    u_vals, u_first, users = np.unique(users_raw, return_index=True, return_inverse=True)
    u_rank = np.empty(len(u_vals), np.int64)
    u_rank[np.argsort(u_first, kind="stable")] = np.arange(len(u_vals))
    users = u_rank[users.ravel()]
    i_vals, i_first, items = np.unique(items_raw, return_index=True, return_inverse=True)
    i_rank = np.empty(len(i_vals), np.int64)
    i_rank[np.argsort(i_first, kind="stable")] = np.arange(len(i_vals))
    items = i_rank[items.ravel()]
    n_users, n_items = len(u_vals), len(i_vals)
    order = np.lexsort((np.arange(len(users)), times, users))  # by user, then time, then line
    users, items = users[order], items[order]
    last = np.r_[users[1:] != users[:-1], True]
    test = np.stack([users[last], items[last]], axis=1)
    train = np.stack([users[~last], items[~last]], axis=1)
    if negatives > n_items - 1:
        raise PrepareError(f"{negatives} negatives per user asked, but only {n_items} items exist")
    neg = sample_negatives(users, items, n_users, n_items, negatives, seed)
    return {
        "train": train.astype(np.int32),
        "test": test.astype(np.int32),
        "test_negatives": neg,
        "users": n_users,
        "items": n_items,
    }


def sample_negatives(users: np.ndarray, items: np.ndarray, n_users: int, n_items: int, k: int, seed: int) -> np.ndarray:
    """``k`` distinct items per user that the user never rated (users' rows sorted by user)."""
    rng = np.random.default_rng(seed)
    starts = np.searchsorted(users, np.arange(n_users + 1))
    out = np.empty((n_users, k), np.int32)
    for u in range(n_users):
        rated = np.unique(items[starts[u] : starts[u + 1]])
        free = n_items - len(rated)
        if free < k:
            raise PrepareError(f"user {u} rated {len(rated)} of {n_items} items: fewer than {k} negatives left")
        got = np.empty(0, np.int64)
        draw = k + len(rated) + 16
        while len(got) < k:
            cand = rng.integers(0, n_items, size=draw)
            pos = np.searchsorted(rated, cand)
            pos[pos == len(rated)] = 0
            cand = cand[rated[pos] != cand] if len(rated) else cand
            cand = np.concatenate([got, cand])
            _, first = np.unique(cand, return_index=True)
            got = cand[np.sort(first)]
            draw *= 2
        out[u] = got[:k]
    return out


def prepare(spec: dict, archives: Path, dest: Path) -> tuple[dict, dict]:
    params = spec.get("params", {})
    zip_path = archives / spec["artifacts"][0]["file"]
    data = convert(
        read_ratings(zip_path),
        int(params.get("min_ratings", 20)),
        int(params.get("negatives", 999)),
        int(params.get("seed", 0)),
    )
    dest.mkdir(parents=True, exist_ok=True)
    sums = {}
    for key in ("train", "test", "test_negatives"):
        path = dest / f"{key}.npy"
        np.save(path, data[key])
        sums[path.name] = sha256_file(path)
    counts = {
        "users": data["users"],
        "items": data["items"],
        "train": int(len(data["train"])),
        "test": int(len(data["test"])),
        "negatives_per_user": int(data["test_negatives"].shape[1]),
        "ratings": int(len(data["train"]) + len(data["test"])),
    }
    return counts, sums


FILES = ("train.npy", "test.npy", "test_negatives.npy")
