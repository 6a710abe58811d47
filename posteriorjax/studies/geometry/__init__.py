"""The observation-geometry study: `controlled` (the controlled local inverse problems) and
`study` (Tables 1-4 of the paper, run by `experiments.geometry`)."""
