"""Merlin-native output: every dataset reads back through merlin.io with tags and id domains."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ncf.core.names import ITEM, SCHEMA_FILE, TRAIN_DIR, USER
from ncf.models.data import load_etl, schema_cardinalities
from ncf.workflows.output import COUNT_KEYS
from tests.workflows.helpers import SMALL, etl, needs_nvtabular


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    out = tmp_path_factory.mktemp("schema") / "etl"
    return out, etl(SMALL, out, engine="pandas", partitions=2)


@needs_nvtabular
def test_every_dataset_reads_back_with_tags_domains_and_the_loader(output):
    from merlin.dataloader.torch import Loader
    from merlin.io import Dataset
    from merlin.schema import Tags

    out, meta = output
    for name, count in COUNT_KEYS.items():
        dataset = Dataset(str(out / name), engine="parquet")
        schema = dataset.schema
        assert schema.select_by_tag(Tags.USER_ID).column_names == [USER]
        assert schema.select_by_tag(Tags.ITEM_ID).column_names == [ITEM]
        assert schema.select_by_tag(Tags.CATEGORICAL).column_names == [USER, ITEM]
        for column, size in ((USER, meta["num_users"]), (ITEM, meta["num_items"])):
            domain = schema[column].int_domain
            assert (domain.min, domain.max) == (0, size - 1), (name, column)
            assert schema[column].properties["embedding_sizes"]["cardinality"] == size
        rows = 0
        for features, _ in Loader(dataset, batch_size=1 << 14, shuffle=False):
            assert features[USER].max() < meta["num_users"]
            rows += int(features[USER].shape[0])
        assert rows == meta[count], name


@needs_nvtabular
def test_a_schema_merlin_wrote_gives_its_domains(tmp_path):
    from merlin.io import Dataset
    from merlin.schema import ColumnSchema, Schema, Tags

    frame = pd.DataFrame({USER: np.arange(3, dtype=np.int64), ITEM: np.arange(3, dtype=np.int64)})
    schema = Schema(
        [
            ColumnSchema(USER, dtype=np.int64, tags=[Tags.USER_ID], properties={"domain": {"min": 0, "max": 41}}),
            ColumnSchema(ITEM, dtype=np.int64, tags=[Tags.ITEM_ID], properties={"domain": {"min": 0, "max": 6}}),
        ]
    )  # fmt: skip
    Dataset(frame, schema=schema).to_parquet(str(tmp_path), output_files=1)
    assert schema_cardinalities(tmp_path / SCHEMA_FILE) == {USER: 42, ITEM: 7}


def test_plain_parquet_readers_skip_the_schema(output):
    import pyarrow.parquet as pq

    out, meta = output
    assert pq.read_table(out / TRAIN_DIR).num_rows == meta["train_rows"]


def test_training_takes_the_table_sizes_from_the_schema(output, tmp_path):
    out, meta = output
    data = load_etl(out)
    assert (data.num_users, data.num_items) == (meta["num_users"], meta["num_items"])
    path = out / TRAIN_DIR / SCHEMA_FILE
    text = path.read_text()
    try:
        path.write_text(text.replace(f'"max": "{meta["num_items"] - 1}"', '"max": "99999"', 1))
        with pytest.raises(ValueError, match=r"item_id has 100000 ids but .* num_items="):
            load_etl(out)
        path.write_text(text.replace("intDomain", "domain"))
        with pytest.raises(ValueError, match=r"no intDomain max for \['user_id', 'item_id'\]"):
            load_etl(out)
    finally:
        path.write_text(text)
