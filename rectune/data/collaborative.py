"""Classical recommenders from maintained libraries, fitted on interactions RecTune collects from rows.

cornac (``MostPop``, ``ItemKNN``, ``BPR``, ``GlobalAvg``, ``BaselineOnly``, ``MF``, ``SASRec``) and
implicit (``AlternatingLeastSquares``) do the modelling; this module only turns RecTune's users and
items into their indices and back. cornac was chosen because one pip wheel for Python 3.11 holds every
model the baselines need, rating and ranking, beside our torch and numpy; implicit adds ALS, whose
cornac counterpart (WMF) needs TensorFlow.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from rectune.core.io import RecTuneError


class Interactions:
    """Who consumed (or rated) what: user -> item -> rating (1.0 for implicit feedback), in insertion order."""

    def __init__(self) -> None:
        self.ratings: dict[str, dict[str, float]] = {}

    def add(self, user: str, item: str, rating: float = 1.0) -> None:
        self.ratings.setdefault(user, {})[item] = float(rating)

    def drop(self, user: str, items: Iterable[str]) -> None:
        for item in items:
            self.ratings.get(user, {}).pop(item, None)

    def items(self) -> set[str]:
        return {item for rated in self.ratings.values() for item in rated}

    def triplets(self) -> list[tuple[str, str, float]]:
        """Every (user, item, rating); one line when there is none (the libraries' errors were tracebacks)."""
        triplets = [(user, item, rating) for user, rated in self.ratings.items() for item, rating in rated.items()]
        if not triplets:
            raise RecTuneError(
                "no interactions to fit a baseline on: train.jsonl beside --data holds none once the held-out "
                "queries' own are left out"
            )
        return triplets

    def counts(self) -> dict[str, int]:
        """Item -> how many users consumed it."""
        counts: dict[str, int] = {}
        for rated in self.ratings.values():
            for item in rated:
                counts[item] = counts.get(item, 0) + 1
        return counts


class Model:
    """A fitted library model: ``scores(user)`` over every item it knows (``None`` for an unknown user)."""

    def __init__(self, model, user_index: dict[str, int], item_ids: list[str], score_user):
        self.model, self.user_index, self.item_ids = model, user_index, item_ids
        self._score_user = score_user

    def scores(self, user: str) -> dict[str, float] | None:
        if user not in self.user_index:
            return None
        values = np.asarray(self._score_user(self.user_index[user]), dtype=np.float64)
        return dict(zip(self.item_ids, values.tolist(), strict=True))


def _cornac_dataset(interactions: Interactions, seed: int):
    from cornac.data import Dataset

    return Dataset.from_uir(interactions.triplets(), seed=seed)


def _fit_cornac(model, interactions: Interactions, seed: int) -> Model:
    data = _cornac_dataset(interactions, seed)
    model.fit(data)
    items = [item for item, _ in sorted(data.iid_map.items(), key=lambda pair: pair[1])]
    return Model(model, dict(data.uid_map), items, model.score)


def popularity(interactions: Interactions, seed: int = 0) -> dict[str, float]:
    """cornac ``MostPop``: item -> the number of users who consumed it (the same for every user)."""
    from cornac.models import MostPop

    model = _fit_cornac(MostPop(), interactions, seed)
    return dict(zip(model.item_ids, np.asarray(model.model.score(0), dtype=np.float64).tolist(), strict=True))


def fit_itemknn(interactions: Interactions, k: int, seed: int = 0) -> Model:
    """cornac ``ItemKNN`` (cosine similarity over users, ``k`` neighbours per item)."""
    from cornac.models import ItemKNN

    return _fit_cornac(ItemKNN(k=k, similarity="cosine", verbose=False, num_threads=1), interactions, seed)


def fit_bpr(interactions: Interactions, factors: int, lambda_reg: float, seed: int = 0) -> Model:
    """cornac ``BPR`` (Rendle et al. 2009), 100 epochs of SGD at learning rate 0.05."""
    from cornac.models import BPR

    model = BPR(k=factors, max_iter=100, learning_rate=0.05, lambda_reg=lambda_reg, seed=seed, num_threads=1)
    return _fit_cornac(model, interactions, seed)


def fit_als(interactions: Interactions, factors: int, regularization: float, seed: int = 0) -> Model:
    """implicit's ``AlternatingLeastSquares`` (Hu, Koren and Volinsky 2008), 15 iterations, confidence 1 + r."""
    from implicit.cpu.als import AlternatingLeastSquares
    from scipy.sparse import csr_matrix
    from threadpoolctl import threadpool_limits

    users = list(interactions.ratings)
    items = sorted(interactions.items())
    user_index = {user: i for i, user in enumerate(users)}
    item_index = {item: i for i, item in enumerate(items)}
    triplets = interactions.triplets()
    rows = [user_index[user] for user, _, _ in triplets]
    columns = [item_index[item] for _, item, _ in triplets]
    values = [rating for _, _, rating in triplets]
    matrix = csr_matrix((values, (rows, columns)), shape=(len(users), len(items)))
    with threadpool_limits(1, "blas"):  # implicit warns (and slows) when BLAS runs threads of its own
        model = AlternatingLeastSquares(
            factors=factors, regularization=regularization, iterations=15, random_state=seed, num_threads=1
        )
        model.fit(matrix, show_progress=False)
    return Model(model, user_index, items, lambda u: model.item_factors @ model.user_factors[u])


def fit_rating_model(name: str, interactions: Interactions, params: dict, seed: int = 0) -> Model:
    """A rating predictor: ``global-mean`` (cornac ``GlobalAvg``), ``bias`` (``BaselineOnly``: global mean +
    user bias + item bias) or ``mf`` (``MF``: biased matrix factorisation), scores = predicted ratings."""
    from cornac.models import MF, BaselineOnly, GlobalAvg

    if name == "global-mean":
        model = GlobalAvg()
    elif name == "bias":
        model = BaselineOnly(max_iter=30, learning_rate=0.01, lambda_reg=params["lambda_reg"], seed=seed)
    elif name == "mf":
        model = MF(k=params["factors"], max_iter=30, learning_rate=0.01, lambda_reg=params["lambda_reg"], seed=seed)
    else:
        raise ValueError(f"unknown rating model {name!r}")
    data = _cornac_dataset(interactions, seed)
    model.fit(data)
    items = [item for item, _ in sorted(data.iid_map.items(), key=lambda pair: pair[1])]
    if name == "global-mean":  # GlobalAvg scores every item with the mean, for any user
        return Model(model, dict(data.uid_map), items, lambda u: np.full(len(items), data.global_mean))
    return Model(model, dict(data.uid_map), items, model.score)


def ranked(scores: dict[str, float], allowed: Iterable[str], exclude: set[str], n: int) -> list[str]:
    """The ``n`` best of ``allowed`` by score (unscored items last), ``exclude`` left out; ties keep
    ``allowed``'s order."""
    pool = [item for item in dict.fromkeys(allowed) if item not in exclude]
    order = sorted(range(len(pool)), key=lambda i: (-scores.get(pool[i], -np.inf), i))
    return [pool[i] for i in order[:n]]


class SequenceModel:
    """A fitted next-item model: ``scores(history)`` over every item it knows, given items oldest first."""

    def __init__(self, model, item_index: dict[str, int]):
        self.model, self.item_index = model, item_index
        self.item_ids = [item for item, _ in sorted(item_index.items(), key=lambda pair: pair[1])]

    def scores(self, history: list[str]) -> dict[str, float]:
        known = [self.item_index[item] for item in history if item in self.item_index]
        values = np.asarray(self.model.score(0, history_items=known), dtype=np.float64).reshape(-1)
        return dict(zip(self.item_ids, values[: len(self.item_ids)].tolist(), strict=True))


def fit_sasrec(sequences: list[list[str]], embedding_dim: int, seed: int = 0) -> SequenceModel:
    """cornac ``SASRec`` (Kang and McAuley 2018) on the sequences (items oldest first): 2 blocks, 20 epochs."""
    import torch
    from cornac.data import SequentialDataset
    from cornac.models import SASRec

    events = [(str(n), item, t) for n, sequence in enumerate(sequences) for t, item in enumerate(sequence)]
    data = SequentialDataset.from_sit(events, seed=seed)
    torch.manual_seed(seed)
    model = SASRec(embedding_dim=embedding_dim, n_epochs=20, max_len=50, batch_size=64, n_sample=128, seed=seed)
    model.fit(data)
    return SequenceModel(model, dict(data.iid_map))
