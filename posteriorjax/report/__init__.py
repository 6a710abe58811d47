"""Reports of a sweep workdir: `records` (analysis of the stored records: optima, noise levels,
calibration per row), `tables` (CSV, the main table, calibration over cases), `provenance`
(the summary header, machine and versions) and `figures` (one module per figure section)."""
