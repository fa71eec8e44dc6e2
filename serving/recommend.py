"""``ncf recommend``: one user's top-k from the running server's ``recommend`` model, as a table.

The call it makes (tritonclient over HTTP; the README shows it)::

    inputs = [http.InferInput("userId", [1, 1], "INT64"), http.InferInput("k", [1, 1], "INT64")]
    inputs[0].set_data_from_numpy(np.array([[user]], dtype=np.int64))
    inputs[1].set_data_from_numpy(np.array([[k]], dtype=np.int64))
    result = http.InferenceServerClient(url).infer("recommend", inputs)

Titles come from ``movies.csv`` beside the ratings the ETL read (its ``metadata.json`` records the
input path; the ETL directory is found from ``--data`` or from the export manifest in ``--repo``),
or from ``--movies``. A user outside the training vocabulary gets the popularity ranking, marked
as such, or with ``--history`` the model's ranking from the movies given (the cold start).
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path

import numpy as np

from ncf.core import names, textfile
from ncf.core.config import Config, flag, setting
from ncf.serving.repository import latest_version

MOVIES_FILE = "movies.csv"  # MovieLens: movieId,title,genres


def request(
    url: str,
    users: np.ndarray,
    k: np.ndarray,
    exclude: np.ndarray | None = None,
    include_rated: np.ndarray | None = None,
    timeout: float = 60.0,
    history: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """One ``recommend`` request: raw ``users [B, 1]``, ``k [B, 1]`` (int64), optional
    ``exclude [B, E]`` (raw movieIds, -1 = padding), ``include_rated [B, 1]`` (bool) and
    ``history [B, H]`` (raw movieIds a user outside the training data rated, -1 = padding).

    Returns ``movie_ids``, ``scores`` (``[B, max k]``, -1 / NaN padded), ``known`` and
    ``export_id`` (``[B, 1]``) by output name.
    """
    import tritonclient.http as http

    arrays = {names.INPUT_RAW_USER: users, names.INPUT_K: k}
    if exclude is not None:
        arrays[names.INPUT_EXCLUDE] = exclude
    if include_rated is not None:
        arrays[names.INPUT_INCLUDE_RATED] = include_rated
    if history is not None:
        arrays[names.INPUT_HISTORY] = history
    inputs = []
    for name, array in arrays.items():
        dtype = "BOOL" if array.dtype == np.bool_ else "INT64"
        inputs.append(http.InferInput(name, list(array.shape), dtype))
        inputs[-1].set_data_from_numpy(array)
    client = http.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
    try:
        result = client.infer(names.MODEL_RECOMMEND, inputs)
    finally:
        client.close()  # an open keep-alive connection would delay the server's shutdown
    outputs = (names.OUTPUT_RAW_ITEMS, names.OUTPUT_SCORES, names.OUTPUT_KNOWN)
    return {o: result.as_numpy(o) for o in (*outputs, names.OUTPUT_EXPORT_ID)}


def movies_path(movies: str | None, data: str | None, repo: str | None) -> tuple[Path | None, str]:
    """Where the titles come from: ``--movies``, else ``movies.csv`` beside the ETL's input
    (ETL from ``--data`` or the export manifest of ``--repo``); (None, why) when not found."""
    if movies:
        return Path(movies), "--movies"
    etl = Path(data) if data else None
    if etl is None and repo:
        model_dir = Path(repo) / names.MODEL_RECOMMEND
        version = latest_version(model_dir)
        if version is None:
            return None, f"no exported {names.MODEL_RECOMMEND} in {repo}"
        manifest = textfile.read_json(model_dir / str(version) / names.MANIFEST_FILE)
        etl = Path(manifest["source"]["etl_dir"])
    meta_path = etl / names.METADATA_FILE if etl else None
    if meta_path is None or not meta_path.is_file():
        return None, f"no ETL metadata at {meta_path}"
    ratings = (textfile.read_json(meta_path).get("input") or {}).get("path")
    if not ratings:
        return None, f"{meta_path} records no input path"
    path = Path(ratings).with_name(MOVIES_FILE)
    return (path, str(meta_path)) if path.is_file() else (None, f"no {path}")


def movie_titles(path: Path) -> dict[int, str]:
    """movieId -> title from a MovieLens ``movies.csv``."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if not {names.RAW_ITEM, "title"} <= set(reader.fieldnames or ()):
            raise ValueError(
                f"{path}: need columns {names.RAW_ITEM},title (a MovieLens movies.csv)"
            )
        return {int(row[names.RAW_ITEM]): row["title"] for row in reader}


def format_table(
    user: int, out: dict[str, np.ndarray], titles: dict[int, str], history: int = 0
) -> str:
    """The first row's recommendations as an aligned text table (``history``: movies given)."""
    known = bool(out[names.OUTPUT_KNOWN][0, 0])
    how = "NeuMF, rated movies left out" if known else "not in the training data: most popular"
    if not known and history:
        how = f"not in the training data: NeuMF from the {history} movies given, those left out"
    lines = [f"user {user} ({how}; export {int(out[names.OUTPUT_EXPORT_ID][0, 0])})"]
    rows = [("rank", "movieId", "score", "title")]
    for rank, (item, score) in enumerate(
        zip(out[names.OUTPUT_RAW_ITEMS][0], out[names.OUTPUT_SCORES][0], strict=True), 1
    ):
        if item < 0:  # padding: fewer unrated movies than k
            break
        rows.append((str(rank), str(int(item)), f"{score:.4f}", titles.get(int(item), "?")))
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    for r in rows:
        lines.append(
            "  ".join(v.rjust(w) for v, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
        )
    return "\n".join(lines)


@dataclasses.dataclass
class RecommendConfig(Config):
    """One user's top-k movies from the running server, titled (`ncf recommend`)."""

    user: int | None = setting(None, help="raw MovieLens userId (required)")
    k: int = setting(10, help="number of movies")
    url: str = setting("127.0.0.1:8000", help="tritonserver HTTP host:port")
    exclude: list[int] = setting(default_factory=list, help="movieIds never to recommend")
    include_rated: bool = flag(False, help="allow movies the user already rated")
    history: list[int] = setting(
        default_factory=list,
        help="movieIds a user outside the training data rated: scored by the model from them "
        "(cold start) instead of the popularity list",
    )
    movies: Path | None = setting(
        None, help="movies.csv with the titles (unset: found from the ETL)"
    )
    data: Path | None = setting(
        None, help="ETL directory (finds movies.csv; unset: the one --repo was exported from)"
    )
    repo: Path = setting(Path("triton_repo"), help="exported repository (finds the ETL directory)")

    def check(self) -> None:
        """Raise ValueError naming a missing or invalid setting."""
        if self.user is None:
            raise ValueError("--user: required (a raw MovieLens userId, e.g. --user 1)")
        if self.k < 1:
            raise ValueError(f"--k {self.k}: must be >= 1")


CONFIG = RecommendConfig


def run(cfg: RecommendConfig) -> int:
    """Run ``ncf recommend``: print the table; exit 1 if the server refuses the request."""
    from tritonclient.utils import InferenceServerException

    exclude = np.array([cfg.exclude], dtype=np.int64) if cfg.exclude else None
    rated = np.array([[True]]) if cfg.include_rated else None
    user = np.array([[cfg.user]], dtype=np.int64)
    history = np.array([cfg.history], dtype=np.int64) if cfg.history else None
    try:
        k = np.array([[cfg.k]], dtype=np.int64)
        out = request(cfg.url, user, k, exclude, rated, history=history)
    except InferenceServerException as exc:
        print(f"ncf recommend: the server refused: {exc.message()}", file=sys.stderr)
        return 1
    except ConnectionError as exc:
        raise ValueError(f"no tritonserver at {cfg.url} ({exc}): start `ncf serve`") from exc
    path, source = movies_path(cfg.movies, cfg.data, cfg.repo)
    if path is None:
        print(f"ncf recommend: no titles ({source}); pass --movies", file=sys.stderr)
    titles = movie_titles(path) if path else {}
    print(format_table(cfg.user, out, titles, len(cfg.history)))
    return 0
