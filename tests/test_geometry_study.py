"""The geometry study's learned section: every random stream is keyed by a configuration's name."""

import json

from configs import geometry as geometry_config

from posteriorjax.studies.geometry import study


def _config(configurations, estimators):
    config = geometry_config.get_config("tiny")
    lc = config.learned
    lc.configurations = configurations
    lc.estimators = estimators
    lc.num_train, lc.num_calibration, lc.num_test = 24, 12, 12
    lc.num_seeds, lc.num_members, lc.num_steps, lc.batch_size = 1, 2, 3, 8
    return config


def test_a_subset_of_configurations_and_families_equals_the_full_run_bit_for_bit():
    full = _config(
        (
            ("Battery M0", "interface_potential", 0, (("num_sensors", 0),)),
            ("Flooding M12", "interface_transport", 12),
        ),
        ("mlp", "gru"),
    )
    subset = _config((("Flooding M12", "interface_transport", 12),), ("gru",))
    *_, whole = study.learned(full)
    *_, part = study.learned(subset)
    dump = lambda r: json.dumps(r, sort_keys=True, default=repr)  # noqa: E731
    assert dump(part["Flooding M12"]["gru"]) == dump(whole["Flooding M12"]["gru"])
    assert dump(part["Flooding M12"]["ridge"]) == dump(whole["Flooding M12"]["ridge"])
    # and the configurations really differ from each other (not one stream reused)
    assert dump(whole["Battery M0"]["gru"]) != dump(whole["Flooding M12"]["gru"])
