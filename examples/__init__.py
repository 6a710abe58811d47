"""Out-of-tree extensions written as a user would: load with `--plugins=examples.<module>`."""
