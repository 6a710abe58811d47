"""Observation-pattern transfer (PDE-OBS): records and views, classical baselines, protocol, reports.

* `masks`     -- the PDE-OBS mask factories bit for bit (BLAKE2b record seeds),
  the nine paper views at any resolution, the mask-spec grammar and the
  balanced mixture cycle;
* `data`      -- `Dataset`, `make_dataset`, the nine views `VIEWS`, density
  views, `view_masks`, `view_inputs`, `mixture_inputs`;
* `baselines` -- Gaussian RBF interpolation and gappy POD with the
  `fit_views` / `predict` interface of the learned models (`models`);
* `protocol`  -- per-record relative L2, block validity, 9 x 9 error
  matrices, C/D, transfer ratios, layout, density and mixed-training tables;
* `report`    -- heatmaps, tables and curves;
* `pipeline`  -- the end-to-end, resumable experiment (`pipeline.run`).
"""
