"""Forward models (PDE solvers), one module per model; shared linear algebra in `linear.py`."""
