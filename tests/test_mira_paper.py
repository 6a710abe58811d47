"""The MIRA-paper study module: a small E.4 section reproduces the paper's reading; bad sections fail."""

import pytest

from posteriorjax.studies import mira_paper


@pytest.mark.slow
def test_e4_section_and_table():
    config = mira_paper.default_config()
    config["experiments"] = ("e4",)
    config["e4"].update(num_conditions=200, num_samples=200)
    result = mira_paper.run(config)
    rows = {(r["estimator"], r["centres"]): r for r in result["e4"]["rows"]}
    assert abs(rows["prior", "uniform"]["z_boot"]) < 3  # blind, as the paper's Table 12
    assert rows["prior", "x-dependent"]["z_boot"] < -4 and rows["prior", "x-dependent"]["tarp_ks"] > 0.3
    assert abs(rows["exact", "x-dependent"]["z_boot"]) < 3.5
    assert "| prior | x-dependent | 0.54 |" in mira_paper.table(result)
    with pytest.raises(ValueError, match="unknown section"):
        mira_paper.run({**config, "experiments": ("e9",)})
