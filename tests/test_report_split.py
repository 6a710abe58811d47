"""The error split of a learned sampler into the sampler's own error and the trained prior's."""

import math

import pytest

from posteriorjax.report import split, tables


def _record(sampler, guidance, case, mean_error, std_error=0.5):
    return {
        "task": "poisson_fixed", "sampler": sampler, "hparams": {"guidance": guidance}, "case": case,
        "seed": 0, "wall_time_s": 1.0, "metrics": {"mean_error": mean_error, "std_error": std_error},
    }  # fmt: skip


RECORDS = [
    # learned FunDPS: best mean error at guidance 10 (0.30 on average), oracle twin best at 100 (0.10)
    *(_record("fundps", 10.0, c, e) for c, e in enumerate((0.28, 0.32))),
    *(_record("fundps", 30.0, c, e) for c, e in enumerate((0.50, 0.60))),
    *(_record("fundps_oracle", 100.0, c, e, 0.2) for c, e in enumerate((0.09, 0.11))),
    *(_record("fundps_oracle", 300.0, c, e, 0.1) for c, e in enumerate((0.40, 0.40))),
    # a learned row without a twin, and a twin without a learned row: no split
    _record("dps", 1.0, 0, 0.7),
    _record("ddis_oracle", 1.0, 0, 0.2),
]
METRICS = (("mean_error", "Mean"), ("std_error", "Std"))


def test_pairs_only_where_both_rows_exist():
    assert split.pairs(RECORDS) == [("poisson_fixed", "fundps", "fundps_oracle")]


def test_split_reads_each_side_at_its_best_configuration():
    rows = tables.aggregate(RECORDS, ["mean_error", "std_error"])
    (row,) = split.split_rows(rows, ["mean_error", "std_error"])
    mean = row["metrics"]["mean_error"]
    assert mean["learned"] == pytest.approx(0.30) and mean["sampler"] == pytest.approx(0.10)
    assert mean["prior"] == pytest.approx(0.20)
    assert mean["at"] == ({"guidance": 10.0}, {"guidance": 100.0})
    std = row["metrics"]["std_error"]  # the oracle's best std error is at the other guidance (300)
    assert (std["sampler"], std["at"][1]) == (pytest.approx(0.1), {"guidance": 300.0})
    text = tables.split_table(RECORDS, METRICS)
    assert "| poisson_fixed | fundps | 0.3 = 0.1 + 0.2 | 0.5 = 0.1 + 0.4 |" in text
    assert tables.split_table([r for r in RECORDS if r["sampler"] != "fundps_oracle"], METRICS) == ""


def test_non_finite_side_shows_nan():
    records = [_record("fundps", 1.0, 0, math.nan), _record("fundps_oracle", 1.0, 0, 0.1)]
    assert "| poisson_fixed | fundps | NaN |" in tables.split_table(records, METRICS[:1])


def test_oracle_twin_drops_the_prior_network_and_keeps_the_rest():
    entry = {"sampler": "funddps", "options": {"num_steps": 8}, "axes": {"guidance": (1.0, 3.0)},
             "networks": {"model": "prior", "surrogate": "surrogate"}, "task_options": {},
             "tasks": ("poisson_fixed",)}  # fmt: skip
    twin = split.oracle_twin(entry)
    assert twin["options"] == {"num_steps": 8, "prior": "oracle"}
    assert twin["networks"] == {"surrogate": "surrogate"}  # the sampler's own forward model stays
    assert twin["axes"] == entry["axes"] and entry["networks"] == {"model": "prior", "surrogate": "surrogate"}
    with pytest.raises(ValueError, match="entry"):
        split.oracle_twin(twin)
